"""The bpfsym program (`bpfsym`, `python -m bpfsym`): Ctrl-C ends it quietly with status 130
from its first moment, as perf does, also while the command line's modules import."""

import os
import signal


def _quit(signum: int, frame: object) -> None:
    os._exit(130)


def main() -> None:
    signal.signal(signal.SIGINT, _quit)  # until the command's own handling takes over
    from bpfsym.cli import entry

    entry()


if __name__ == "__main__":
    main()
