"""Prototype of `bpfsym record` with the start/stop of docs/record-startup.md:

    python -P -m bpfsym.proto_record [record's options] -- command [args]

Same options, output and side file as bpfsym.record; differences:
- /proc/kallsyms: the kernel part is read by a process started first; the [bpf] part
  only as far as perfns.SplitReader needs (image symbols), after the pinner listens.
- every existing program is pinned before the command starts (as record does), and
  fetched (fastcap, struct) by the worker while the command runs, not before.
- perf runs in a private mount namespace whose /proc/kallsyms holds the kernel part and
  the image lines (the command sees the real file), and its side-band thread is woken
  at the end (perfns.PerfWaker), unless BPFSYM_PERF_NS=0 or util-linux is missing.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

from bpfsym import __version__, capture, fastcap, perfns, perfopts, record
from bpfsym.cli import UsageError
from bpfsym.formats import perf as fp
from bpfsym.formats import pinner as fpin
from bpfsym.formats import sidefile as sf
from bpfsym.live import pinner as lpin
from bpfsym.live import progs, sideband

_MSG = lpin._MSG


class FastRecorder(record.Recorder):
    """record.Recorder with fastcap's fetch and struct-built records."""

    w: fastcap.FastWriter

    def on_record(self, cpu: int, rec: bytes, fd: int | None) -> None:
        self.w.sideband(cpu, rec)
        prog_id = sideband.load_event_id(rec)
        if prog_id is not None:
            t = sideband.bpf_event_time(rec)
            if fd is None:
                with self.lock:
                    self.counts["gone"] += 1
                self.claim(prog_id)
            elif self.claim(prog_id):
                self.work.put(("sideband", prog_id, fd, t))
            else:
                os.close(fd)
        elif sideband.record_type(rec) == fp.RECORD_BPF_EVENT:
            with self.lock:
                self.unloads += 1
        elif sideband.record_type(rec) == fp.RECORD_LOST:
            with self.lock:
                self.lost += sideband.lost_count(rec)
            self.work.put(("rescan", 0, None, -1))

    def _work(self) -> None:
        # BPFSYM_PROTO_NICE=N: the fetch worker at nice N (Linux nice is per thread), so
        # that a loader the recorder watches gets the CPU first; references are held
        # meanwhile, so a slower fetch loses nothing
        nice = int(os.environ.get("BPFSYM_PROTO_NICE", "0"))
        if nice:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        super()._work()

    def fetch(self, prog_id: int, fd: int, origin: str, load_time: int) -> None:
        try:
            got = fastcap.fetch_blobs(fd)
        except OSError as e:
            self.note(f"program {prog_id}: info fetch failed: {e.strerror}")
            return
        finally:
            os.close(fd)
        self.w.put_program(prog_id, origin, load_time, got.missing, got.blobs)
        with self.lock:
            self.counts[origin] += 1
            if not got.blobs.get("jited"):
                self.counts["no_image"] += 1


class FastPinnerClient(lpin.PinnerClient):
    """PinnerClient whose receivers ask recvmsg for 64 KB, not 1 MB: Python allocates the
    whole buffer on every call (13.9 µs a message with 1 MB, 3.0 µs with 64 KB, measured
    with one fd and 150 bytes per message); the pinner's messages are a few records."""

    def _receive(self, sock: socket.socket) -> None:
        buf = bytearray()
        fds: list[int] = []
        try:
            while True:
                try:
                    data, got, _flags, _addr = socket.recv_fds(sock, 1 << 16, fpin.MAX_FDS)
                except OSError:
                    break
                if not data:
                    break
                buf += data
                fds.extend(got)
                while len(buf) >= _MSG.size:
                    length, nfds = _MSG.unpack_from(buf)
                    if len(buf) < _MSG.size + length or len(fds) < nfds:
                        break
                    mine, fds = fds[:nfds], fds[nfds:]
                    self._dispatch(bytes(buf[_MSG.size : _MSG.size + length]), mine)
                    del buf[: _MSG.size + length]
        finally:
            self.ready.set()


def run(argv: list[str]) -> int:
    t0 = time.perf_counter()
    reader = perfns.SplitReader()  # first: the kernel part reads while everything else starts
    r = record.parse(argv)
    if not r.no_perf:
        perf = __import__("shutil").which(r.perf)
        if perf is None:
            raise UsageError(f"perf not found ('{r.perf}')")
        r.perf = perf
        # ~15 ms (`perf record -h`), while the kallsyms reader runs
        perf_opts = perfopts.check(r.perf_args, perfopts.option_table(perf))
    else:
        perf_opts = perfopts.check(
            r.perf_args,
            perfopts.OptionTable({"-o": True, "--output": True, "-k": True, "--clockid": True}),
        )
    if perf_opts.errors:
        raise UsageError(perf_opts.errors[0])
    side = r.side or perf_opts.output + ".bpfsym"
    writer = fastcap.FastWriter(side, os.environ.get("BPFSYM_PROTO_COMPRESS", "1") != "0")
    timing: dict[str, float] = {}
    try:
        start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        fastcap.put_value(
            writer, sf.HEADER,
            {**capture.identity(), "version": sf.VERSION, "byteorder": sys.byteorder,
             "clock_id": -1 if perf_opts.clockid is None else perf_opts.clockid,
             "start_time": start, "tool_version": __version__},
        )  # fmt: skip
        sysctls = capture.read_sysctls()
        fastcap.put_value(writer, sf.SYSCTLS, [{"name": k, "value": v} for k, v in sysctls.items()])
        rec = FastRecorder(writer)
        client = FastPinnerClient(r.ring_pages, perf_opts.clockid, rec.on_record, rec.on_control)
        if not client.ready.wait(30) or any(w.startswith("error:") for w in rec.warnings):
            client.stop()
            raise PermissionError(1, "side-band listener did not start")
        timing["pinner ready"] = time.perf_counter() - t0
        reader.go()
        pinned = rec.snapshot_pin()
        timing["snapshot pinned"] = time.perf_counter() - t0
        for prog_id, fd in pinned:  # fetched by the worker while the command runs
            rec.work.put(("snapshot", prog_id, fd, -1))
        kernel, images, kstatus = reader.result()
        timing["kallsyms split"] = time.perf_counter() - t0
        writer.write_later(sf.KALLSYMS, kernel)
        writer.write_later(sf.KALLSYMS, images)
        waker = None
        if r.no_perf:
            cmd = r.command
        else:
            perf_cmd = [r.perf, "record", *r.perf_args]
            tools = perfns.namespace_tools()
            if tools and os.environ.get("BPFSYM_PERF_NS", "1") != "0":
                kfile = perfns.private_kallsyms(kernel, images)
                cmd = perfns.perf_in_namespace(perf_cmd, r.command, kfile, tools)
            else:
                cmd = [*perf_cmd, "--", *r.command]
        child = subprocess.Popen(cmd)  # unshare and sh exec: its pid becomes perf's
        forward = record._forward_signals(child)
        timing["command started"] = time.perf_counter() - t0
        if not r.no_perf and os.environ.get("BPFSYM_PERF_WAKE", "1") != "0":
            waker = perfns.PerfWaker(child.pid)
            waker.start()
        status = child.wait()
        forward()
        timing["command done"] = time.perf_counter() - t0
        if waker is not None:
            waker.stop.set()
            waker.join()
        client.stop()
        rec.finish()
        writer.flush_programs()
        timing["programs written"] = time.perf_counter() - t0
        fastcap.put_value(
            writer, sf.END,
            {"time": time.clock_gettime_ns(time.CLOCK_MONOTONIC), "lost": rec.lost,
             "programs": len(rec.seen), "exit_status": status},
        )  # fmt: skip
        c = rec.counts
        print(
            f"[ bpfsym record (prototype): {c['snapshot']} programs at start, "
            f"{c['sideband'] + c['rescan'] + c['gone']} loaded during capture, "
            f"{c['no_image']} without JIT image, {rec.lost} lost records; "
            f"kallsyms: {kstatus}; perf woken {waker.wakes if waker else 0} times ]",
            file=sys.stderr,
        )
        if os.environ.get("BPFSYM_PROTO_TIMING"):
            print(
                "[ " + ", ".join(f"{k} {v:.3f}" for k, v in timing.items()) + " ]", file=sys.stderr
            )
        return status if status >= 0 else 128 - status
    finally:
        writer.close()


def main() -> None:
    try:
        code = run(sys.argv[1:])
    except UsageError as e:
        print(f"bpfsym record: {e}", file=sys.stderr)
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    argparse  # noqa: B018 - the same imports as record's command
    progs  # noqa: B018
    main()
