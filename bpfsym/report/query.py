"""What a report is asked for: one ReportQuery, built from the command line (or by a test)
and handed down whole through the analysis, and the KeyLayout of the row keys it implies.

Both passes over the samples (report.ordered and report.bulk) key a row as
(cpu?, comm, tid, sym, ip?) and a call-graph stack by that key's head (cpu?, comm, tid);
KeyLayout says which parts are there, so the packing and its undoing live in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from bpfsym.live.host import HostKallsyms
from bpfsym.report.filters import NO_FILTERS, Filters
from bpfsym.symbolize.symbols import Sym

DEFAULT_KEYS = ("comm", "dso", "sym")


@dataclass(frozen=True)
class KeyLayout:
    """Which parts a row key has: (cpu if cpu, comm and tid if thread, sym, ip if ip)."""

    cpu: bool  # --sort cpu: the sample's cpu leads the key
    thread: bool  # --sort comm or pid: the thread's comm and tid follow
    tid: bool  # --sort pid: the tid is kept (else 0: rows of one comm merge)
    ip: bool  # --sort srcline: the sample address ends the key (a line per address)

    @classmethod
    def of(cls, keys: tuple[str, ...] | list[str]) -> KeyLayout:
        return cls(
            cpu="cpu" in keys,
            thread="comm" in keys or "pid" in keys,
            tid="pid" in keys,
            ip="srcline" in keys,
        )

    def unpack(self, key: tuple) -> tuple[str, int, int, Sym, int]:
        """(comm, tid, cpu, sym, ip) of a row key, with "", 0, -1 and 0 for absent parts."""
        i = 0
        cpu = -1
        comm = ""
        tid = 0
        if self.cpu:
            cpu = key[0]
            i = 1
        if self.thread:
            comm, tid = key[i], key[i + 1]
            i += 2
        return comm, tid, cpu, key[i], key[i + 1] if self.ip else 0

    def stack_head(self, key: tuple) -> tuple:
        """The part of a row key a call-graph stack is kept under: (cpu?, comm, tid)."""
        return key[:-2] if self.ip else key[:-1]


@dataclass(frozen=True)
class ReportQuery:
    """One report's input and options, as the command line gave them."""

    path: str = "perf.data"  # the perf.data file (a name for messages when stream is given)
    stream: IO[bytes] | None = None  # read instead of path (stdin for `-i -`)
    side: str | None = None  # the side file, None for none
    keys: tuple[str, ...] = DEFAULT_KEYS  # --sort
    callchains: bool = False  # -g, or --folded
    bpf_only: bool = False
    kallsyms: str | None = None  # --kallsyms: kernel symbols from this file
    output: str = "stdio"  # stdio, json or folded
    percent_limit: float = 0.0  # stdio: rows below this overhead hidden
    accelerate: bool | None = None  # numpy for the bulk of the samples (None: if installed)
    parallel: bool | None = None  # with numpy, two reading processes (None: if worth it)
    host: HostKallsyms | None = None  # the host's /proc/kallsyms, being read beside
    symfs: str = ""  # --symfs: binaries looked up under this directory, not the host's
    filters: Filters = NO_FILTERS  # --comms, --pid, --tid, --cpu, --time

    @property
    def layout(self) -> KeyLayout:
        return KeyLayout.of(self.keys)
