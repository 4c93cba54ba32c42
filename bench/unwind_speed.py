"""How fast bpfsym.unwind unwinds a `--call-graph dwarf` recording against perf report.

Records (or takes with -i) >= 50k samples of dwarfdemo (tests/fixtures/dwarf: -O2
-fomit-frame-pointer, a call depth of 6, through the C library's start-up code), one
copy per CPU, with `perf record --call-graph dwarf,SIZE`, then prints the time bpfsym
takes to read every sample and unwind its user stack (bpfsym.unwind.unwind_samples,
from byte code, no symbolization or rendering) against `perf report --stdio` on the same
file (which unwinds with libunwind, names and renders), as a ratio.

    python3 bench/unwind_speed.py                 # record ~60k samples, then compare
    python3 bench/unwind_speed.py -i dwarf.data   # compare on an existing recording
    python3 bench/unwind_speed.py --stack 8192    # perf's default stack copy size

The default stack copy is 2048 bytes (dwarfdemo's whole stack is about 1 KB above the
leaf); 8192, perf's default, makes the file four times bigger for the same unwinding.

perf report is given the kernel part of /proc/kallsyms as a file (--kallsyms): reading
/proc/kallsyms itself costs time quadratic in the number of BPF programs loaded on the
machine (DESIGN.md, "Facts about the kernel interface"), which would make perf's figure
depend on what others run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import print_ratio, timed  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "fixtures", "dwarf")


def record(path: str, freq: int, rounds: int, stack: int) -> None:
    """perf record --call-graph dwarf of one dwarfdemo per CPU."""
    out = tempfile.mkdtemp(prefix="bpfsym-bench-unwind-")
    subprocess.run(["make", "-s", "-C", SRC, f"OUTPUT={out}", "all"], check=True)
    prog = os.path.join(out, "dwarfdemo")
    ncpu = os.cpu_count() or 1
    work = " & ".join([f"{prog} cpu {rounds}"] * ncpu) + "; wait"
    subprocess.run(
        ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(freq),
         "--call-graph", f"dwarf,{stack}", "-o", path, "--", "sh", "-c", work],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def kernel_kallsyms() -> str:
    """The /proc/kallsyms lines up to the first BPF one, in a temporary file."""
    out = os.path.join(tempfile.mkdtemp(prefix="bpfsym-bench-unwind-"), "kallsyms")
    with open("/proc/kallsyms") as f, open(out, "w") as o:
        for line in f:
            if line.rstrip().endswith("[bpf]"):
                break
            o.write(line)
    return out


def count_samples(path: str) -> int:
    out = subprocess.run(
        ["perf", "report", "-i", path, "--stats"], capture_output=True, text=True, check=True
    ).stdout
    for line in out.splitlines():
        if line.strip().startswith("SAMPLE events:"):
            return int(line.split()[2])
    return 0


def consume(path: str) -> None:
    """Unwind every sample (the timed run of bpfsym), then say how it went."""
    from bpfsym.symbolize.unwind import unwind_samples

    n = stopped = frames = 0
    for s in unwind_samples(path):
        n += 1
        if s.user is not None:
            frames += len(s.user.ips)
            stopped += s.user.reason is not None
    print(f"{n} samples, {frames} user frames, {stopped} stopped early")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-i", "--input", help="existing --call-graph dwarf perf.data")
    p.add_argument("-o", "--output", help="where to record (default: a file in the temp dir)")
    p.add_argument("-F", "--freq", type=int, default=20000, help="sampling rate, Hz")
    p.add_argument("--rounds", type=int, default=6000, help="dwarfdemo rounds per copy")
    p.add_argument("--stack", type=int, default=2048, help="bytes of stack per sample")
    p.add_argument("-r", "--repeat", type=int, default=3, help="runs per command, best kept")
    p.add_argument("--consume", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.consume:
        consume(args.consume)
        return 0
    path = args.input
    if path is None:
        path = args.output or os.path.join(tempfile.gettempdir(), "bpfsym-bench-unwind.data")
        record(path, args.freq, args.rounds, args.stack)
    n = count_samples(path)
    print(f"{path}: {os.path.getsize(path) >> 20} MB, {n} samples")
    if n < 50_000:
        print("warning: fewer than 50k samples; raise --rounds or --freq", file=sys.stderr)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "bpfsym-bench-pyc")
    ours = [sys.executable, os.path.abspath(__file__), "--consume", path]
    subprocess.run(ours, check=True, cwd=ROOT)  # writes the byte code; says what it unwound
    ratio = print_ratio(
        "unwind every sample vs perf report --stdio",
        timed(ours, args.repeat, ROOT),
        timed(
            ["perf", "report", "-i", path, "--stdio", "--kallsyms", kernel_kallsyms()], args.repeat
        ),  # fmt: skip
    )
    return 0 if ratio <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
