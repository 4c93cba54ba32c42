"""Annotate the hottest BPF program of a big recording: seconds beyond parsing.

    python3 bench/annotate_speed.py [--data FILE] [--seconds 25] [--freq 20000]

Without --data it records the demo workload system-wide with bpfsym record
(>= 500k samples at the defaults on 2 CPUs). It times, on the same file:
  parse    - one pass over perf.data reading every sample (bpfsym's reader)
  annotate - `bpfsym annotate -i FILE --stdio` (heat pass + disassembly + render)
and prints annotate - parse, and annotate as a ratio to `perf report --stdio
--no-children -g none` (perf itself cannot annotate BPF here: no libopcode).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _common import print_ratio, timed  # noqa: E402

from bpfsym.read.perfdata import PerfData  # noqa: E402


def record(path: Path, seconds: float, freq: int) -> None:
    subprocess.run(["make", "-s", "-C", str(REPO / "bpf"), "loader"], check=True)
    loader = str(REPO / "bpf" / "loader")
    demo = str(REPO / "bpf" / "demo.bpf.o")
    run = f"{loader} run {demo} xdp_demo --seconds {seconds}"
    subprocess.run(
        [sys.executable, "-m", "bpfsym", "record", "-e", "cpu-clock", "-F", str(freq), "-a",
         "-o", str(path), "--", "sh", "-c", f"{run} >/dev/null & {run} >/dev/null; wait"],
        check=True, cwd=REPO, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def parse_seconds(path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = 0
    with PerfData(str(path)) as pd:
        for rtype, *_ in pd.records():
            n += rtype == 9
    return time.perf_counter() - t0, n


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, help="existing perf.data (with its .bpfsym side file)")
    ap.add_argument("--seconds", type=float, default=25)
    ap.add_argument("--freq", type=int, default=20000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        data = a.data or Path(d) / "perf.data"
        if a.data is None:
            record(data, a.seconds, a.freq)
        parse, samples = parse_seconds(data)
        ann = timed(
            [sys.executable, "-m", "bpfsym", "annotate", "-i", str(data), "--stdio"],
            repeat=2,
            cwd=str(REPO),
        )
        perf = timed(
            ["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none"], repeat=2
        )
        print(f"{samples} samples in {data}")
        print(f"parse only:          {parse:.2f} s")
        print(f"bpfsym annotate:     {ann:.2f} s  ({ann - parse:.2f} s beyond parsing)")
        print_ratio("annotate vs perf report flat", ann, perf)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
