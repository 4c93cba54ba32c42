"""bpfsym annotate: JIT disassembly of BPF functions with sample heat, BPF insns and source.

Each native instruction of a captured JIT image gets its samples; jited_line_info splits the
image into source lines, each shown with its text (from BTF) and the xlated BPF instructions of
that line, printed like `bpftool prog dump xlated`. Runs on any machine from the side file.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

from bpfsym.errors import UsageError

EPILOG = """examples:
  bpfsym annotate --prog 485                       # every function of program 485
  bpfsym annotate bpf_prog_6deef7357e7b4530_sub1   # one function, by its kallsyms name
  bpfsym annotate xdp_demo --json                  # per-instruction records
"""


def _positive(s: str) -> int:
    try:
        v = int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {s!r}")
    return v


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "symbol",
        nargs="?",
        metavar="SYMBOL",
        help="kallsyms name of a BPF function, a program name, or a program id",
    )
    p.add_argument("--prog", type=_positive, metavar="ID", help="annotate program ID")
    p.add_argument(
        "-i",
        "--input",
        default="perf.data",
        metavar="FILE",
        help="perf.data to count samples from (default: perf.data)",
    )
    p.add_argument("--side", metavar="FILE", help="side file (default: INPUT.bpfsym)")
    p.add_argument("--stdio", action="store_true", help="plain text output (the default)")
    p.add_argument("--json", action="store_true", help="JSON records, one object per program")
    p.add_argument("--top", type=_positive, default=10, metavar="N",
                   help="hottest instructions and lines to summarize (default: 10)")  # fmt: skip
    p.epilog = EPILOG


def run(args: argparse.Namespace) -> int:
    # one pass over objects made once (the side file's, numpy's and capstone's imports,
    # the counts): the cyclic collector would only scan them again (as report's gc_paused;
    # the counting child is forked with it off too)
    was = gc.isenabled()
    gc.disable()
    try:
        return _annotate(args)
    finally:
        if was:
            gc.enable()


def _annotate(args: argparse.Namespace) -> int:
    from bpfsym.annotate.beside import Beside

    side = args.side or f"{args.input}.bpfsym"
    if not os.path.exists(side):
        # perf.data alone holds no xlated instructions to show; the side file does
        raise UsageError(
            f"{side}: no such side file (try 'bpfsym record' first, or name one with --side)"
        )
    # the samples are counted beside (big files): the child starts reading the perf.data
    # while the side file is read here, then counts while the disassembler and the kernel
    # names load here
    counting = Beside(args.input) if os.path.exists(args.input) else None
    try:
        from bpfsym.read.sidefile import read_capture

        capture = read_capture(side)
        if counting is not None:
            counting.send(capture)
        from bpfsym.annotate.view import annotate, indexed_names

        names = indexed_names(capture)
        samples = counting.result(capture) if counting is not None else {}
    finally:
        if counting is not None:
            counting.close()
    text, status = annotate(
        capture,
        samples,
        names=names,
        prog_id=args.prog,
        symbol=args.symbol,
        top=args.top,
        as_json=args.json,
        color=sys.stdout.isatty() and not args.json,
    )
    (sys.stdout if status == 0 else sys.stderr).write(text)
    return status
