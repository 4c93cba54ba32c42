"""Where one bpfsym report's wall time goes, phase by phase: the floor under report_speed.py.

    python3 bench/report_phases.py -i FILE [-g] [-r 5] [--kallsyms KS] [--side]

Runs `bpfsym report -i FILE --no-side --stdio [-g]` (with --side: without --no-side, so
that it reads FILE.bpfsym, a part of its set-up) -r times, each in a fresh
interpreter (as installed: from byte code), with clocks around the phases of the bulk
pass, and prints the min and median of each (wall seconds):

  interpreter   `python3 -c pass` (measured apart, in the same rounds)
  imports       the command line's and the report's modules (pdb and hashlib put off,
                as `python -m bpfsym` does)
  numpy         its import
  set-up        the file's header, up to the fork (the first reading process makes the
                kernel symbols after it, at its first delivery: split.KernelHandoff)
  reading       this process's share of the samples (bulk.read), and the child's
  waiting       from this process's share read to the child's sums in hand
  merge         the child's sums added (split.merge)
  render        the text (report.render)
  rest          writing it out and the exit

The reading processes run at once on two CPUs; everything else is one process's.
bpfsym's internals are wrapped here, in this script only (the product has no timing
hooks): a change of those names shows as an error here, not as a wrong figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import kernel_kallsyms  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PHASES = ("interpreter", "imports", "numpy", "set-up", "reading", "child reading", "waiting",
          "merge", "render", "rest", "total")  # fmt: skip


def child(argv: list[str]) -> None:
    """One report in this process, its phases as JSON on the last line of stderr."""
    t0 = time.perf_counter()
    import bpfsym.__main__ as entry

    entry._lazy_imports()
    import bpfsym.commands.report as command
    import bpfsym.read.bulk as bulk_read
    import bpfsym.report.bulk as bulk
    import bpfsym.report.split as split
    from bpfsym import cli

    marks: dict[str, float] = {"imports": time.perf_counter()}
    real_numpy, real_read = bulk_read.load_numpy, bulk.BulkPass.read
    real_own, real_merge, real_render = split.own_symbols, split.merge, command.render
    parent = os.getpid()

    def load_numpy() -> object:
        marks["numpy start"] = time.perf_counter()
        try:
            return real_numpy()
        finally:
            marks["numpy"] = time.perf_counter()

    def read(self: object, share: object) -> None:
        start = time.perf_counter()
        try:
            real_read(self, share)  # type: ignore[arg-type]
        finally:
            end = time.perf_counter()
            if os.getpid() == parent:
                marks["read start"], marks["reading"] = start, end
            else:  # the forked child: its clock is the parent's (perf_counter: monotonic)
                with open(os.environ["BENCH_CHILD_TIMES"], "w") as f:
                    json.dump([start, end], f)

    def own_symbols(b: object) -> object:
        try:
            return real_own(b)  # type: ignore[arg-type]
        finally:
            marks["own symbols"] = time.perf_counter()

    def merge(*a: object) -> None:
        marks["merge start"] = time.perf_counter()
        try:
            real_merge(*a)  # type: ignore[arg-type]
        finally:
            marks["merge"] = time.perf_counter()

    def render(*a: object) -> str:
        marks["render start"] = time.perf_counter()
        try:
            return real_render(*a)  # type: ignore[arg-type]
        finally:
            marks["render"] = time.perf_counter()

    bulk_read.load_numpy = load_numpy
    for mod in (bulk, sys.modules["bpfsym.report.analysis"]):
        if hasattr(mod, "load_numpy"):
            mod.load_numpy = load_numpy  # type: ignore[attr-defined]
    bulk.BulkPass.read = read  # type: ignore[method-assign]
    split.own_symbols, split.merge, command.render = own_symbols, merge, render
    try:
        cli.main(argv)
    except SystemExit:
        pass
    sys.stdout.flush()
    marks["end"] = time.perf_counter()
    with open(os.environ["BENCH_CHILD_TIMES"]) as f:
        c0, c1 = json.load(f)
    m = marks
    out = {
        "imports": m["imports"] - t0,
        "numpy": m["numpy"] - m["numpy start"],
        "set-up": m["read start"] - m["imports"] - (m["numpy"] - m["numpy start"]),
        "reading": m["reading"] - m["read start"],
        "child reading": c1 - c0,
        "waiting": m["merge start"] - m.get("own symbols", m["reading"]),
        "merge": m["merge"] - m["merge start"],
        "render": m["render"] - m["render start"],
        "rest": m["end"] - m["render"],
        "total": m["end"] - t0,
    }
    print(json.dumps(out), file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-i", "--input", required=True, help="perf.data (report_speed.py -o F)")
    p.add_argument("-g", action="store_true", help="the call-graph view")
    p.add_argument("-r", "--repeat", type=int, default=5)
    p.add_argument(
        "--kallsyms", help="kernel symbols for the report (default: the host's kernel part)"
    )
    p.add_argument("--bpfsym", help="checkout whose bpfsym to time (default: this one)")
    p.add_argument("--side", action="store_true", help="read the input's side file")
    p.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child is not None:
        child(a.child)
        return 0
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "bpfsym-bench-pyc")
    tmp = tempfile.mkdtemp(prefix="bpfsym-bench-phases-")
    ks = a.kallsyms or kernel_kallsyms(tmp)
    side = [] if a.side else ["--no-side"]
    report = ["report", "-i", a.input, *side, "--stdio", "--kallsyms", ks]
    report += ["-g"] if a.g else []
    env = dict(os.environ, BENCH_CHILD_TIMES=os.path.join(tmp, "child.json"),
               PYTHONPATH=a.bpfsym or ROOT)  # fmt: skip
    cmd = [sys.executable, os.path.abspath(__file__), "-i", a.input, "--child", *report]
    runs: list[dict[str, float]] = []
    for k in range(a.repeat + 1):  # the first writes the byte code
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
        interp = time.perf_counter() - t
        got = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, check=True)  # fmt: skip
        if k:
            runs.append({**json.loads(got.stderr.strip().splitlines()[-1]), "interpreter": interp})
    view = "-g" if a.g else "flat"
    print(f"bpfsym report {view} of {a.input}: phases, wall s, min / median of {a.repeat} runs")
    for ph in PHASES:
        xs = [r[ph] for r in runs]
        print(f"  {ph:14s} {min(xs):6.3f} / {statistics.median(xs):6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
