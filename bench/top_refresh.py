"""One `bpfsym top` refresh with 1000 programs loaded, as a ratio to `bpftool prog show -j`.

Loads 1000 copies of a two-instruction socket filter (`r0 = 0; exit`) in
batches with pauses, measures both in the same run (median of several), then
frees the programs 100 at a time with pauses: the JIT pack allocator once
deadlocked on thousands of frees at once.

    python3 bench/top_refresh.py [-n PROGRAMS] [-r REPEATS]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's bpfsym

from bpfsym.formats import bpf as fb  # noqa: E402
from bpfsym.live.stats import RuntimeStats, prog_holders  # noqa: E402
from bpfsym.live.sys import Buffer, bpf  # noqa: E402
from bpfsym.top import render
from bpfsym.top import rows as toprows  # noqa: E402

# r0 = 0 (BPF_ALU64 | BPF_MOV | BPF_K); exit (BPF_JMP | BPF_EXIT)
INSNS = bytes([0xB7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0])
SOCKET_FILTER = 1


def load(n: int, batch: int = 50, pause: float = 0.05) -> list[int]:
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


def timed(fn: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", "--programs", type=int, default=1000)
    ap.add_argument("-r", "--repeats", type=int, default=5)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.programs + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))

    with RuntimeStats():
        fds = load(args.programs)
        try:
            t_load = toprows.Top()  # the baseline pass: also caches names
            total = len(t_load.prev.progs)
            view = toprows.View()

            def refresh() -> None:  # what the default batch view does per refresh
                ref = t_load.refresh()
                render.summary(ref, len(ref.rows))
                render.table(view.apply(ref.rows))

            def bpftool() -> None:
                subprocess.run(
                    ["bpftool", "prog", "show", "-j"], check=True, stdout=subprocess.DEVNULL
                )

            t_top = timed(refresh, args.repeats)
            t_snap = timed(t_load.sampler.snapshot, args.repeats)
            t_holders = timed(prog_holders, args.repeats)
            t_bpftool = timed(bpftool, args.repeats)
        finally:
            free(fds)
    print(f"programs loaded: {total} ({args.programs} by this benchmark)")
    print(f"bpftool prog show -j:   {t_bpftool * 1e3:8.1f} ms (median of {args.repeats})")
    print(f"bpfsym top, 1 refresh:  {t_top * 1e3:8.1f} ms")
    print(f"  counters of all:      {t_snap * 1e3:8.1f} ms")
    print(f"  holders from /proc:   {t_holders * 1e3:8.1f} ms")
    print(f"ratio top refresh / bpftool: {t_top / t_bpftool:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
