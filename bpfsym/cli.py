"""bpfsym's command line: argument parsing, dispatch, and the one error boundary.

Each command is a module of bpfsym.commands exposing configure(parser) and run(args) -> int
(and EPILOG). Errors of bad input become one line on stderr and exit status 2.

For a report, /proc/kallsyms starts being read (by a process of its own, see
live.host.HostKallsyms) before the command's modules import, which takes about a tenth of
a second; the reader travels to the command in args.kallsyms_reader.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
from typing import Any

from bpfsym import __version__
from bpfsym.errors import one_line

COMMANDS = {
    "record": (
        "bpfsym.commands.record",
        "run a command under perf record and capture every BPF program",
    ),
    "report": ("bpfsym.commands.report", "symbolize perf.data samples, BPF programs included"),
    "annotate": (
        "bpfsym.commands.annotate",
        "JIT disassembly of BPF functions with heat and source",
    ),
    "top": ("bpfsym.commands.top", "live per-program BPF runtime"),
    "diff": (
        "bpfsym.commands.diff",
        "compare two captures like perf diff, BPF programs matched by name",
    ),
    "dump": ("bpfsym.commands.dump", "show what a side file captured"),
    "kallsyms": (
        "bpfsym.commands.kallsyms",
        "write a kallsyms file with BPF symbols for stock perf",
    ),
}

EPILOG = """examples:
  bpfsym record -o perf.data -F 999 -a -g -- ./workload   # perf.data + perf.data.bpfsym
  bpfsym report --sort prog,func,srcline                  # where BPF time goes
  bpfsym annotate --prog 485                              # JIT code with heat and source
  bpfsym top -d 2                                         # live per-program runtime
"""


def chosen_command(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def start_kallsyms_reader(chosen: str | None, argv: list[str]) -> Any:
    """For a report on Linux, a /proc/kallsyms reader started now (None otherwise, and
    when --kallsyms names the file to read instead, or a side file's kallsyms will: the
    reading would be thrown away, and it slowed the imports it ran beside by 1-4 %)."""
    if chosen != "report" or sys.platform != "linux" or {"-h", "--help"} & set(argv):
        return None
    if any(a == "--kallsyms" or a.startswith("--kallsyms=") for a in argv):
        return None
    if _side_file(argv[argv.index(chosen) + 1 :]):
        return None  # the report reads the host's after all if the side file has none
    from bpfsym.live.host import HostKallsyms

    return HostKallsyms()


def default_side(inp: str) -> str | None:
    """The side file a report or diff of perf.data inp reads unless told: <inp>.bpfsym
    when it exists."""
    cand = inp + ".bpfsym"
    return cand if inp != "-" and os.path.exists(cand) else None


def _side_file(args: list[str]) -> str | None:
    """The side file a report's arguments leave it (--side, or default_side), read here
    as the report's parser reads -i/--input, --side and --no-side, before that parser's
    imports: a reading that differs only starts a reader that is not needed, or leaves
    the reading to the report (later, not wrong)."""
    inp, side, no_side = "perf.data", None, False
    for i, a in enumerate(args):
        value = args[i + 1] if i + 1 < len(args) else None
        if a == "--":
            break
        if a == "--no-side":
            no_side = True
        elif a in ("-i", "--input"):
            inp = value or inp
        elif a.startswith("--input="):
            inp = a[len("--input=") :]
        elif a.startswith("-i") and not a.startswith("--"):
            inp = a[2:]
        elif a == "--side":
            side = value
        elif a.startswith("--side="):
            side = a[len("--side=") :]
    return None if no_side else (side or default_side(inp))  # as commands.report.run


def _parser(chosen: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bpfsym",
        description="Make BPF programs visible to profiling, beside perf record.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"bpfsym {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_text) in COMMANDS.items():
        if name != chosen:
            sub.add_parser(name, help=help_text)
            continue
        mod = importlib.import_module(module)  # only the chosen command's module
        sp = sub.add_parser(
            name,
            help=help_text,
            description=(mod.__doc__ or help_text).strip().splitlines()[0],
            epilog=getattr(mod, "EPILOG", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.configure(sp)
        sp.set_defaults(_run=mod.run)
    return p


def main(argv: list[str] | None = None, kallsyms_reader: Any = None) -> int:
    """Parse argv, run the command; bad input ends in one line and status 2."""
    argv = sys.argv[1:] if argv is None else argv
    chosen = chosen_command(argv)
    if kallsyms_reader is None:
        kallsyms_reader = start_kallsyms_reader(chosen, argv)
    parser = _parser(chosen if chosen in COMMANDS else None)
    if chosen in COMMANDS:
        mod = importlib.import_module(COMMANDS[chosen][0])
        rest = argv[argv.index(chosen) + 1 :]
        if getattr(mod, "RAW_ARGS", False) and rest[:1] not in (["-h"], ["--help"]):
            # perf-style pass-through: the command parses its own argv
            args = argparse.Namespace(command=chosen, argv=rest, _run=mod.run)
        else:
            args = parser.parse_args(argv)
    else:
        args = parser.parse_args(argv)
    args.kallsyms_reader = kallsyms_reader
    try:
        return int(args._run(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except RuntimeError as e:
        # Python wraps a KeyboardInterrupt raised inside a class's __set_name__ (a module
        # importing late, pyelftools' cached properties) in a RuntimeError
        if isinstance(e.__cause__, KeyboardInterrupt):
            return 130
        raise
    except Exception as e:
        line = one_line(e)
        if line is None:
            raise
        print(f"bpfsym {args.command}: {line}", file=sys.stderr)
        return 2


def entry() -> None:
    """The bpfsym program: main(), then out without tearing the interpreter down.

    Freeing a large report's objects one by one at exit took 40-70 ms; the output is
    flushed first and nothing bpfsym holds needs a goodbye."""
    argv = sys.argv[1:]
    chosen = chosen_command(argv)
    try:
        reader = start_kallsyms_reader(chosen, argv)  # beside the imports that follow
        if chosen in COMMANDS:
            importlib.import_module(COMMANDS[chosen][0])
        # the collector, off for the imports (__main__), back on for the command; what the
        # imports made is kept out of every collection (and of a forked reader's pages)
        gc.freeze()
        gc.enable()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the commands handle it
        code = main(argv, reader)  # Ctrl-C before a command's own handling too
    except KeyboardInterrupt:
        code = 130
    except RuntimeError as e:
        if not isinstance(e.__cause__, KeyboardInterrupt):
            raise
        code = 130
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    os._exit(code)
