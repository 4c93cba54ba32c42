"""How long `bpfsym report --pprof` takes against `bpfsym report --stdio` on a large file.

Records (or takes with -i) the same >= 450k-sample system-wide profile with call chains
as bench/report_speed.py, then prints the time of writing a pprof profile as a ratio to
the time of the text report with the same options (target: <= 1.5x each): the default
sort keys flat and with -g, and --sort comm,dso,sym,srcline (BPF source lines in the
profile) flat.

    python3 bench/pprof_speed.py                # record ~15 s, then compare
    python3 bench/pprof_speed.py -i big.data    # compare on an existing file

Until `report --pprof` is on the command line, the profile is written by the same calls
it makes (report.analyze with the sort keys, then pprof.write_pprof).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import data_file, timed  # noqa: E402
from report_speed import count_samples, record  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# what `report --pprof OUT [-g]` runs, for a bpfsym without the option yet
DRIVER = """
import sys
from bpfsym.report.analysis import analyze
from bpfsym.report.pprof import write_pprof
path, out, g, keys = sys.argv[1], sys.argv[2], sys.argv[3] == "-g", sys.argv[4].split(",")
an = analyze(path, None, keys, g)
write_pprof(an, out)
"""


def has_option() -> bool:
    r = subprocess.run(
        [sys.executable, "-m", "bpfsym", "report", "--help"], capture_output=True, text=True
    )
    return "--pprof" in r.stdout


DEFAULT_KEYS = "comm,dso,sym"  # report's default


def pprof_cmd(path: str, out: str, graph: bool, keys: str) -> list[str]:
    if has_option():
        cmd = [sys.executable, "-m", "bpfsym", "report", "-i", path, "--no-side", "--pprof", out]
        return [*cmd, "--sort", keys, *(["-g"] if graph else [])]
    return [sys.executable, "-c", DRIVER, path, out, "-g" if graph else "-", keys]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-i", "--input", help="existing perf.data (default: record one)")
    p.add_argument("-o", "--output", help="where to record (default: a file in the temp dir)")
    p.add_argument("-s", "--seconds", type=int, default=15)
    p.add_argument("-F", "--freq", type=int, default=20000, help="Hz; 0: perf's default")
    p.add_argument("-r", "--repeat", type=int, default=3, help="runs per command, best kept")
    args = p.parse_args()
    path, fresh = data_file(p, args.input, args.output, "bpfsym-bench-report.data")
    if fresh:
        record(path, args.seconds, args.freq)
    n = count_samples(path)
    print(f"{path}: {os.path.getsize(path) >> 20} MB, {n} samples")
    if n < 450_000:
        print("warning: fewer than 450k samples; raise --seconds or --freq", file=sys.stderr)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "bpfsym-bench-pyc")
    out = os.path.join(tempfile.mkdtemp(prefix="bpfsym-bench-pprof-"), "profile.pb.gz")
    stdio = [sys.executable, "-m", "bpfsym", "report", "-i", path, "--no-side", "--stdio"]
    timed(stdio, 1, ROOT)  # writes the byte code
    worst = 0.0
    cases = (
        ("flat view", False, DEFAULT_KEYS),
        ("call-graph view (-g)", True, DEFAULT_KEYS),
        ("flat view, --sort comm,dso,sym,srcline", False, f"{DEFAULT_KEYS},srcline"),
    )
    for label, graph, keys in cases:
        text = timed([*stdio, "--sort", keys, *(["-g"] if graph else [])], args.repeat, ROOT)
        prof = timed(pprof_cmd(path, out, graph, keys), args.repeat, ROOT)
        ratio = prof / text if text > 0 else float("inf")
        size = os.path.getsize(out)
        print(
            f"{label}: --pprof {prof:.2f} s / --stdio {text:.2f} s = {ratio:.2f}x"
            f" ({size >> 10} KB profile)"
        )
        worst = max(worst, ratio)
    os.unlink(out)
    os.rmdir(os.path.dirname(out))
    return 0 if worst <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
