"""User stacks of `perf record --call-graph dwarf` samples, unwound as the report delivers
them: the record-by-record pass (report.ordered) reads each sample's registers and stack
copy while its buffer is valid, and unwinds them at delivery, in perf's ordered order, so
the memory maps are those the process had at the sample's time (as perf's
thread__resolve_callchain does from the machine state of its delivery).

The chain a sample gets is perf's (machine.c thread__resolve_callchain, callee order):
the kernel part of PERF_SAMPLE_CALLCHAIN up to PERF_CONTEXT_USER (perf record sets
exclude_callchain_user, so there is no user part), then PERF_CONTEXT_USER and the
unwound user addresses, leaf first. A sample whose stack cannot be unwound keeps what
could be: at least its leaf. Why each stopped early is counted for the report header.

One Unwinder serves the pass: it keeps each binary's CFI; the rules and whole walks it
learns are kept per maps object, and a process gets a new one only when its maps change
(Symbolizer.ugen), so the cache lives as long as a map generation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bpfsym.formats import perfdata as F
from bpfsym.read.elf import DEBUG_ROOT
from bpfsym.read.perfdata import EventAttr, PerfData
from bpfsym.read.user_stack import REGS_ABI_NONE, UserSampleLayout, UserStack, UserStackError
from bpfsym.symbolize.symbolizer import Symbolizer
from bpfsym.symbolize.unwind import MappedFile, Unwinder, find_map
from bpfsym.symbolize.unwind_stops import BAD_CFI, NO_BINARY, NO_CFI, UnwindError

# the reasons whose detail starts with the file they are about: the report names it
_ABOUT_A_FILE = (NO_BINARY, NO_CFI, BAD_CFI)

SHORT_SAMPLE = "sample shorter than its user registers and stack"


@dataclass
class Pending:
    """A sample's kernel chain and user stack, read at queueing, unwound at delivery."""

    chain: tuple[int, ...] | None  # PERF_SAMPLE_CALLCHAIN, None without it
    stack: UserStack | None  # None: unreadable (error says why)
    error: str = ""


@dataclass
class UnwindCounts:
    """Samples with user registers and stack, and why those not unwound to their
    outermost frame stopped (reason, with the file where it is about one)."""

    samples: int = 0
    stopped: dict[str, int] = field(default_factory=dict)

    def stop(self, why: str) -> None:
        self.stopped[why] = self.stopped.get(why, 0) + 1


class _Maps:
    """One process's memory maps of one generation, looked up by address (the Unwinder
    keeps what it learns per object of this class: weakly, while it is in use)."""

    def __init__(self, gen: int, maps: tuple[Any, ...]) -> None:
        self.gen = gen
        self.maps = maps
        self.starts = [m.start for m in maps]

    def __call__(self, addr: int) -> MappedFile | None:
        return find_map(self.maps, self.starts, addr)


class UserStacks:
    """The unwinding of one pass's dwarf samples against its Symbolizer's maps."""

    def __init__(self, pd: PerfData, sym: Symbolizer, symfs: str) -> None:
        self.pd = pd
        self.sym = sym
        self.symfs = symfs
        self.layouts: dict[int, UserSampleLayout | None] = {}
        self.counts = UnwindCounts()
        self.lookups: dict[int, _Maps] = {}
        self._unwinder: Unwinder | None = None
        self.arch = ""

    def layout(self, ev: EventAttr) -> UserSampleLayout | None:
        """Where ev's samples keep user registers and stack; None: they keep none."""
        got = self.layouts.get(ev.index, False)
        if got is False:
            lay = UserSampleLayout.of(ev, self.pd.little)
            got = self.layouts[ev.index] = lay if lay.wanted else None
        return got  # type: ignore[return-value]

    def read(
        self, lay: UserSampleLayout, chain: tuple[int, ...] | None, buf: Any, start: int, size: int
    ) -> Pending:
        """A sample's user stack, copied out of the pass's buffer."""
        try:
            return Pending(chain, lay.extract(buf, start, size))
        except UserStackError:
            return Pending(chain, None, SHORT_SAMPLE)

    def unwinder(self) -> Unwinder:
        if self._unwinder is None:
            # with --symfs nothing of this host is read: no build-id cache, no debug dirs
            symfs = self.symfs
            self._unwinder = Unwinder(
                root=symfs,
                little=self.pd.little,
                cache=not symfs,
                debug_dirs=() if symfs else (DEBUG_ROOT,),
            )
            # perf_env__arch: the recorded machine's, else this one's
            self.arch = self.pd.header.arch or os.uname().machine
        return self._unwinder

    def chain(self, pid: int, p: Pending) -> tuple[int, ...]:
        """The sample's chain as perf makes it: kernel part, then the unwound user part."""
        kernel: list[int] = []
        for e in p.chain or ():
            if e == F.CONTEXT_USER:
                break
            kernel.append(e)
        us = p.stack
        counts = self.counts
        if us is None:
            counts.samples += 1
            counts.stop(p.error)
            return tuple(kernel)
        if us.abi == REGS_ABI_NONE:
            return tuple(kernel)  # no user state (a kernel thread): nothing to unwind
        counts.samples += 1
        uw = self.unwinder()
        try:
            got = uw.unwind(self.arch, us.regs, us.stack, self._maps(pid), abi=us.abi)
        except UnwindError as e:  # an architecture without DWARF unwinding here
            counts.stop(str(e))
            return tuple(kernel)
        if got.reason is not None:
            counts.stop(_label(got.reason, got.detail))
        if not got.ips:
            return tuple(kernel)
        return (*kernel, F.CONTEXT_USER, *got.ips)

    def _maps(self, pid: int) -> _Maps:
        sym = self.sym
        gen = sym.ugen.get(pid, 0)
        got = self.lookups.get(pid)
        if got is None or got.gen != gen:
            got = self.lookups[pid] = _Maps(gen, tuple(sym.maps.get(pid, ())))
        return got


def _label(reason: str, detail: str) -> str:
    """How the header names a stop: the reason, and the binary it is about."""
    if reason not in _ABOUT_A_FILE:
        return reason
    if detail.startswith(("/", "[")):  # "PATH: why", "PATH has ...", "NAME (build id ...)"
        path = detail.split(" ", 1)[0].rstrip(":")
    elif detail.startswith("0x") and " in " in detail:  # "ADDRESS in NAME"
        path = detail.split(" in ", 1)[1]
    else:
        return reason
    return f"{reason} ({os.path.basename(path) or path})"
