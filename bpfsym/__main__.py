"""The bpfsym program (`bpfsym`, `python -m bpfsym`): Ctrl-C ends it quietly with status 130
from its first moment, as perf does, also while the command line's modules import; construct's
unused pdb import is put off (the program's start-up choice, not a side effect of formats)."""

import importlib
import os
import signal
import sys
import types
from typing import Any


class _LazyPdb(types.ModuleType):
    """Stands in for pdb until something uses it: construct imports pdb for its Debugger,
    which bpfsym never uses, and pdb costs 15 ms of every start-up."""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get("pdb") is self:
            del sys.modules["pdb"]
        return getattr(importlib.import_module("pdb"), name)


def _lazy_pdb() -> None:
    if "pdb" not in sys.modules:
        stub = _LazyPdb("pdb")
        stub.__spec__ = None  # so `import pdb` does not look inside
        sys.modules["pdb"] = stub


def _quit(signum: int, frame: object) -> None:
    os._exit(130)


def main() -> None:
    signal.signal(signal.SIGINT, _quit)  # until the command's own handling takes over
    _lazy_pdb()
    from bpfsym.cli import entry

    entry()


if __name__ == "__main__":
    main()
