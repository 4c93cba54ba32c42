"""KSYMBOL records paired with the BPF_EVENT that follows them.

The kernel registers a program's functions (PERF_RECORD_KSYMBOL, one per function) and
then reports the load (PERF_RECORD_BPF_EVENT PROG_LOAD) from the same CPU, in that order
(kernel/bpf/syscall.c bpf_prog_load: bpf_prog_kallsyms_add, then perf_event_bpf_event),
so the KSYMBOLs a CPU saw since its last BPF_EVENT are the loaded program's functions.
Used by the side-file reader (one ring per CPU) and by the symbolizer (perf.data).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

F = TypeVar("F")


class LoadPairing(Generic[F]):
    """Functions registered on each CPU, waiting for their program's BPF_EVENT."""

    def __init__(self) -> None:
        self.pending: defaultdict[int, list[F]] = defaultdict(list)

    def ksymbol(self, cpu: int, fn: F) -> None:
        self.pending[cpu].append(fn)

    def take(
        self, cpu: int, addrs: Iterable[int] | None = None, addr: Callable[[F], int] | None = None
    ) -> list[F]:
        """The functions of the program whose BPF_EVENT came now: all pending on the CPU, or,
        when the program's function addresses are known (bpf_prog_info.jited_ksyms), those
        at them (the others stay for a later event)."""
        pend = self.pending[cpu]
        if addrs is None or addr is None:
            self.pending[cpu] = []
            return pend
        want = set(addrs)
        mine = [f for f in pend if addr(f) in want]
        self.pending[cpu] = [f for f in pend if addr(f) not in want]
        return mine

    def peek(self, cpu: int) -> list[F]:
        return self.pending[cpu]
