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
