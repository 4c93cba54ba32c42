"""The bpfsym program's first step. For a report, /proc/kallsyms starts being read (by a
process of its own, see hostsyms.HostKallsyms) before the command line's imports, which
take about a tenth of a second; then the command line runs. Ctrl-C during the imports
ends it at once with status 130 (and no traceback), as it does later, as perf does."""

from __future__ import annotations

import importlib
import os
import signal
import sys


def _quit(signum: int, frame: object) -> None:
    os._exit(130)


def prestart(argv: list[str]) -> str | None:
    """The command argv names; for a report, the kallsyms reader is started now."""
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen == "report" and sys.platform == "linux" and not {"-h", "--help"} & set(argv):
        from bpfsym.hostsyms import start_reading

        start_reading()  # once: cli.main calls this again for callers that skip main()
    return chosen


def main() -> None:
    signal.signal(signal.SIGINT, _quit)  # until the modules are in
    chosen = prestart(sys.argv[1:])
    from bpfsym import cli

    if chosen in cli.COMMANDS:
        importlib.import_module(cli.COMMANDS[chosen][0])
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the commands handle it
    cli.entry()
