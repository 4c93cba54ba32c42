"""Which processes of a report choose the kernel symbols (report.split.KernelHandoff: the
first of two reading processes only)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from bpfsym.report import sideband


def kernel_symbols_callers(monkeypatch: pytest.MonkeyPatch, where: str) -> Callable[[], list[int]]:
    """Have every call of report.sideband.kernel_symbols write its process's pid to a file
    in where (a forked reading process shares the patch); the returned function gives the
    pids of the calls since it was last asked."""
    calls = os.path.join(where, "kernel_symbols_calls")
    real = sideband.kernel_symbols

    def counted(*args: object, **kw: object) -> object:
        with open(calls, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*args, **kw)

    monkeypatch.setattr(sideband, "kernel_symbols", counted)

    def callers() -> list[int]:
        try:
            with open(calls) as f:
                got = [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return []
        os.unlink(calls)
        return got

    return callers
