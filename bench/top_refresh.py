"""One `bpfsym top` refresh with 1000 (and 3000) programs held, as a ratio to `bpftool prog show -j`.

Loads copies of a two-instruction socket filter (`r0 = 0; exit`) in batches with
pauses and holds them by fd in this process (which then also holds 1000 program fds
for top's holder search to find). For each count, top's refresh (what `top -b` does per
refresh: read every program, find holders, compute rows, format the table) and
`bpftool prog show -j` run interleaved, REPEATS times each; min and median of both and
their ratios are printed, with the median cost of each part of the refresh. The
programs are freed 100 at a time with pauses: the JIT pack allocator once deadlocked on
thousands of frees at once.

With --syscalls, also counts system calls per refresh and per program (strace -f of a
child that marks the start of each refresh with a failing write()) and those of one
`bpftool prog show -j` (strace -c -f).

    python3 bench/top_refresh.py [-n PROGRAMS ...] [-r REPEATS] [--syscalls] [--bpfsym CHECKOUT]

--bpfsym times another checkout's bpfsym (e.g. an older commit) with this script.
Figures are noisy on a shared machine: compare ratios taken in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# r0 = 0 (BPF_ALU64 | BPF_MOV | BPF_K); exit (BPF_JMP | BPF_EXIT)
INSNS = bytes([0xB7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0])
SOCKET_FILTER = 1


def load(n: int, batch: int = 50, pause: float = 0.05) -> list[int]:
    from bpfsym.formats import bpf as fb
    from bpfsym.live.sys import Buffer, bpf

    code, lic = Buffer(len(INSNS)), Buffer(4)
    code.write(INSNS)
    lic.write(b"GPL\0")
    fds: list[int] = []
    try:
        for i in range(n):
            attr = fb.prog_load_attr.build(
                dict(
                    prog_type=SOCKET_FILTER, insn_cnt=2, insns=code.addr, license=lic.addr,
                    log_level=0, log_size=0, log_buf=0, kern_version=0, prog_flags=0,
                    prog_name=f"bench_{i}",
                )
            )  # fmt: skip
            fds.append(bpf(fb.BPF_PROG_LOAD, attr))
            if (i + 1) % batch == 0:
                time.sleep(pause)
    except BaseException:
        free(fds)
        raise
    return fds


def free(fds: list[int], batch: int = 100, pause: float = 0.2) -> None:
    for start in range(0, len(fds), batch):
        for fd in fds[start : start + batch]:
            os.close(fd)
        time.sleep(pause)


def once(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bpftool() -> None:
    subprocess.run(["bpftool", "prog", "show", "-j"], check=True, stdout=subprocess.DEVNULL)


def ms(x: float) -> str:
    return f"{x * 1e3:7.1f} ms"


def measure(n: int, repeats: int) -> dict[str, float]:
    from bpfsym.live import stats
    from bpfsym.top import render
    from bpfsym.top import rows as toprows

    fds = load(n)
    try:
        top = toprows.Top()
        try:
            view = toprows.View()
            cache = render.LineCache() if hasattr(render, "LineCache") else None
            parts: dict[str, list[float]] = {"counters": [], "holders": [], "rows": [], "table": []}

            def refresh() -> None:  # what the default batch view does per refresh
                ref = top.refresh()
                shown = view.apply(ref.rows)
                render.summary(ref, len(shown))
                render.table(shown, False, cache) if cache else render.table(shown)

            def in_parts() -> None:  # the same, timed piece by piece
                t0 = time.perf_counter()
                cur = top.sampler.snapshot()
                t1 = time.perf_counter()
                holders = top.holders.read() if hasattr(top, "holders") else stats.prog_holders()
                t2 = time.perf_counter()
                rows, _, _ = toprows.compute_rows(top.prev, cur, holders, top.ncpus)
                shown = view.apply(rows)
                t3 = time.perf_counter()
                render.table(shown, False, cache) if cache else render.table(shown)
                t4 = time.perf_counter()
                top.prev = cur
                for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                    parts[k].append(v)

            refresh()  # warm
            bpftool()
            t_top, t_tool = [], []
            for _ in range(repeats):  # interleaved: the same load on the machine for both
                t_top.append(once(refresh))
                t_tool.append(once(bpftool))
                in_parts()
            total = len(top.prev.progs)
            kind = getattr(getattr(top, "holders", None), "kind", "proc")
        finally:
            if hasattr(top, "close"):
                top.close()
    finally:
        free(fds)
    print(f"\n{total} programs ({n} held by this benchmark), holders from {kind}:")
    print(f"  bpftool prog show -j   min {ms(min(t_tool))}  median {ms(statistics.median(t_tool))}")
    print(f"  bpfsym top, 1 refresh  min {ms(min(t_top))}  median {ms(statistics.median(t_top))}")
    for k, v in parts.items():
        print(f"    {k:<10} median {ms(statistics.median(v))}")
    r_min = min(t_top) / min(t_tool)
    r_med = statistics.median(t_top) / statistics.median(t_tool)
    print(f"  ratio top / bpftool: min {r_min:.2f}x  median {r_med:.2f}x  ({repeats} runs each)")
    by = [a / b for a, b in zip(t_top, t_tool, strict=True)]  # within a round: its load shared
    print(
        f"  by round: min {min(by):.2f}x  median {statistics.median(by):.2f}x  max {max(by):.2f}x"
    )
    return {"programs": total, "min": r_min, "median": r_med}


CHILD = """
import os, sys
sys.path.insert(0, sys.argv[1])
from bpfsym.top import render, rows
top = rows.Top()
view = rows.View()
cache = render.LineCache() if hasattr(render, "LineCache") else None
totals = []
for _ in range(int(sys.argv[2])):
    try:
        os.write(987654, b"REFRESH")  # EBADF: a marker in strace's log
    except OSError:
        pass
    ref = top.refresh()
    shown = view.apply(ref.rows)
    render.table(shown, False, cache) if cache else render.table(shown)
    totals.append(ref.total)
try:
    os.write(987654, b"REFRESH")
except OSError:
    pass
print(*totals)  # after the last marker: not counted
"""

MARK = re.compile(r"write\(987654, \"REFRESH\"")
CALL = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\(")


def syscalls(checkout: Path, k: int = 5) -> None:
    """Syscalls between the markers the child writes around each refresh (strace -f)."""
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as f:
        out = subprocess.run(
            ["strace", "-f", "-o", f.name, sys.executable, "-P", "-c", CHILD, str(checkout), str(k)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        totals = [int(x) for x in out.split()]
        per: list[dict[str, int]] = []
        for line in f.read().splitlines():
            if MARK.search(line):
                per.append({})
                continue
            m = CALL.match(line)
            if m and per and "resumed>" not in line:
                per[-1][m.group(1)] = per[-1].get(m.group(1), 0) + 1
        per = per[: len(totals)]
    print(f"\nsyscalls per refresh (strace -f, between markers; {k} refreshes):")
    for counts, progs in zip(per, totals, strict=True):
        total = sum(counts.values())
        parts = ", ".join(f"{n} {c}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1]))
        print(f"  {progs} programs: {total} ({total / progs:.2f} per program): {parts}")
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as f:
        shown = subprocess.run(
            ["strace", "-f", "-c", "-o", f.name, "bpftool", "prog", "show", "-j"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        counts = {}
        for line in f.read().splitlines():
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
            if m and m.group(2) != "total":
                counts[m.group(2)] = int(m.group(1))
    n = len(json.loads(shown))
    total = sum(counts.values())
    print(
        f"bpftool prog show -j, {n} programs: {total} ({total / n:.2f} per program),"
        f" bpf() {counts.get('bpf', 0)} ({counts.get('bpf', 0) / n:.2f} per program)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", "--programs", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("-r", "--repeats", type=int, default=7)
    ap.add_argument("--syscalls", action="store_true", help="also count syscalls (strace)")
    ap.add_argument("--bpfsym", type=Path, default=ROOT, help="the checkout whose bpfsym to time")
    args = ap.parse_args()
    if args.repeats < 5:
        ap.error("at least 5 runs: min and median of fewer say little")
    sys.path.insert(0, str(args.bpfsym.resolve()))
    from bpfsym.live.stats import RuntimeStats

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(args.programs) + 1024  # the programs held, and top's own fds
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    results = []
    with RuntimeStats():
        for n in args.programs:
            results.append(measure(n, args.repeats))
            if args.syscalls:
                fds = load(n)
                try:
                    syscalls(args.bpfsym.resolve())
                finally:
                    free(fds)
    print()
    for r in results:
        print(
            f"top refresh / bpftool prog show -j, {r['programs']:.0f} programs:"
            f" min {r['min']:.2f}x median {r['median']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
