"""The recorder: perf record as a child, the pinner processes, the snapshot of every BPF
program, and every program that loads later, written to the side file as it arrives.

On a host with thousands of programs (docs/record-startup.md) nothing here reads the
whole of /proc/kallsyms: the kernel part and the image lines come from the split reader
(live/kallsyms_split.py) started before record's imports, every existing program is
pinned before the command starts and fetched by the worker thread while it runs, and
perf runs in a private mount namespace with a kernel-only /proc/kallsyms
(live/perf_process.py), its side-band thread woken once the workload is done.
"""

from __future__ import annotations

import errno
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bpfsym import __version__
from bpfsym.capture import perf_options as perfopts
from bpfsym.capture import snapshot as capture
from bpfsym.capture.args import RecordArgs as RecordArgs  # its home: parsed before imports
from bpfsym.errors import UsageError
from bpfsym.formats import perf as fp
from bpfsym.formats import sidefile as sf
from bpfsym.live import bpf_images, host, perf_process, progs, sideband
from bpfsym.live import pinner as lpin
from bpfsym.live.prestart import Prestart, SplitKallsyms
from bpfsym.read.sidefile import SideFileWriter


class Recorder:
    """Writes the side file: snapshot, side-band records, program info as it arrives."""

    def __init__(self, writer: SideFileWriter) -> None:
        self.w = writer
        self.lock = threading.Lock()
        self.seen: set[int] = set()
        self.work: queue.Queue[tuple[str, int, int | None, int] | None] = queue.Queue()
        self.counts = {"snapshot": 0, "sideband": 0, "rescan": 0, "gone": 0, "no_image": 0}
        self.unloads = 0
        self.unloaded: set[int] = set()
        self.lost = 0
        self.warnings: list[str] = []
        self.max_id = 0
        self.images: list[str] = []  # kallsyms lines of image symbols made during capture
        # the fetch gives way to the programs being recorded; references held meanwhile:
        # a quarter of the fd limit at most
        self.backseat = host.Backseat(min(2000, host.nofile_limit() // 4))
        self.worker = threading.Thread(target=self._work, daemon=True)
        self.worker.start()

    def claim(self, prog_id: int) -> bool:
        with self.lock:
            if prog_id in self.seen:
                return False
            self.seen.add(prog_id)
            self.max_id = max(self.max_id, prog_id)
            return True

    # called from the pinner client's receiver thread, in ring order
    def on_record(self, cpu: int, rec: bytes, fd: int | None) -> None:
        self.w.sideband(cpu, rec)
        rtype = sideband.record_type(rec)
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
        elif rtype == fp.RECORD_BPF_EVENT:
            gone = sideband.unload_event_id(rec)
            with self.lock:
                self.unloads += 1
                if gone is not None:
                    self.unloaded.add(gone)
        elif rtype == fp.RECORD_LOST:  # re-enumerate what still exists
            with self.lock:
                self.lost += sideband.lost_count(rec)
            self.work.put(("rescan", 0, None, -1))
        elif rtype == fp.RECORD_KSYMBOL and (image := sideband.image_ksymbol(rec)):
            # a trampoline or dispatcher made after the kallsyms read: no program's, so
            # a KALLSYMS line at the end names it (as /proc/kallsyms would have)
            self.images.append(f"{image[0]:016x} t {image[2]}\t[bpf]\n")

    def on_control(self, text: str) -> None:
        if text.startswith("warn:") or text.startswith("error:"):
            self.warnings.append(text)
        if text.startswith("warn:"):
            print(f"bpfsym record: {text}", file=sys.stderr)

    def _work(self) -> None:
        self.backseat.enter()
        while (item := self.work.get()) is not None:
            self.backseat.check(self.work.qsize())
            origin, prog_id, fd, t = item
            if origin == "rescan":
                self.rescan()
            elif fd is not None:
                self.fetch(prog_id, fd, origin, t)

    def rescan(self) -> None:
        for prog_id in progs.iter_ids():
            if not self.claim(prog_id):
                continue
            try:
                fd = progs.fd_by_id(prog_id)
            except OSError:
                continue
            self.fetch(prog_id, fd, "rescan", -1)

    def fetch(self, prog_id: int, fd: int, origin: str, load_time: int) -> None:
        try:
            got = progs.fetch_blobs(fd)
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

    def note(self, text: str) -> None:
        self.w.put(sf.NOTE, {"time": time.clock_gettime_ns(time.CLOCK_MONOTONIC), "text": text})

    def snapshot_pin(self) -> list[tuple[int, int]]:
        """Take a reference on every existing program (fast, before the command starts)."""
        pinned = []
        for prog_id in progs.iter_ids():
            if not self.claim(prog_id):
                continue
            try:
                pinned.append((prog_id, progs.fd_by_id(prog_id)))
            except OSError as e:
                self.note(f"program {prog_id}: gone before the snapshot pinned it ({e.strerror})")
        return pinned

    def finish(self) -> None:
        self.backseat.hurry()
        self.work.put(None)
        self.worker.join()


WAKER_WAIT = 5.0  # seconds the stop path waits for the perf waker's last load


@dataclass
class Launch:
    """The command (or perf with it) started, and what its stop must undo."""

    child: subprocess.Popen[bytes]
    kallsyms_file: str = ""  # perf's private /proc/kallsyms, removed at the end
    waker: perf_process.PerfWaker | None = None


def record(
    r: RecordArgs,
    perf_opts: perfopts.PerfOptions,
    writer: SideFileWriter,
    stats: _StatsSampler | None,
    early: Prestart | None = None,
) -> int:
    early = early or Prestart()
    probe = _namespace_probe(r)
    ident = host.identity()
    start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    writer.put(
        sf.HEADER,
        {**ident, "version": sf.VERSION, "byteorder": sys.byteorder,
         "clock_id": -1 if perf_opts.clockid is None else perf_opts.clockid,
         "start_time": start, "tool_version": __version__},
    )  # fmt: skip
    sysctls = host.read_sysctls()
    writer.put(sf.SYSCTLS, [{"name": k, "value": v} for k, v in sysctls.items()])
    for w in capture.sysctl_warnings(sysctls):
        print(f"bpfsym record: warning: {w}", file=sys.stderr)
    rec = Recorder(writer)
    writer.backseat = host.Backseat(4000)  # queued PROGRAM payloads: ~8 KB each
    client = lpin.PinnerClient(
        r.ring_pages, perf_opts.clockid, rec.on_record, rec.on_control, early.take_pinner()
    )
    if not client.ready.wait(30) or any(w.startswith("error:") for w in rec.warnings):
        client.stop()
        early.cancel()
        err = next((w for w in rec.warnings if w.startswith("error:")), "pinner did not start")
        raise PermissionError(errno.EPERM, f"side-band listener: {err.removeprefix('error: ')}")
    # from here on every new program and image symbol arrives as a side-band record
    pinned = rec.snapshot_pin()
    try:
        kernel, images = image_kallsyms(early.kallsyms)
    except OSError:
        client.stop()
        raise
    finally:
        early.kallsyms.close()
    for prog_id, fd in pinned:  # fetched by the worker while the command runs
        rec.work.put(("snapshot", prog_id, fd, -1))
    writer.write_later(sf.KALLSYMS, kernel)  # the kernel part, then trampolines, dispatchers
    writer.write_later(sf.KALLSYMS, images)
    if stats is not None:
        stats.start(writer)
    try:
        launch = _start_command(r, perf_opts, kernel + images, probe)
    except UsageError:
        client.stop()
        raise
    forward = _forward_signals(launch.child)
    status = launch.child.wait()
    forward()
    writer.hurry()  # the stop path waits for nothing but the writes
    rec.backseat.hurry()
    if launch.waker is not None:
        launch.waker.stop.set()
        launch.waker.join(WAKER_WAIT)
        if launch.waker.is_alive():  # in a BPF load the kernel has not finished
            rec.on_control(
                f"warn: a {perf_process.WAKE_NAME} load has not returned after {WAKER_WAIT:g} s"
                " (the kernel's BPF loads are stalled); not waited for"
            )
    if launch.kallsyms_file:
        perf_process.remove_file(launch.kallsyms_file)
    if stats is not None:
        stats.stop()
    client.stop()
    rec.finish()
    wake = set(launch.waker.ids) if launch.waker is not None else set()
    if wake:
        rec.note(
            f"programs {', '.join(map(str, sorted(wake)))} ({perf_process.WAKE_NAME}): loaded "
            "and closed by bpfsym record after the command, to end perf's side-band wait"
        )
    if rec.images:
        writer.write(sf.KALLSYMS, "".join(rec.images).encode())
    writer.flush()
    writer.put(
        sf.END,
        {"time": time.clock_gettime_ns(time.CLOCK_MONOTONIC), "lost": rec.lost,
         "programs": len(rec.seen), "exit_status": status},
    )  # fmt: skip
    c = rec.counts
    mine = len(wake & rec.seen)  # loaded during the capture, all of them
    during = c["sideband"] + c["rescan"] + c["gone"] - mine
    own = f", {mine} {perf_process.WAKE_NAME} (bpfsym's own)" if wake else ""
    unloads = rec.unloads - len(wake & rec.unloaded)
    print(
        f"[ bpfsym record: {c['snapshot']} programs at start, {during} "
        f"loaded during capture ({c['gone']} gone before pinning), {unloads} "
        f"unloaded, {c['no_image']} without JIT image, {rec.lost} lost records{own} ]",
        file=sys.stderr,
    )
    print(
        f"[ bpfsym record: side file {writer.path} ({os.path.getsize(writer.path) / 1e6:.3f} MB) ]",
        file=sys.stderr,
    )
    return status if status >= 0 else 128 - status


def image_kallsyms(reader: SplitKallsyms) -> tuple[bytes, bytes]:
    """(the kernel part of /proc/kallsyms, its image lines), from the split reader: called
    once the side-band listener is up, which reports every image symbol made later."""
    saw = reader.question()
    if saw is not None:
        reader.answer(bpf_images.expected(check_xdp=saw != "d").answer())
    kernel, images, _status = reader.result()
    return kernel, images


def _namespace_probe(r: RecordArgs) -> perf_process.NamespaceProbe | None:
    if r.no_perf or not r.perf_namespace:
        return None
    tools, missing = perf_process.namespace_tools()
    if missing:
        print(
            f"bpfsym record: no {', '.join(missing)} here (util-linux): perf reads the "
            "host's /proc/kallsyms (slow with many BPF programs)",
            file=sys.stderr,
        )
        return None
    return perf_process.NamespaceProbe(tools["unshare"])


def _start_command(
    r: RecordArgs,
    perf_opts: perfopts.PerfOptions,
    kallsyms: bytes = b"",
    probe: perf_process.NamespaceProbe | None = None,
) -> Launch:
    if r.no_perf:
        return Launch(_popen(r.command))
    perf_cmd = [r.perf, "record", *r.perf_args]
    launch: Launch | None = None
    if probe is not None:
        err = probe.error()
        if err:
            print(
                f"bpfsym record: no private mount namespace for perf ({err}): perf reads "
                "the host's /proc/kallsyms (slow with many BPF programs)",
                file=sys.stderr,
            )
        else:
            tools, _missing = perf_process.namespace_tools()
            path = perf_process.private_kallsyms(kallsyms)
            argv = perf_process.perf_argv(perf_cmd, r.command, path, tools)
            try:
                launch = Launch(_popen(argv), kallsyms_file=path)  # unshare, sh: exec perf
            except UsageError:
                perf_process.remove_file(path)
                raise
    if launch is None:
        launch = Launch(_popen([*perf_cmd, "--", *r.command]))
    launch.waker = perf_process.PerfWaker(launch.child.pid, r.perf)
    launch.waker.start()
    return launch


def _popen(cmd: list[str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(cmd)
    except OSError as e:
        raise UsageError(f"cannot run {cmd[0]}: {e.strerror}") from None


def _forward_signals(child: subprocess.Popen[bytes]) -> Callable[[], None]:
    """SIGINT/SIGTERM go to perf (or the command) and perf's children; returns a restore function."""

    def forward(signum: int, _frame: object) -> None:
        for pid in [child.pid, *host.child_pids(child.pid)]:
            try:
                os.kill(pid, signum)
            except OSError:
                pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return restore


class _StatsSampler:
    """--stats: holds a BPF_ENABLE_RUNTIME_STATS fd from the start (never the sysctl) and,
    once started, writes every program's counters to the side file each interval."""

    def __init__(self, interval: float) -> None:
        from bpfsym.live import stats as lstats

        self._lstats = lstats
        self.interval = interval
        self.holder = lstats.RuntimeStats()
        try:
            self.holder.open()
        except lstats.StatsUnavailable as e:
            raise UsageError(f"--stats: {e}") from None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, writer: SideFileWriter) -> None:
        def sample() -> None:
            while True:
                rows = self._lstats.sample_all()
                writer.put(
                    sf.STATS,
                    {"time": time.clock_gettime_ns(time.CLOCK_MONOTONIC),
                     "progs": [{"prog_id": p[0], "run_time_ns": p[1], "run_cnt": p[2],
                                "recursion_misses": p[3]} for p in rows]},
                )  # fmt: skip
                if self._stop.wait(self.interval):
                    return

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.holder.close()
