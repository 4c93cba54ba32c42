"""The bpfsym program (`bpfsym`, `python -m bpfsym`): Ctrl-C ends it quietly with status 130
from its first moment, as perf does, also while the command line's modules import; construct's
unused pdb and hashlib imports are put off (the program's start-up choice, not a side effect of
formats), and the cyclic garbage collector waits until the imports are done."""

import _thread
import gc
import importlib
import os
import signal
import sys
import time
import types
from typing import Any


class _Lazy(types.ModuleType):
    """Stands in for a module until something uses it: construct imports pdb for its
    Debugger and hashlib for its Checksum and compiled parsers, none of which bpfsym uses;
    they cost 15 ms (pdb) and 3.5 ms (hashlib, which loads libcrypto) of every start-up.
    numpy (2.x) imports numpy._core._add_newdocs to write the docstrings of its C
    functions, which bpfsym never shows: 6-7 ms of numpy's import (0.88x of it, medians
    of 21 alternating fresh imports)."""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


LAZY = ("pdb", "hashlib", "numpy._core._add_newdocs")


def _lazy_imports() -> None:
    for name in LAZY:
        if name not in sys.modules:
            stub = _Lazy(name)
            stub.__spec__ = None  # so `import name` does not look inside
            sys.modules[name] = stub


def _quit(signum: int, frame: object) -> None:
    os._exit(130)


def _unraisable(unraisable: Any) -> None:
    """A Ctrl-C that lands where Python cannot raise it (a weakref callback such as importlib's
    module-lock cleanup, a __del__) is "ignored" with a traceback on stderr and the program
    goes on. Instead it is sent again to the main thread once this hook has returned (a
    signal handled inside the hook would be ignored the same way), so the command's own
    handling ends the program with 130."""
    if not issubclass(unraisable.exc_type, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)
        return
    hook, main = sys._getframe(), _thread.get_ident()

    def again() -> None:
        while True:
            frame = sys._current_frames().get(main)
            while frame is not None and frame is not hook:
                frame = frame.f_back
            if frame is None:
                break
            time.sleep(0.0005)
        signal.pthread_kill(main, signal.SIGINT)

    _thread.start_new_thread(again, ())


def main() -> None:
    # the start-up's imports make objects that live as long as the program and no garbage
    # cycles: the cyclic collector waits until they are done (cli.entry), which took 8-13
    # ms off the start-up of a report (numpy's import included: report.analysis)
    gc.disable()
    signal.signal(signal.SIGINT, _quit)  # until the command's own handling takes over
    sys.unraisablehook = _unraisable
    _lazy_imports()
    from bpfsym.cli import entry

    entry()


if __name__ == "__main__":
    main()
