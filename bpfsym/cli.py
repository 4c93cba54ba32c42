"""bpfsym's command line: argument parsing and dispatch; errors become one line.

Each command lives in a module exposing configure(parser) and run(args) -> int.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from bpfsym import __version__
from bpfsym._start import prestart
from bpfsym.formats.errors import FormatError

COMMANDS = {
    "record": ("bpfsym.record", "run a command under perf record and capture every BPF program"),
    "report": ("bpfsym.report", "symbolize perf.data samples, BPF programs included"),
    "annotate": ("bpfsym.annotate", "JIT disassembly of BPF functions with heat and source"),
    "top": ("bpfsym.top", "live per-program BPF runtime"),
    "dump": ("bpfsym.dump", "show what a side file captured"),
    "kallsyms": ("bpfsym.ksymfile", "write a kallsyms file with BPF symbols for stock perf"),
}

EPILOG = """examples:
  bpfsym record -o perf.data -F 999 -a -g -- ./workload   # perf.data + perf.data.bpfsym
  bpfsym report --sort prog,func,srcline                  # where BPF time goes
  bpfsym annotate --prog 485                              # JIT code with heat and source
  bpfsym top -d 2                                         # live per-program runtime
"""


class UsageError(Exception):
    """Bad command-line input discovered after parsing: one line, exit 2."""


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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = prestart(argv)  # /proc/kallsyms is kernel time: it runs beside the imports
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
    try:
        return int(args._run(args))
    except FormatError as e:
        print(f"bpfsym {args.command}: {e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"bpfsym {args.command}: {e}", file=sys.stderr)
        return 2
    except PermissionError as e:
        print(f"bpfsym {args.command}: {permission_hint(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            print(f"bpfsym {args.command}: {permission_hint(e)}", file=sys.stderr)
        else:
            where = f": {e.filename}" if e.filename else ""
            print(f"bpfsym {args.command}: {e.strerror or e}{where}", file=sys.stderr)
        return 2


def entry() -> None:
    """The bpfsym program: main(), then out without tearing the interpreter down.

    Freeing a large report's objects one by one at exit took 40-70 ms; the output is
    flushed first and nothing bpfsym holds needs a goodbye."""
    try:
        code = main()  # Ctrl-C before a command's own handling (parsing the options) too
    except KeyboardInterrupt:
        code = 130
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    os._exit(code)


def permission_hint(e: OSError) -> str:
    what = f"{e.filename}: " if e.filename else ""
    return (
        f"{what}{e.strerror or 'permission denied'}; "
        "needs root, or CAP_BPF + CAP_PERFMON + CAP_SYS_ADMIN (and kernel.perf_event_paranoid <= 1)"
    )
