"""How fast `bpfsym report -g` reads a `--call-graph dwarf` recording against perf report.

Records (or takes with -i) >= 50k samples of dwarfdemo (tests/fixtures/dwarf: -O2
-fomit-frame-pointer, a call depth of 6, through the C library's start-up code), one
copy per CPU, with `perf record --call-graph dwarf,SIZE`, then times
`bpfsym report -g --stdio` (every user stack unwound with the mapped binaries' CFI, named,
the children totals and call graphs rendered) against `perf report --stdio` on the same
file (perf's default for a file with call chains: children and graphs, unwound with
libunwind). The runs alternate, bpfsym then perf, --repeat times; the minimum and the
median of each are printed with their ratios.

    python3 bench/unwind_speed.py                 # record ~60k samples, then compare
    python3 bench/unwind_speed.py -i dwarf.data   # compare on an existing recording
    python3 bench/unwind_speed.py --stack 8192    # perf's default stack copy size
    python3 bench/unwind_speed.py --unwind-only   # also: bpfsym's unwinding alone

The default stack copy is 2048 bytes (dwarfdemo's whole stack is about 1 KB above the
leaf); 8192, perf's default, makes the file four times bigger for the same unwinding.

Both are given the kernel part of /proc/kallsyms as a file (--kallsyms): reading
/proc/kallsyms itself costs time quadratic in the number of BPF programs loaded on the
machine (docs/design.md, "Facts about the kernel interface"), which would make the figures
depend on what others run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    count_samples,
    data_file,
    interleaved,
    kernel_kallsyms,
    print_ratio,
    timed,
)

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
    p.add_argument("-r", "--repeat", type=int, default=3, help="interleaved runs per command")
    p.add_argument("--unwind-only", action="store_true", help="also time bpfsym's unwinding alone")
    p.add_argument("--consume", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.consume:
        consume(args.consume)
        return 0
    path, fresh = data_file(p, args.input, args.output, "bpfsym-bench-unwind.data")
    if fresh:
        record(path, args.freq, args.rounds, args.stack)
    n = count_samples(path)
    print(f"{path}: {os.path.getsize(path) >> 20} MB, {n} samples")
    if n < 50_000:
        print("warning: fewer than 50k samples; raise --rounds or --freq", file=sys.stderr)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "bpfsym-bench-pyc")
    kallsyms = kernel_kallsyms(tempfile.mkdtemp(prefix="bpfsym-bench-unwind-"))
    ours = [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--no-side", "-g",
            "--stdio", "--kallsyms", kallsyms]  # fmt: skip
    theirs = ["perf", "report", "-i", path, "--stdio", "--kallsyms", kallsyms]
    head = subprocess.run(ours, check=True, capture_output=True, text=True).stdout  # byte code
    lines = head.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# user stacks"):  # the header's word on the unwinding
            print(line)
            for more in lines[i + 1 :]:
                if not more.startswith("#   "):
                    break
                print(more)
    got = interleaved({"ours": (ours, ROOT), "perf": (theirs, ROOT)}, args.repeat)
    t_ours, t_perf = ([wall for wall, _cpu in got[k]] for k in ("ours", "perf"))
    print(f"bpfsym report -g --stdio: {' '.join(f'{t:.2f}' for t in t_ours)} s")
    print(f"perf report --stdio:      {' '.join(f'{t:.2f}' for t in t_perf)} s")
    print_ratio("min, report -g vs perf report --stdio", min(t_ours), min(t_perf))
    ratio = print_ratio(
        "median, report -g vs perf report --stdio",
        statistics.median(t_ours),
        statistics.median(t_perf),
    )
    if args.unwind_only:
        alone = [sys.executable, os.path.abspath(__file__), "--consume", path]
        subprocess.run(alone, check=True, cwd=ROOT)  # says what it unwound
        print_ratio(
            "unwinding alone vs perf report --stdio",
            timed(alone, args.repeat, ROOT),
            min(t_perf),
        )
    return 0 if ratio <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
