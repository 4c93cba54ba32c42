"""How fast bpfsym report is against perf report on a large perf.data with call graphs.

Records (or takes with -i) a system-wide cpu-clock profile of >= 450k samples with
call chains over a busy workload (dd on every CPU plus a BPF program run through
BPF_PROG_TEST_RUN), then prints bpfsym/perf time ratios for the flat view (vs
`perf report --stdio --no-children -g none`) and the call-graph view (vs
`perf report --stdio`), each run interleaved with perf's -r times: min and median of
wall and CPU time (user + system, both of bpfsym's reading processes) and their ratios;
with the flat view, the start-up floor run in the same rounds (the interpreter without
its site module, then with it: what this host's .pth files add to every Python program;
`bpfsym --version`: the interpreter and the command line's imports) and the CPU floor
(the report in one process, pinned to one CPU, and its imports alone: how much of
bpfsym's CPU is start-up, how much reading, how much the second process adds).
bpfsym runs from byte code, as installed; --bpfsym CHECKOUT times another checkout's.
Both read the kernel part of /proc/kallsyms from one file (--kallsyms): /proc/kallsyms
itself costs time quadratic in the BPF programs anyone has loaded.

    python3 bench/report_speed.py                # record ~15 s, then compare
    python3 bench/report_speed.py -i big.data    # compare on an existing file
    python3 bench/report_speed.py -o /tmp/x.data # record there, then compare
    python3 bench/report_speed.py -F 0 -s 60     # perf's default rate, as `bpfsym record -a`
    python3 bench/report_speed.py -i big.data --against ../old   # two codes, same rounds
    python3 bench/report_speed.py -i a.data --side   # bpfsym reads a.data.bpfsym too
    python3 bench/report_speed.py -i a.data --no-site   # also as python -S: no .pth hooks

With -F 0, perf records at its default 4000 Hz and, as for any recording without -F,
gives its side-band event (dummy:HG) a sample layout of its own (no PERIOD).
"""

from __future__ import annotations

import argparse
import os
import site
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
    print_interleaved,
    print_per_round,
    print_startup,
    startup_commands,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BPF_OBJ = os.path.join(ROOT, "tests", "fixtures", "perfdata", "xdp_spin.bpf.o")
PIN = "/sys/fs/bpf/bpfsym_bench_spin"


def record(path: str, seconds: int, freq: int) -> None:
    """perf record -a -g at freq Hz (0: perf's default) while dd and a BPF test run keep
    every CPU busy."""
    if subprocess.run(["mountpoint", "-q", "/sys/fs/bpf"]).returncode:
        subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], check=True)
    subprocess.run(["rm", "-f", PIN])
    subprocess.run(["bpftool", "prog", "load", BPF_OBJ, PIN], check=True)
    pkt = tempfile.NamedTemporaryFile(delete=False)
    pkt.write(bytes(64))
    pkt.close()
    ncpu = os.cpu_count() or 1
    work = " & ".join(
        [f"timeout {seconds} dd if=/dev/zero of=/dev/null bs=1 count=1000000000"] * ncpu
        + [
            f"timeout {seconds} sh -c 'while :; do bpftool prog run pinned {PIN}"
            f" data_in {pkt.name} repeat 20000 >/dev/null; done'"
        ]
    )
    try:
        subprocess.run(
            ["perf", "record", "-q", "-e", "cpu-clock", *(["-F", str(freq)] if freq else []),
             "-a", "-g", "-o", path, "--", "sh", "-c", work + "; wait"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        subprocess.run(["rm", "-f", PIN])
        os.unlink(pkt.name)


# what a report imports before it reads (the command line, the report's modules, numpy
# with one OpenBLAS thread, as read.bulk.load_numpy has it)
IMPORTS = (
    "from bpfsym.read.bulk import load_numpy; load_numpy();"
    " import bpfsym.cli, bpfsym.commands.report, bpfsym.report.analysis, bpfsym.report.render"
)


def floor_commands(ours: list[str], where: str) -> dict[str, tuple[list[str], str]]:
    """The flat view's CPU floor, run in the same rounds: the report in one process (its
    affinity one CPU, so no second reading process) and the imports alone."""
    return {
        "one process": (["taskset", "-c", "0", *ours], where),
        "imports": ([sys.executable, "-c", IMPORTS], where),
    }


def print_floor(got: dict[str, list[tuple[float, float]]]) -> None:
    """Where the flat view's CPU goes against perf's: the start-up (the interpreter and the
    imports, paid once, before the fork), the rest in one process (the reading, the render),
    and what the second reading process adds (it also walks the first share's records for
    their side-band)."""

    def med(name: str, k: int = 1) -> float:
        return statistics.median(r[k] for r in got[name])

    perf, one, two, imports = med("perf"), med("one process"), med("ours"), med("imports")
    print(
        f"flat view CPU floor (medians): perf {perf:.3f} s; bpfsym start-up (interpreter,"
        f" imports, numpy) {imports:.3f} s = {imports / perf:.2f}x of perf's; the rest in one"
        f" process {one - imports:.3f} s = {(one - imports) / perf:.2f}x (one process in all"
        f" {one:.3f} s CPU, {med('one process', 0):.3f} s wall); the second process adds"
        f" {two - one:.3f} s CPU = {(two - one) / perf:.2f}x"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-i", "--input", help="existing perf.data (default: record one)")
    p.add_argument("-o", "--output", help="where to record (default: a file in the temp dir)")
    p.add_argument("-s", "--seconds", type=int, default=15)
    p.add_argument("-F", "--freq", type=int, default=20000, help="Hz; 0: perf's default")
    p.add_argument("-r", "--repeat", type=int, default=5, help="interleaved runs per command")
    p.add_argument("--bpfsym", help="checkout whose bpfsym to time (default: this one)")
    p.add_argument("--no-graph", action="store_true", help="only the flat view")
    p.add_argument(
        "--side",
        action="store_true",
        help="bpfsym reads the input's side file (FILE.bpfsym), as `bpfsym report` does "
        "by default on a bpfsym recording (default: --no-side)",
    )
    p.add_argument(
        "--against", metavar="CHECKOUT", help="also time this checkout's bpfsym in the same rounds"
    )
    p.add_argument(
        "--no-site",
        action="store_true",
        help="also time the flat view run as `python -S` with site-packages on PYTHONPATH, in "
        "the same rounds: as on a host whose site-packages runs no .pth hooks at start-up",
    )
    args = p.parse_args()
    path, fresh = data_file(p, args.input, args.output, "bpfsym-bench-report.data")
    if fresh:
        record(path, args.seconds, args.freq)
    if args.side and not os.path.exists(f"{path}.bpfsym"):
        p.error(f"--side: no {path}.bpfsym")
    n = count_samples(path)
    print(f"{path}: {os.path.getsize(path) >> 20} MB, {n} samples", end="")
    print(", bpfsym reading its side file" if args.side else "")
    if n < 450_000:
        print("warning: fewer than 450k samples; raise --seconds or --freq", file=sys.stderr)
    # bpfsym as installed: from byte code (pip compiles it; PYTHONDONTWRITEBYTECODE in a
    # development shell would otherwise charge every run for compiling the sources)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "bpfsym-bench-pyc")
    where = args.bpfsym or ROOT
    ks = ["--kallsyms", kernel_kallsyms(tempfile.mkdtemp(prefix="bpfsym-bench-report-"))]
    side = [] if args.side else ["--no-side"]
    ours = [sys.executable, "-m", "bpfsym", "report", "-i", path, *side, "--stdio", *ks]
    other = {"other": (ours, args.against)} if args.against else {}
    if args.no_site:
        # site-packages on the path by hand: the same modules, none of the .pth files run
        packages = os.pathsep.join(site.getsitepackages())
        bare = ["env", f"PYTHONPATH={packages}", sys.executable, "-S", *ours[1:]]
        other["no site"] = (bare, where)
    interleaved({"ours": (ours, where), **other}, 1)  # writes the byte code
    perf = ["perf", "report", "-i", path, "--stdio", *ks]
    got = interleaved(
        {
            "ours": (ours, where),
            **other,
            "perf": ([*perf, "--no-children", "-g", "none"], None),
            **startup_commands(where),
            **floor_commands(ours, where),
        },
        args.repeat,
    )
    flat = print_interleaved("flat view", got["ours"], got["perf"])
    if args.against:
        print_interleaved("flat view, --against", got["other"], got["perf"])
    if args.no_site:
        print_interleaved("flat view, python -S", got["no site"], got["perf"])
    print_per_round(
        "flat view", {k: got[k] for k in ("ours", "other", "no site", "perf") if k in got}
    )
    print_startup(got, got["perf"])
    print_floor(got)
    if args.no_graph:
        return 0 if flat["wall median"] <= 1.0 else 1
    other = {"other": ([*ours, "-g"], args.against)} if args.against else {}
    got = interleaved({"ours": ([*ours, "-g"], where), **other, "perf": (perf, None)}, args.repeat)
    graph = print_interleaved("call-graph view", got["ours"], got["perf"])
    if args.against:
        print_interleaved("call-graph view, --against", got["other"], got["perf"])
    print_per_round("call-graph view", got)
    return 0 if flat["wall median"] <= 1.0 and graph["wall median"] <= 0.25 else 1


if __name__ == "__main__":
    raise SystemExit(main())
