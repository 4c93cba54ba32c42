"""bpfsym report: where perf.data samples landed, BPF programs named, like perf report.

Symbols come from the side file (<input>.bpfsym) when there is one, else from
perf.data's own KSYMBOL/BPF_EVENT records and header; the report header says
which source named what and why samples stayed unresolved.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from bpfsym.cli import default_side
from bpfsym.errors import FormatError, UsageError
from bpfsym.report import filters
from bpfsym.report.analysis import analyze_query, gc_paused
from bpfsym.report.query import DEFAULT_KEYS, ReportQuery
from bpfsym.report.render import render

EPILOG = """examples:
  bpfsym report                                  # perf.data (+ perf.data.bpfsym if there)
  bpfsym report --sort prog,func,srcline --bpf-only
  bpfsym report -g --stdio                       # with call graphs
  bpfsym report --folded | flamegraph.pl > bpf.svg
  bpfsym report --json -i run1.data --no-side
  bpfsym report --pprof bpf.pb.gz --sort comm,dso,sym,srcline   # pprof -top -lines bpf.pb.gz
  bpfsym report --header-only                    # the perf.data header, as perf prints it
  bpfsym report --comms nginx --cpu 0-3,8 --time 10%/2 --percent-limit 1
"""

SORT_KEYS = ("comm", "pid", "cpu", "dso", "sym", "prog", "func", "srcline")


def sort_keys(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    for k in keys:
        if k not in SORT_KEYS:
            raise argparse.ArgumentTypeError(
                f"unknown sort key {k!r} (choose from {', '.join(SORT_KEYS)})"
            )
    if not keys:
        raise argparse.ArgumentTypeError("empty sort key list")
    return keys


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--input", default="perf.data", help="perf.data file ('-' for stdin)")
    p.add_argument("--side", help="side file (default: <input>.bpfsym when it exists)")
    p.add_argument("--no-side", action="store_true", help="ignore any side file")
    p.add_argument(
        "-s",
        "--sort",
        type=sort_keys,
        default=None,
        help=f"sort keys, comma separated: {','.join(SORT_KEYS)} (default comm,dso,sym)",
    )
    p.add_argument("--bpf-only", action="store_true", help="only samples in BPF programs")
    p.add_argument(
        "-g", "--call-graph", action="store_true", help="show children overhead and call graphs"
    )
    p.add_argument("--stdio", action="store_true", help="text output (the default)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON output")
    out.add_argument("--folded", action="store_true", help="folded stacks for flame graphs")
    out.add_argument(
        "--pprof",
        metavar="FILE",
        help="write a gzipped pprof profile (profile.proto) to FILE ('-': stdout);"
        " --sort srcline adds BPF source lines",
    )
    p.add_argument(
        "--percent-limit", metavar="PERCENT", help="hide entries below this overhead (totals stay)"
    )
    p.add_argument(
        "--header-only", action="store_true", help="print the perf.data header as perf does, only"
    )
    f = p.add_argument_group("sample filters (as perf report's)")
    f.add_argument("-c", "--comms", metavar="COMM[,COMM]", help="rows of these comms only")
    f.add_argument(
        "--pid", "--pids", dest="pid", metavar="PID[,PID]", help="rows of these pids only"
    )
    f.add_argument(
        "--tid", "--tids", dest="tid", metavar="TID[,TID]", help="rows of these tids only"
    )
    f.add_argument("-C", "--cpu", metavar="CPUS", help="samples of these CPUs only: 0-2,5")
    f.add_argument(
        "--time",
        metavar="START,STOP",
        help="samples in this time span only: sec.usec,sec.usec (either end open),"
        " or slices of the recorded span: 10%%/2, 0%%-10%%, 10%%/1,10%%/3",
    )
    p.add_argument(
        "--kallsyms", help="kernel symbols from this kallsyms file instead of a snapshot"
    )
    p.add_argument(
        "--symfs",
        metavar="DIR",
        help="look for binaries under DIR, as perf report --symfs (nothing of this host's)",
    )


def _parsed(option: str, parse: Any, text: str | None) -> Any:
    """A filter option's value parsed; a bad one is a one-line usage error."""
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as e:
        raise UsageError(f"{option} {text!r}: {e}") from None


def percent_limit(text: str) -> float:
    v = float(text.strip().rstrip("%"))
    if not 0.0 <= v <= 100.0:
        raise ValueError("not a percentage between 0 and 100")
    return v


def filters_of(args: argparse.Namespace) -> filters.Filters:
    """The sample filters the command line asks for (checked here: one line, exit 2)."""
    return filters.Filters(
        comms=_parsed("--comms", filters.comm_list, getattr(args, "comms", None)),
        pids=_parsed("--pid", filters.int_list, getattr(args, "pid", None)),
        tids=_parsed("--tid", filters.int_list, getattr(args, "tid", None)),
        cpus=_parsed("--cpu", filters.cpu_list, getattr(args, "cpu", None)),
        time=_parsed("--time", filters.check_time, getattr(args, "time", None)),
    )


def query_of(args: argparse.Namespace) -> ReportQuery:
    """The report the command line asks for."""
    keys = args.sort or list(DEFAULT_KEYS)
    folded = bool(getattr(args, "folded", False))
    if folded and "comm" not in keys:
        keys = ["comm", *keys]  # a folded line starts with the command
    flt = filters_of(args)
    if flt.comms is not None and len(flt.comms) == 1 and len(keys) > 1 and not folded:
        # one comm asked for: perf leaves its column out (sort.c sort__setup_elide)
        keys = [k for k in keys if k != "comm"]
    return ReportQuery(
        path=args.input,
        stream=sys.stdin.buffer if args.input == "-" else None,
        side=None if args.no_side else (args.side or default_side(args.input)),
        keys=tuple(keys),
        callchains=bool(args.call_graph) or folded,
        bpf_only=args.bpf_only,
        kallsyms=args.kallsyms,
        output="json" if args.json else "folded" if folded else "stdio",
        percent_limit=_parsed("--percent-limit", percent_limit, args.percent_limit) or 0.0,
        filters=flt,
        host=getattr(args, "kallsyms_reader", None),  # started by the cli before its imports
        symfs=(args.symfs or "").rstrip("/"),
    )


def run(args: argparse.Namespace) -> int:
    query = query_of(args)
    if getattr(args, "header_only", False):
        from bpfsym.report.header_text import header_text

        _write(header_text(query.path, query.stream))
        return 0
    try:
        an = analyze_query(query)
    except FileNotFoundError as e:
        raise FormatError(e.filename or query.path, 0, "no such file") from None
    if args.pprof:
        from bpfsym.report.pprof import write_pprof

        write_pprof(an, args.pprof, query.side)
        return 0
    with gc_paused():
        text = render(an, query)
    _write(text)
    _KEPT.append(an)  # freed with the process (cli.entry), not object by object on return
    return 0


_KEPT: list = []  # analyses the process ends with: freeing one of millions of objects
# one at a time took longer than some whole reports (docs/python-speed.md)


def _write(text: str) -> None:
    try:
        # names are bytes as perf.data has them (surrogateescape): written back as such
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
