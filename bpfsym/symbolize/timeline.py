"""BPF functions over time: JIT addresses are recycled (bpf_prog_pack), so a sample in
BPF code is named by the function alive at its address *at the sample's time*."""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from typing import Any

from bpfsym.model import Capture, LineEntry, Program
from bpfsym.symbolize.symbols import FROM_PERF, SourceLine, Sym, source_text


class ProgLines:
    """A program's source lines by native address (its jited_line_info), for srcline cells."""

    __slots__ = ("lines", "addrs")

    def __init__(self, lines: list[LineEntry]) -> None:
        # sorted: line info is in instruction order, and a sub-program's image can sit
        # below the main function's (bpf_prog_pack allocates each apart)
        self.lines = sorted((x for x in lines if x.jited_addr), key=lambda x: x.jited_addr or 0)
        self.addrs = [x.jited_addr or 0 for x in self.lines]

    def at(self, ip: int) -> LineEntry | None:
        """The line whose native code holds ip (None below the first)."""
        i = bisect.bisect_right(self.addrs, ip) - 1
        return self.lines[i] if i >= 0 else None

    def srcline(self, ip: int) -> str:
        e = self.at(ip)
        if e is None:
            return "??:0"
        return SourceLine(f"{os.path.basename(e.file) or '??'}:{e.line}", source_text(e.text))


@dataclass
class BpfFunc:
    """One JIT-compiled BPF function alive over [load, unload)."""

    name: str
    addr: int
    size: int
    load: int | None  # None: before the capture
    unload: int | None = None  # None: still there at the end
    origin: str = FROM_PERF
    prog: Program | None = None
    sym: Sym | None = None
    _lines: ProgLines | None = None

    def alive(self, t: int | None) -> bool:
        if t is None:
            return self.unload is None
        return (self.load is None or self.load <= t) and (self.unload is None or t < self.unload)

    def srcline(self, ip: int) -> str:
        """file:line of ip with the line's text from BTF ("??:0" without line info)."""
        if self.prog is None:
            return "??:0"
        return self.lines_by_addr().srcline(ip)

    def lines_by_addr(self) -> ProgLines:
        """The program's source lines by native address (made once)."""
        if self._lines is None:
            self._lines = ProgLines(self.prog.lines if self.prog is not None else [])
        return self._lines

    def __getstate__(self) -> dict[str, Any]:
        # a report's second reading process sends its symbols back pickled: the program
        # goes without its images, BTF and instructions (names and lines are all it needs)
        state = dict(self.__dict__)
        p = self.prog
        if p is not None:
            light = p.outline()
            light.lines = p.lines
            state["prog"] = light
        return state


class BpfTimeline:
    """BPF functions over time; lookup(ip, t) is the function at ip alive at t."""

    def __init__(self) -> None:
        self.funcs: list[BpfFunc] = []
        self._starts: list[int] = []
        self._sorted: list[BpfFunc] = []
        self._max_size = 0
        self._dirty = False
        self.by_addr: dict[int, list[BpfFunc]] = {}
        self.lo = 1 << 64  # [lo, hi): what any function ever covered
        self.hi = 0

    def add(self, fn: BpfFunc) -> None:
        # perf gives every KSYMBOL its own DSO, named like the symbol
        fn.sym = Sym(fn.name, fn.name, "k", fn.origin, bpf=fn, start=fn.addr)
        self.funcs.append(fn)
        self.by_addr.setdefault(fn.addr, []).append(fn)
        self._max_size = max(self._max_size, fn.size)
        self.lo = min(self.lo, fn.addr)
        self.hi = max(self.hi, fn.addr + max(fn.size, 1))
        self._dirty = True

    def rename(self, fn: BpfFunc, name: str) -> None:
        fn.name = name
        fn.sym = Sym(name, name, "k", fn.origin, bpf=fn, start=fn.addr)

    def unregister(self, addr: int, t: int | None) -> None:
        for fn in reversed(self.by_addr.get(addr, [])):
            if fn.unload is None:
                fn.unload = t if t is not None else 0
                return

    def candidates(self, ip: int) -> list[BpfFunc]:
        if not self.lo <= ip < self.hi:
            return []
        if self._dirty:
            self._sorted = sorted(self.funcs, key=lambda f: f.addr)
            self._starts = [f.addr for f in self._sorted]
            self._dirty = False
        i = bisect.bisect_right(self._starts, ip)
        out = []
        lo = ip - self._max_size
        while i > 0:
            i -= 1
            fn = self._sorted[i]
            if fn.addr < lo:
                break
            if fn.addr <= ip < fn.addr + max(fn.size, 1):
                out.append(fn)
        return out

    @staticmethod
    def pick(cands: list[BpfFunc], t: int | None) -> BpfFunc | None:
        best = None
        for fn in cands:
            if fn.alive(t) and (best is None or (fn.load or 0) >= (best.load or 0)):
                best = fn
        return best


def _retag(name: str, tag: str) -> str:
    parts = name.split("_", 3)
    if len(parts) == 4 and parts[0] == "bpf" and parts[1] == "prog":
        return f"bpf_prog_{tag}_{parts[3]}"
    if len(parts) == 3 and parts[0] == "bpf" and parts[1] == "prog":
        return f"bpf_prog_{tag}"
    return name


def capture_timeline(cap: Capture, origin: str) -> BpfTimeline:
    """Every function of a side file's programs over its program's lifetime."""
    return programs_timeline(cap.programs, origin)


def programs_timeline(programs: list[Program], origin: str) -> BpfTimeline:
    """Every function of programs over its program's lifetime."""
    tl = BpfTimeline()
    for p in programs:
        for fn in p.functions:
            tl.add(BpfFunc(fn.name, fn.addr, fn.size, p.load_time, p.unload_time, origin, p))
    return tl
