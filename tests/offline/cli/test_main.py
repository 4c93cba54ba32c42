"""bpfsym/__main__.py: the program's entry and its Ctrl-C."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

# The entry as cli.entry has it (Ctrl-C raises once the command's handling is on), with a
# Ctrl-C that lands in a weakref callback, where Python cannot raise it: importlib's
# module-lock cleanup is such a callback, and a real Ctrl-C landed there in CI: it was
# printed as "Exception ignored" with a traceback, and the program went on to exit 0.
_PROGRAM = r"""
import os, signal, sys, time, weakref
import bpfsym.cli
import bpfsym.__main__ as program

def entry():
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        class Lock:
            pass
        lock = Lock()
        def cb(ref):
            raise KeyboardInterrupt
        ref = weakref.ref(lock, cb)
        del lock
        for _ in range(2000):  # two seconds of work that goes on after the callback
            time.sleep(0.001)
        print("went on", flush=True)
        os._exit(0)
    except KeyboardInterrupt:
        os._exit(130)

bpfsym.cli.entry = entry
program.main()
"""


def test_ctrl_c_inside_a_weakref_callback_ends_with_130_and_says_nothing() -> None:
    p = subprocess.run([sys.executable, "-c", _PROGRAM], cwd=ROOT, capture_output=True, timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (130, b"", b"")


def test_other_unraisable_exceptions_are_still_reported() -> None:
    program = _PROGRAM.replace("raise KeyboardInterrupt", "raise ValueError('x')")
    p = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b"went on\n"
    assert b"Exception ignored" in p.stderr and b"ValueError: x" in p.stderr


_LAZY = """
import sys
import bpfsym.__main__ as program
program._lazy_imports()
import bpfsym.cli, bpfsym.commands.report, bpfsym.report.bulk, bpfsym.report.render
print(sorted(n for n in ("pdb", "hashlib") if type(sys.modules.get(n)) is not program._Lazy))
import hashlib, pdb
print(hashlib.sha256(b"bpfsym").hexdigest()[:16], pdb.Pdb.__name__)
print(sorted(n for n in ("pdb", "hashlib") if type(sys.modules.get(n)) is program._Lazy))
import numpy
docs = "numpy._core._add_newdocs"
print(type(sys.modules[docs]) is program._Lazy, numpy.arange(4).sum(), numpy.ndarray.__doc__)
print(sys.modules[docs].add_newdoc.__name__, type(sys.modules[docs]) is program._Lazy)
print(numpy.ndarray.__doc__.split("(")[0])
"""


def test_construct_s_unused_imports_wait_until_something_uses_them() -> None:
    """The report's modules (construct among them) import without pdb and hashlib; the
    first use of one imports the real module, and the stand-in is gone. numpy imports
    without the module that writes its C functions' docstrings, until something uses it."""
    p = subprocess.run(
        [sys.executable, "-c", _LAZY], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:3] == ["[]", "8e84de6a9f0972f9 Pdb", "[]"]
    # numpy imports and works without the docstrings of its C functions; the first use
    # of the docstrings' module writes them (numpy 2's layout, as installed here)
    assert p.stdout.split("\n")[3:6] == [
        "True 6 None",
        "add_newdoc False",
        "ndarray",
    ]


# The program, with each command's run replaced by one that tells how the collector
# stands; an import hook tells it for each bpfsym module as it imports.
_GC = """
import gc, importlib, sys
import bpfsym.cli as cli
import bpfsym.__main__ as program

seen = []
class Finder:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("bpfsym."):
            seen.append(gc.isenabled())
        return None
sys.meta_path.insert(0, Finder())

def run(args):
    print(gc.isenabled(), gc.get_freeze_count() > 0, len(seen) > 2 and not any(seen))
    return 0

real = importlib.import_module
def import_module(name, *a):
    mod = real(name, *a)
    if name.startswith("bpfsym.commands."):
        mod.run = run
    return mod
cli.importlib.import_module = import_module
sys.argv = ["bpfsym", sys.argv[1], *sys.argv[2:]]
program.main()
"""


def test_the_collector_waits_for_the_imports_and_is_on_for_the_command() -> None:
    # off from the first moment (no bpfsym module imports with it on), on when a command
    # runs (record and top run for hours), with what the imports made frozen
    for argv in (["report", "-i", "x.data"], ["top", "-b"], ["record", "--", "true"]):
        p = subprocess.run(
            [sys.executable, "-c", _GC, *argv], cwd=ROOT, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert (p.returncode, p.stdout, p.stderr) == (0, "True True True\n", ""), argv
