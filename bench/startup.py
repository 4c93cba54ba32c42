"""Start and stop of `record` on a host with many BPF programs: bpfsym against perf.

    python3 -P bench/startup.py [--programs 0,1000,3000] [--runs 3] [--modes ...]

For each N, N copies of demo.bpf.o's xdp_demo (a main function calling three
sub-programs: four [bpf] kallsyms lines each) are held loaded (bench/_progs.py), then
these run interleaved, --runs times each:

  perf       perf record -a -e cpu-clock -o X -- true
  bpfsym     python -P -m bpfsym record -a -e cpu-clock -o X -- true
  no-perf    python -P -m bpfsym record --no-perf -o X -- true
  no-ns      python -P -m bpfsym record --no-perf-namespace -a -e cpu-clock -o X -- true

Printed per N and mode: min and median wall time, the ratio of medians to perf's, and
of bpfsym's runs the images kept of the held programs (their JIT image in the side file,
read with bpfsym's reader), and perf's: held programs with a bpf_prog_info in perf.data.
Wall time includes the interpreter's start. The machine is shared: figures are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _progs  # noqa: E402
from churn import perf_prog_ids  # noqa: E402

from bpfsym.live import progs  # noqa: E402
from bpfsym.read.sidefile import read_capture  # noqa: E402

MODES = ("perf", "bpfsym", "no-perf", "no-ns")


def command(mode: str, out: Path, perf: str) -> list[str]:
    rec = ["-a", "-e", "cpu-clock", "-o", str(out), "--", "true"]
    py = [sys.executable, "-P", "-m"]
    return {
        "perf": [perf, "record", *rec],
        "bpfsym": [*py, "bpfsym", "record", *rec],
        "no-perf": [*py, "bpfsym", "record", "--no-perf", "-o", str(out), "--", "true"],
        "no-ns": [*py, "bpfsym", "record", "--no-perf-namespace", *rec],
    }[mode]


def images_kept(mode: str, out: Path, held: set[int]) -> tuple[int | None, int | None]:
    """(held programs with their image in the side file, held programs perf.data has)."""
    side = perf = None
    if mode != "perf":
        cap = read_capture(str(out) + ".bpfsym")
        side = sum(1 for p in cap.programs if p.id in held and p.has_image)
    if mode != "no-perf":
        perf = len(perf_prog_ids(out) & held)
    return side, perf


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--programs", default="0,1000,3000", help="comma list of N")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="perf,bpfsym,no-perf", help=f"comma list of {MODES}")
    ap.add_argument("--perf", default="perf")
    a = ap.parse_args()
    modes = a.modes.split(",")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m}")
    print(f"# {os.uname().release}, {os.cpu_count()} CPUs, "
          f"{subprocess.run([a.perf, '--version'], capture_output=True, text=True).stdout.strip()}, "
          f"load average {os.getloadavg()[0]:.2f} at start (shared machine: noisy)")  # fmt: skip
    print(f"# `record ... -- true`, {a.runs} interleaved runs per mode; wall seconds")
    print(f"{'N held':>6} {'mode':<9} {'min s':>7} {'median s':>8} {'x perf':>7} "
          f"{'images (side)':>13} {'images (perf)':>13}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bpfsym-startup-") as d:
        for n in (int(x) for x in a.programs.split(",")):
            others = sum(1 for _ in progs.iter_ids())
            print(f"# N={n}: {others} programs already on the host (other users)")
            with _progs.held(n) as h:
                held = set(h.ids)
                times: dict[str, list[float]] = {m: [] for m in modes}
                kept: dict[str, list[tuple[int | None, int | None]]] = {m: [] for m in modes}
                for _ in range(a.runs):
                    for m in modes:
                        out = Path(d) / f"{m}.data"
                        cmd = command(m, out, a.perf)
                        t0 = time.perf_counter()
                        p = subprocess.run(cmd, capture_output=True, text=True)
                        times[m].append(time.perf_counter() - t0)
                        if p.returncode != 0:
                            raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
                        kept[m].append(images_kept(m, out, held))
                base = statistics.median(times["perf"]) if "perf" in times else None
                for m in modes:
                    med = statistics.median(times[m])
                    ratio = f"{med / base:.2f}x" if base else "-"
                    side = [k[0] for k in kept[m] if k[0] is not None]
                    perf = [k[1] for k in kept[m] if k[1] is not None]
                    s_txt = f"{min(side)}/{n}" if side else "-"
                    p_txt = f"{min(perf)}/{n}" if perf else "-"
                    print(f"{n:>6} {m:<9} {min(times[m]):>7.2f} {med:>8.2f} {ratio:>7} "
                          f"{s_txt:>13} {p_txt:>13}")  # fmt: skip
                    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
