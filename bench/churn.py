"""Short-lived programs: how many JIT images bpfsym and perf each keep, in one run.

    python3 bench/churn.py [--rates 10,100,1000] [--seconds 5] [--busy]

For each rate, `bpfsym record -e cpu-clock -a -- loader churn --raw` runs perf and
bpfsym side by side on the same loads (each program is closed right after
load: 2-insn programs closed right after BPF_PROG_LOAD, or with --object the
libbpf object bpf/churn.bpf.o). perf keeps a program's JIT image when its side-band thread fetched
bpf_prog_info in time (HEADER_BPF_PROG_INFO); bpfsym when the side file holds
the image. --busy keeps every CPU busy with other processes meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bpfsym.read.sidefile import read_capture  # noqa: E402


def perf_prog_ids(data: Path) -> set[int]:
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--header-only"], capture_output=True, text=True
    ).stdout
    return {int(m) for m in re.findall(r"^# bpf_prog_info (\d+):", out, re.M)}


def one_rate(rate: int, count: int, tmp: Path, raw: bool) -> tuple[float, float, float]:
    data = tmp / f"churn-{rate}.data"
    loader = REPO / "bpf" / "loader"
    out = subprocess.run(
        [sys.executable, "-m", "bpfsym", "record", "-e", "cpu-clock", "-a", "-o", str(data), "--",
         str(loader), "churn", "--raw" if raw else str(REPO / "bpf" / "churn.bpf.o"), "--count", str(count),
         "--rate", str(rate)],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    ids = json.loads(out.stdout.strip().splitlines()[-1])["prog_ids"]
    cap = read_capture(str(data) + ".bpfsym")
    progs = {p.id: p for p in cap.programs}
    named = sum(1 for i in ids if i in progs and progs[i].functions) / len(ids)
    imaged = sum(1 for i in ids if i in progs and progs[i].has_image) / len(ids)
    perf = len(perf_prog_ids(data) & set(ids)) / len(ids)
    return named, imaged, perf


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rates", default="10,100,1000")
    ap.add_argument("--seconds", type=float, default=5.0, help="churn duration per rate")
    ap.add_argument("--busy", action="store_true", help="saturate every CPU with busy loops")
    ap.add_argument(
        "--object",
        action="store_true",
        help="churn the libbpf object bpf/churn.bpf.o (programs live longer) "
        "instead of 2-insn programs closed at once",
    )
    a = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(REPO / "bpf"), "loader"], check=True)
    busy = []
    if a.busy:
        busy = [
            subprocess.Popen(["sh", "-c", "while :; do :; done"])
            for _ in range(os.cpu_count() or 1)
        ]
    try:
        with tempfile.TemporaryDirectory() as d:
            print(
                f"{'loads/s':>8} {'count':>6} {'bpfsym named':>13} {'bpfsym image':>13} {'perf image':>11}"
            )
            for rate in (int(r) for r in a.rates.split(",")):
                count = max(50, int(rate * a.seconds))
                named, imaged, perf = one_rate(rate, count, Path(d), not a.object)
                print(f"{rate:>8} {count:>6} {named:>12.1%} {imaged:>12.1%} {perf:>10.1%}")
                print(f"  images kept, bpfsym/perf: {imaged / perf if perf else float('inf'):.2f}x")
    finally:
        for p in busy:
            p.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
