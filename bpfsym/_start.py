"""The bpfsym program's first step. For a report, /proc/kallsyms starts being read (by a
process of its own, see hostsyms.HostKallsyms) before the command line's imports, which
take about a tenth of a second; then the command line runs."""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen == "report" and sys.platform == "linux" and not {"-h", "--help"} & set(argv):
        from bpfsym.hostsyms import start_reading

        start_reading()
    from bpfsym.cli import entry

    entry()
