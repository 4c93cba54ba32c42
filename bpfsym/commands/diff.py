"""Compare two captures like perf diff, BPF programs matched across rebuilds.

bpfsym diff BASE NEW [--sort prog,func,srcline] [--json]

Both are perf.data files, each with its side file (<file>.bpfsym) when there is one. A
rebuilt program gets a new tag and new addresses (kallsyms names are
bpf_prog_<tag>_<name>), so BPF code is matched without them: programs by program name
(the name part of the main function's kallsyms name), several programs of one name by
their tags first and then by the names of their sampled functions; functions within a
matched program by name; source lines by their text from BTF line info (the k-th line
of a text in a function matches the k-th), so an edit that moves lines keeps them
matched. Other code is matched by the names the report shows (perf diff's pairing).

Percentages are of each file's event total, matched by event name; the delta is new
minus base, in points, and rows are sorted by its size (perf diff's delta-abs).
Entries that cannot be on the other side (a program only one capture has, a source line
whose text the other build lacks) are marked as such; a blank column means no samples.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from bpfsym.cli import default_side
from bpfsym.commands.report import sort_keys
from bpfsym.errors import FormatError
from bpfsym.report.analysis import analyze, gc_paused
from bpfsym.report.diff import (
    Prog,
    Side,
    match_programs,
    render,
    to_json,
)

EPILOG = """examples:
  bpfsym diff base.data new.data                        # perf diff, BPF programs matched
  bpfsym diff base.data new.data --sort prog,func,srcline --bpf-only
  bpfsym diff base.data new.data --json
"""

DEFAULT_SORT = ["dso", "sym"]  # perf diff's


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", help="baseline perf.data")
    p.add_argument("new", help="perf.data to compare with it")
    p.add_argument("--base-side", help="side file of BASE (default: BASE.bpfsym when there)")
    p.add_argument("--new-side", help="side file of NEW (default: NEW.bpfsym when there)")
    p.add_argument("--no-side", action="store_true", help="ignore any side file")
    p.add_argument(
        "-s",
        "--sort",
        type=sort_keys,
        default=None,
        help="sort keys, comma separated: comm,pid,cpu,dso,sym,prog,func,srcline "
        f"(default {','.join(DEFAULT_SORT)})",
    )
    p.add_argument("--bpf-only", action="store_true", help="only entries in BPF programs")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument(
        "--percent-limit",
        type=float,
        default=0.0,
        help="hide entries below this overhead in both files and with a smaller delta",
    )
    p.add_argument("--kallsyms", help="kernel symbols of both files from this kallsyms file")


def compare(args: argparse.Namespace) -> tuple[Side, Side, list[tuple[Prog | None, Prog | None]]]:
    keys = args.sort or list(DEFAULT_SORT)
    sides = []
    for label, path, side_opt in (
        ("base", args.base, args.base_side),
        ("new", args.new, args.new_side),
    ):
        side = None if args.no_side else (side_opt or default_side(path))
        try:
            an = analyze(path, side, keys, False, args.bpf_only, args.kallsyms)
        except FileNotFoundError as e:
            raise FormatError(e.filename or path, 0, "no such file") from None
        sides.append(Side(label, path, side, an))
    base, new = sides
    return base, new, match_programs(base, new)


def run(args: argparse.Namespace) -> int:
    base, new, pairs = compare(args)
    with gc_paused():
        if args.json:
            text = json.dumps(to_json(base, new, pairs, args.percent_limit), indent=1) + "\n"
        else:
            text = render(base, new, pairs, args.percent_limit)
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))  # names are bytes
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0
