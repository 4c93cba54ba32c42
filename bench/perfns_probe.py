"""Checks and measurements for record's start/stop path (docs/record-startup.md:
live/kallsyms_split.py, live/perf_process.py, the struct writer of read/sidefile.py),
against perf's own behaviour.

    python3 -P bench/perfns_probe.py check             # the writer builds construct's bytes
    python3 -P bench/perfns_probe.py opens  [--programs N]   # perf's kallsyms reads
    python3 -P bench/perfns_probe.py time   [--programs N] [--runs R]
    python3 -P bench/perfns_probe.py report [--programs N]   # stock perf report, both ways
    python3 -P bench/perfns_probe.py split  [--programs N]   # SplitReader vs a full read

`time` runs `perf record -a -e cpu-clock -o X -- true` plainly, in the private mount
namespace (perf_process.perf_argv), and each with perf_process.PerfWaker, interleaved.
`report` records the same workload both ways — held programs test-run (they existed at
start), and bpf/churn.bpf.o churned with test runs (loaded during the run) — and
compares what stock `perf report` names, the BPF records perf wrote (perf report -D),
HEADER_BPF_PROG_INFO entries and the kernel map's ref-reloc symbol.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _progs  # noqa: E402

from bpfsym.formats import bpf as fb  # noqa: E402
from bpfsym.formats import sidefile as sf  # noqa: E402
from bpfsym.live import bpf_images, perf_process, progs  # noqa: E402
from bpfsym.live.prestart import SplitKallsyms  # noqa: E402
from bpfsym.live.sys import Buffer, bpf  # noqa: E402
from bpfsym.read.sidefile import SideFileWriter, program_payload  # noqa: E402


def check() -> int:
    """The struct writer against the construct declarations, on every program of this host:
    PROGRAM payloads, and whole side files written both ways."""
    ids = list(progs.iter_ids())
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        slow, fast = SideFileWriter(f"{d}/slow"), SideFileWriter(f"{d}/fast")
        for prog_id in ids:
            try:
                fd = progs.fd_by_id(prog_id)
            except OSError:
                continue
            try:
                got = progs.fetch_blobs(fd)
            finally:
                os.close(fd)
            value = {"prog_id": prog_id, "origin": "sideband", "load_time": 12345,
                     "missing": got.missing,
                     "blobs": [{"name": k, "data": v} for k, v in got.blobs.items()]}  # fmt: skip
            payload = sf.program.build(value)
            if payload != program_payload(prog_id, "sideband", 12345, got.missing, got.blobs):
                bad += 1
                print(f"program {prog_id}: the struct payload differs")
            slow.write(sf.PROGRAM, payload)
            fast.put_program(prog_id, "sideband", 12345, got.missing, got.blobs)
            fast.flush()  # the same order in both files
            slow.write(sf.SIDEBAND, sf.sideband.build({"cpu": 1, "record": payload[:64]}), False)
            fast.sideband(1, payload[:64])
        slow.close()
        fast.close()
        same_file = Path(f"{d}/slow").read_bytes() == Path(f"{d}/fast").read_bytes()
    print(f"{len(ids)} programs: {bad} differ; side files byte-identical: {same_file}")
    return 1 if bad or not same_file else 0


def split_now() -> tuple[bytes, bytes, str]:
    r = SplitKallsyms()
    try:
        saw = r.question()
        if saw is not None:
            r.answer(bpf_images.expected(check_xdp=saw != "d").answer())
        return r.result()
    finally:
        r.close()


def _ns_cmd(perf_cmd: list[str], command: list[str]) -> tuple[list[str], str]:
    tools, missing = perf_process.namespace_tools()
    assert not missing, f"util-linux {missing} needed"
    kernel, images, _status = split_now()
    path = perf_process.private_kallsyms(kernel + images)
    return perf_process.perf_argv(perf_cmd, command, path, tools), path


def run_perf(out: Path, ns: bool, wake: bool, command: list[str], extra: list[str] = ()) -> float:  # type: ignore[assignment]
    perf_cmd = ["perf", "record", "-q", *extra, "-a", "-e", "cpu-clock", "-o", str(out)]
    t0 = time.perf_counter()
    cmd, path = _ns_cmd(perf_cmd, command) if ns else ([*perf_cmd, "--", *command], "")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    waker = perf_process.PerfWaker(p.pid, "perf") if wake else None
    if waker:
        waker.start()
    if p.wait() != 0:
        raise SystemExit(f"{cmd}: failed")
    if waker:
        waker.stop.set()
        waker.join()
    if path:
        perf_process.remove_file(path)
    return time.perf_counter() - t0


def opens() -> int:
    with tempfile.TemporaryDirectory() as d:
        for ns in (False, True):
            trace = Path(d) / "strace"
            perf_cmd = ["strace", "-f", "-tt", "-e", "trace=openat,read,close", "-o", str(trace),
                        "perf", "record", "-q", "-a", "-e", "cpu-clock", "-o", f"{d}/x.data"]  # fmt: skip
            cmd, path = _ns_cmd(perf_cmd, ["true"]) if ns else ([*perf_cmd, "--", "true"], "")
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            if path:
                perf_process.remove_file(path)
            took = time.perf_counter() - t0
            reads = _kallsyms_reads(trace)
            print(f"{'namespace' if ns else 'plain    '}: {took:.2f} s under strace; "
                  f"{len(reads)} opens of /proc/kallsyms:")  # fmt: skip
            for at, dur, nbytes in reads:
                print(f"    at {at:6.2f} s  {dur:6.3f} s  {nbytes / 1e6:6.2f} MB")
    return 0


def _kallsyms_reads(trace: Path) -> list[tuple[float, float, int]]:
    open_fd: dict[tuple[str, int], list[float]] = {}
    done: list[tuple[float, float, int]] = []
    t_first = None
    for line in trace.read_text().splitlines():
        m = re.match(r"(\d+)\s+(\d+):(\d+):([\d.]+) (\w+)\((.*)\) += (-?\d+)", line)
        if not m:
            continue
        pid, h, mi, s, call, args, ret = m.groups()
        t = int(h) * 3600 + int(mi) * 60 + float(s)
        t_first = t if t_first is None else t_first
        r = int(ret)
        if call == "openat" and '"/proc/kallsyms"' in args and r >= 0:
            open_fd[(pid, r)] = [t, 0]
        elif call in ("read", "close"):
            key = (pid, int(args.split(",")[0]))
            if key not in open_fd:
                continue
            if call == "read":
                open_fd[key][1] += max(r, 0)
            else:
                t0, n = open_fd.pop(key)
                done.append((t0 - (t_first or 0), t - t0, int(n)))
    return done


def timing(runs: int) -> int:
    ways = [("plain", False, False), ("plain + wake", False, True),
            ("namespace", True, False), ("namespace + wake", True, True)]  # fmt: skip
    got: dict[str, list[float]] = {w[0]: [] for w in ways}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(runs):
            for name, ns, wake in ways:
                got[name].append(run_perf(Path(d) / "x.data", ns, wake, ["true"]))
    base = statistics.median(got["plain"])
    for name, ts in got.items():
        med = statistics.median(ts)
        print(f"  perf record -a -- true, {name:<17} min {min(ts):5.2f} s  median {med:5.2f} s"
              f"  ({med / base:.2f}x plain)")  # fmt: skip
    return 0


def _packet() -> bytes:
    eth = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
    ip = bytes([0x45, 0, 0x03, 0xF2, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2])
    body = bytes((i * 37 + 11) & 0xFF for i in range(1024 - len(eth) - len(ip)))
    return eth + ip + body


def run_held(pins: list[Path], seconds: float) -> None:
    """BPF_PROG_TEST_RUN the pinned programs in turn for `seconds` (they predate the run)."""
    pkt = _packet()
    buf = Buffer(len(pkt))
    buf.write(pkt)
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        path = ctypes.create_string_buffer(str(pins[i % len(pins)]).encode())
        fd = bpf(7, bytes(ctypes.c_uint64(ctypes.addressof(path))) + bytes(8))  # BPF_OBJ_GET
        try:
            attr = fb.test_run_attr.build(
                {"prog_fd": fd, "retval": 0, "data_size_in": len(pkt), "data_size_out": 0,
                 "data_in": buf.addr, "data_out": 0, "repeat": 2000, "duration": 0,
                 "ctx_size_in": 0, "ctx_size_out": 0, "ctx_in": 0, "ctx_out": 0, "flags": 0,
                 "cpu": 0, "batch_size": 0}
            )  # fmt: skip
            bpf(fb.BPF_PROG_TEST_RUN, attr)
        finally:
            os.close(fd)
        i += 1


def _perf_report(data: Path) -> tuple[Counter[str], int]:
    """stock perf report: samples per symbol in [bpf]-like DSOs (bpf_prog_*), and in
    unresolved kernel-module-area addresses."""
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "-q", "--sort", "sym", "-F", "sample,sym"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    named: Counter[str] = Counter()
    raw = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        n, sym = int(parts[0]), parts[-1]
        if (
            sym.startswith("bpf_prog_")
            or sym.startswith("bpf_dispatcher")
            or sym.startswith("bpf_trampoline")
        ):
            named[sym] += n
        elif re.fullmatch(r"0xffffffffc[0-9a-f]+", sym):
            raw += n
    return named, raw


def _perf_records(data: Path) -> dict[str, object]:
    dump = subprocess.run(
        ["perf", "report", "-i", str(data), "-D"], capture_output=True, text=True
    ).stdout
    head = subprocess.run(["perf", "report", "-i", str(data), "--header-only"], capture_output=True,
                          text=True).stdout  # fmt: skip
    kmap = re.search(
        r"PERF_RECORD_MMAP -1/0: \[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+)\]: x \[kernel\.kallsyms\](\S*)",
        dump,
    )
    return {
        "KSYMBOL": len(re.findall(r"PERF_RECORD_KSYMBOL", dump)),
        "BPF_EVENT": len(re.findall(r"PERF_RECORD_BPF_EVENT", dump)),
        "bpf_prog_info": len(re.findall(r"^# bpf_prog_info \d+", head, re.M)),
        "kernel map": kmap.group(0).split(": x ")[1] + f" @ {kmap.group(3)}" if kmap else "none",
        "module maps": len(re.findall(r"PERF_RECORD_MMAP -1/0: .*: x /lib/modules", dump)),
        "dispatcher ksymbol": "bpf_dispatcher_xdp" in dump,
    }


def report(seconds: float) -> int:
    churner = Path(tempfile.mkdtemp()) / "churner"
    subprocess.run(["gcc", "-O2", str(REPO / "bench" / "churner.c"), "-o", str(churner), "-lbpf"],
                   check=True)  # fmt: skip
    pins = sorted(p for p in _progs.BPFFS.glob("bpfsym-bench-*/p*"))[:50]
    me = [sys.executable, "-P", os.path.abspath(__file__), "_workload", str(seconds), str(churner)]
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for name, ns, wake in (
            ("plain perf", False, False),
            ("perf in namespace + wake", True, True),
        ):
            out = Path(d) / f"{'ns' if ns else 'plain'}.data"
            took = run_perf(out, ns, wake, me)
            named, raw = _perf_report(out)
            results[name] = (took, named, raw, _perf_records(out))
    print(f"held programs test-run: {len(pins)} of them; churn 100/s with test runs, {seconds:g} s")
    for name, (took, named, raw, recs) in results.items():
        total = sum(named.values())
        print(f"\n{name}: {took:.2f} s")
        print(
            f"  perf report: {total} samples named in {len(named)} BPF symbols, {raw} raw [bpf] addresses"
        )
        for k, v in recs.items():
            print(f"  {k}: {v}")
        kinds = Counter(re.sub(r"^bpf_prog_[0-9a-f]{16}_?", "", s) or "(no name)" for s in named)
        print(
            "  BPF functions by name (distinct symbols): "
            + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        )
    return 0


def split_probe() -> int:
    t0 = time.perf_counter()
    n = 0
    with open("/proc/kallsyms", "rb") as f:
        for _ in f:
            n += 1
    full = time.perf_counter() - t0
    t0 = time.perf_counter()
    kernel, images, status = split_now()
    took = time.perf_counter() - t0
    nimg = images.count(b"\n")
    print(f"full read: {n} lines {full:.3f} s; split: kernel {len(kernel) / 1e6:.2f} MB, "
          f"{nimg} image lines, {took:.3f} s ({status})")  # fmt: skip
    print(images.decode().rstrip())
    return 0


def _workload(seconds: float, churner: str) -> int:
    pins = sorted(p for p in _progs.BPFFS.glob("bpfsym-bench-*/p*"))[:50]
    t = threading.Thread(target=run_held, args=(pins, seconds)) if pins else None
    if t:
        t.start()
    subprocess.run([churner, str(REPO / "bpf" / "churn.bpf.o"), "--rate", "100", "--seconds",
                    str(seconds), "--test-run", "20000"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    if t:
        t.join()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("what", choices=["check", "opens", "time", "report", "split", "_workload"])
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--programs", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    if a.what == "_workload":
        return _workload(float(a.rest[0]), a.rest[1])
    with _progs.held(a.programs):
        n, lines = _progs.count_now()
        print(f"# {n} programs on the host, {lines} [bpf] kallsyms lines (shared machine: noisy)")
        if a.what == "check":
            return check()
        if a.what == "opens":
            return opens()
        if a.what == "time":
            return timing(a.runs)
        if a.what == "split":
            return split_probe()
        return report(a.seconds)


if __name__ == "__main__":
    raise SystemExit(main())
