"""BPF functions over time: JIT addresses are recycled (bpf_prog_pack), so a sample in
BPF code is named by the function alive at its address *at the sample's time*."""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from typing import Any

from bpfsym.model import LineEntry
from bpfsym.symbolize.symbols import FROM_PERF, SourceLine, Sym, source_text


@dataclass
class BpfProg:
    """A BPF program as far as symbolization goes."""

    id: int
    tag: str
    main_name: str = ""
    lines: list[LineEntry] = field(default_factory=list)  # sorted by jited_addr
    origin: str = FROM_PERF
    _addrs: list[int] = field(default_factory=list)

    def set_lines(self, lines: list[LineEntry]) -> None:
        self.lines = sorted((x for x in lines if x.jited_addr), key=lambda x: x.jited_addr or 0)
        self._addrs = [x.jited_addr or 0 for x in self.lines]

    def srcline(self, ip: int) -> str:
        i = bisect.bisect_right(self._addrs, ip) - 1
        if i < 0:
            return "??:0"
        e = self.lines[i]
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
    prog: BpfProg | None = None
    sym: Sym | None = None

    def alive(self, t: int | None) -> bool:
        if t is None:
            return self.unload is None
        return (self.load is None or self.load <= t) and (self.unload is None or t < self.unload)


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


def _perf_lines(info: Any, btf_blob: bytes | None) -> list[LineEntry]:
    """Line entries of a HEADER_BPF_PROG_INFO program, strings from HEADER_BPF_BTF."""
    if not info.line_info or len(info.jited_line_info) != len(info.line_info):
        return []
    index = None
    if btf_blob:
        from bpfsym.errors import FormatError
        from bpfsym.read.btf import BtfIndex

        try:
            index = BtfIndex(btf_blob)
        except FormatError:
            index = None
    out = []
    for (insn_off, file_off, line_off, line_col), addr in zip(
        info.line_info, info.jited_line_info, strict=False
    ):
        file = text = ""
        if index is not None:
            try:
                file, text = index.string(file_off), index.string(line_off)
            except Exception:  # noqa: BLE001 - a bad string offset only loses the text
                file = text = ""
        out.append(LineEntry(insn_off, file, text, line_col >> 10, line_col & 0x3FF, addr))
    return out
