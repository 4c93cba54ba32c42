"""Annotate the hottest BPF programs of a big recording, as a ratio to perf's flat report.

    python3 bench/annotate_speed.py [--data FILE] [--seconds 14] [--freq 20000] [-r 5]
                                    [--no-callgraph] [--bpfsym CHECKOUT]

Without --data it records the demo workload (bpf/demo.bpf.o: xdp_demo and its three
sub-programs, run by two loaders) system-wide with call chains through bpfsym record
(>= 500k samples at the defaults on 2 CPUs, ~70 MB). On the same file it runs,
interleaved, -r times each:
  bpfsym annotate -i FILE --stdio                       (every program with samples,
                                                         hottest first: heat, disassembly,
                                                         source lines, render)
  perf report -i FILE --stdio --no-children -g none --kallsyms KERNEL_PART
                                                        (perf itself cannot annotate BPF
                                                         here: no libopcode)
and prints min and median of both, wall and CPU, and their ratios (< 1: bpfsym faster),
the start-up floor run in the same rounds (`python -S`, the interpreter alone, `bpfsym
--version`),
then where annotate's own time goes (one run in this process: heat pass, view).

perf reads the kernel part of /proc/kallsyms from a file (bench/_common.kernel_kallsyms:
reading /proc/kallsyms costs time quadratic in the BPF programs loaded by anyone);
annotate names kernel code from the side file's own snapshot.

--bpfsym CHECKOUT runs another checkout's bpfsym (e.g. an older commit) from its
sources, with this script.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _common import (  # noqa: E402
    input_file,
    interleaved,
    kernel_kallsyms,
    print_interleaved,
    print_per_round,
    print_startup,
    startup_commands,
)


def record(path: Path, seconds: float, freq: int, callgraph: bool = True) -> None:
    subprocess.run(["make", "-s", "-C", str(REPO / "bpf"), "loader"], check=True)
    loader = str(REPO / "bpf" / "loader")
    demo = str(REPO / "bpf" / "demo.bpf.o")
    run = f"{loader} run {demo} xdp_demo --seconds {seconds}"
    subprocess.run(
        [sys.executable, "-m", "bpfsym", "record", "-e", "cpu-clock", "-F", str(freq), "-a",
         *(["-g"] if callgraph else []), "-o", str(path), "--",
         "sh", "-c", f"{run} >/dev/null & {run} >/dev/null; wait"],
        check=True, cwd=REPO, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def parts(path: Path) -> None:
    """Where one annotate's time goes, in this process (bpfsym from this checkout)."""
    from bpfsym.annotate.heat import bpf_sample_counts
    from bpfsym.annotate.view import annotate
    from bpfsym.read.sidefile import read_capture

    t0 = time.perf_counter()
    cap = read_capture(f"{path}.bpfsym")
    t1 = time.perf_counter()
    heat = bpf_sample_counts(str(path), cap)
    t2 = time.perf_counter()
    annotate(cap, heat)
    t3 = time.perf_counter()
    n = sum(sum(v.values()) for v in heat.values())
    print(
        f"in one process: side file {t1 - t0:.3f} s, heat pass {t2 - t1:.3f} s"
        f" ({n} samples in {len(heat)} programs), view and render {t3 - t2:.3f} s"
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, help="existing perf.data (with its .bpfsym side file)")
    ap.add_argument("--seconds", type=float, default=14)
    ap.add_argument("--freq", type=int, default=20000)
    ap.add_argument("--no-callgraph", action="store_true", help="record without -g")
    ap.add_argument("-r", "--repeat", type=int, default=5, help="interleaved runs of each")
    ap.add_argument("--bpfsym", type=Path, help="checkout whose bpfsym to time (default: this)")
    a = ap.parse_args()
    # bpfsym from byte code, as installed (a development shell's PYTHONDONTWRITEBYTECODE
    # would otherwise charge every run for compiling the sources)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "bpfsym-bench-pyc")
    with tempfile.TemporaryDirectory() as d:
        data = Path(input_file(ap, str(a.data))) if a.data else Path(d) / "perf.data"
        if a.data is None:
            record(data, a.seconds, a.freq, not a.no_callgraph)
        where = str(a.bpfsym or REPO)
        ours = [sys.executable, "-m", "bpfsym", "annotate", "-i", str(data), "--stdio"]
        perf = ["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none",
                "--kallsyms", kernel_kallsyms(d)]  # fmt: skip
        interleaved({"ours": (ours, where)}, 1)  # writes the byte code
        got = interleaved(
            {"ours": (ours, where), "perf": (perf, None), **startup_commands(where)}, a.repeat
        )
        print(f"{data}: {os.path.getsize(data) >> 20} MB")
        ratios = print_interleaved("annotate vs perf report flat", got["ours"], got["perf"])
        print_per_round("annotate vs perf report flat", {k: got[k] for k in ("ours", "perf")})
        print_startup(got, got["perf"])
        if a.bpfsym is None:
            parts(data)
    return 0 if ratios["wall median"] <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
