"""Turn (cpumode, pid, address, time) into names: BPF, kernel and user-space symbols.

BPF functions come with lifetimes (JIT addresses are recycled), so they are
looked up by address *and* time: from the side file's timeline, or, without
one, from perf.data's own KSYMBOL/BPF_EVENT records and HEADER_BPF_PROG_INFO.
Kernel symbols come from a kallsyms snapshot; user-space ones from MMAP/MMAP2
records and ELF symbol tables. Lookups are cached by address.
"""

from __future__ import annotations

import bisect
import functools
import mmap
import os
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .formats import elf as E
from .formats import perf as K
from .formats import perfdata as F
from .formats import struct_of
from .formats.elf import elf_layouts
from .formats.errors import FormatError
from .hostsyms import parse_kallsyms
from .model import Capture, KernelSymbol, LineEntry

# where a symbol came from (the report header counts these)
FROM_SIDE = "side file"
FROM_PERF = "perf.data records"
FROM_KALLSYMS_SIDE = "side-file kallsyms"
FROM_KALLSYMS_HOST = "host /proc/kallsyms"
FROM_ELF = "ELF symbols"
UNRESOLVED = "unresolved"

KALLSYMS_TYPES = set("TtWwDdBbul")  # perf's symbol_type__filter for kallsyms
KALLSYMS_TYPES_B = b"TtWwDdBbul"


CONTEXT_MODES = {
    F.CONTEXT_KERNEL: F.MISC_KERNEL,
    F.CONTEXT_USER: F.MISC_USER,
    F.CONTEXT_HV: F.MISC_HYPERVISOR,
    F.CONTEXT_GUEST: F.MISC_GUEST_KERNEL,
}


class Sym:
    """A resolved (or unresolved) symbol: what the report columns show."""

    __slots__ = ("name", "dso", "kind", "origin", "bpf", "reason", "start")

    def __init__(
        self,
        name: str,
        dso: str,
        kind: str,
        origin: str,
        reason: str = "",
        bpf: BpfFunc | None = None,
        start: int = 0,
    ) -> None:
        self.name = name
        self.dso = dso
        self.kind = kind  # "k" kernel, "." user
        self.origin = origin
        self.reason = reason  # why it stayed unresolved
        self.bpf = bpf
        self.start = start

    def __reduce__(self) -> tuple:
        # by constructor arguments: pickling by slots took three times as long (report's
        # second process sends its symbols back); bpf as state, made after this Sym, as
        # its function refers back to it
        args = (self.name, self.dso, self.kind, self.origin, self.reason, None, self.start)
        return Sym, args, self.bpf

    def __setstate__(self, bpf: BpfFunc | None) -> None:
        self.bpf = bpf

    @property
    def prog(self) -> str:
        """The program's name (its main function's kallsyms name); "" outside BPF."""
        if self.bpf is None:
            return ""
        return self.bpf.prog.main_name if self.bpf.prog is not None else self.name

    @property
    def label(self) -> str:
        return f"[{self.kind}] {self.name}"

    def srcline(self, ip: int) -> str:
        """file:line of ip; for BPF code a SourceLine with the line's text from BTF."""
        if self.bpf is None or self.bpf.prog is None:
            return "??:0"
        return self.bpf.prog.srcline(ip)


class SourceLine(str):
    """A source-line cell: "file:line  text" as shown, the two parts kept (--json)."""

    location: str
    source: str

    def __new__(cls, location: str, source: str) -> SourceLine:
        self = super().__new__(cls, f"{location}  {source}" if source else location)
        self.location = location
        self.source = source
        return self


def source_text(text: str) -> str:
    """A BTF source line for one column: indentation and runs of blanks made one space."""
    return " ".join(text.split())


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


class KernelSymbols:
    """A kallsyms table: symbol at ip is the last one starting at or below it (as perf does)."""

    def __init__(self, syms: list[KernelSymbol], origin: str, note: str = "") -> None:
        self.origin = origin
        self.note = note or origin
        self._line: Any = None
        self._build([(s.addr, s.type, s.name, s.module) for s in syms])

    @classmethod
    def from_text(cls, text: str, origin: str, note: str = "", np: Any = None) -> KernelSymbols:
        """From /proc/kallsyms text, without building a KernelSymbol per line.

        With numpy (np), addresses and types are read column-wise and a line is split
        only when a lookup lands on it.
        """
        self = cls.__new__(cls)
        self.origin = origin
        self.note = note or origin
        self._line = None
        if np is not None and self._columns(text, np):
            return self
        rows = []
        for line in text.splitlines():
            parts = line.split(None, 3)
            if len(parts) < 3:
                continue
            mod = parts[3].strip()[1:-1] if len(parts) > 3 else ""
            try:
                rows.append((int(parts[0], 16), parts[1], parts[2], mod))
            except ValueError:
                continue  # not a kallsyms line
        self._build(rows)
        return self

    def _columns(self, text: str, np: Any) -> bool:
        """The numpy reading of from_text; False when the text is not plain kallsyms."""
        if not text.isascii():
            return False
        if not text.endswith("\n"):
            text += "\n"
        raw = text.encode("ascii")
        buf = np.frombuffer(raw, dtype=np.uint8)
        ends = np.flatnonzero(buf == 10)
        starts = np.concatenate(([0], ends[:-1] + 1))
        width = text.find(" ")
        if width <= 0 or width > 16 or bool((ends - starts < width + 4).any()):
            return False
        if bool((buf[starts + width] != 32).any() or (buf[starts + width + 2] != 32).any()):
            return False
        digit = np.full(256, 255, dtype=np.uint64)
        for i, ch in enumerate(b"0123456789abcdef"):
            digit[ch] = i
        for i, ch in enumerate(b"ABCDEF"):
            digit[ch] = 10 + i
        addr = np.zeros(len(starts), dtype=np.uint64)
        for k in range(width):
            d = digit[buf[starts + k]]
            if bool((d == 255).any()):
                return False
            addr = (addr << np.uint64(4)) | d
        wanted = np.zeros(256, dtype=bool)
        wanted[list(KALLSYMS_TYPES_B)] = True
        # lines ending "\t[bpf]": read_host_kallsyms cut those, so this is other text
        tail = ends[ends >= 6]
        bpf = tail[(buf[tail - 5] == ord("[")) & (buf[tail - 4] == ord("b"))]
        if any(raw[e - 6 : e] == b"\t[bpf]" for e in bpf.tolist()):
            return False
        keep = np.flatnonzero(wanted[buf[starts + width + 1]] & (addr != 0))
        order = keep[np.argsort(addr[keep], kind="stable")]
        a = addr[order]
        last = np.ones(len(a), dtype=bool)  # of one address, the last line (see _build)
        last[:-1] = a[1:] != a[:-1]
        order = order[last]
        self._addr_np = addr[order]
        self._addrs: list[int] | None = None  # made at the first one-by-one lookup
        self._line = (text, starts[order], ends[order])
        self._made: dict[int, KernelSymbol] = {}
        return True

    def _build(self, rows: list[tuple[int, str, str, str]]) -> None:
        by_addr: dict[int, tuple[int, str, str, str]] = {}
        types = KALLSYMS_TYPES
        for r in rows:
            if r[1] not in types or r[3] == "bpf" or r[0] == 0:
                continue
            # perf fixes symbol ends before dropping duplicates, so of several symbols at
            # one address only the last has a length, and choose_best_symbol keeps it
            by_addr[r[0]] = r
        addrs = self._addrs = sorted(by_addr)
        self._syms = [KernelSymbol(*by_addr[a]) for a in addrs]

    @property
    def addrs(self) -> list[int]:
        """The symbols' start addresses, sorted (bulk lookups use addr_array instead)."""
        got = self._addrs
        if got is None:
            got = self._addrs = self._addr_np.tolist()
        return got

    @property
    def syms(self) -> list[KernelSymbol]:
        if self._line is not None:
            return [self._sym(i) for i in range(len(self.addrs))]
        return self._syms

    def _sym(self, i: int) -> KernelSymbol:
        s = self._made.get(i)
        if s is None:
            text, starts, ends = self._line
            parts = text[int(starts[i]) : int(ends[i])].split(None, 3)
            mod = parts[3].strip()[1:-1] if len(parts) > 3 else ""
            s = self._made[i] = KernelSymbol(int(self._addr_np[i]), parts[1], parts[2], mod)
        return s

    def __len__(self) -> int:
        return len(self._addrs) if self._addrs is not None else len(self._addr_np)

    def lookup(self, ip: int) -> KernelSymbol | None:
        i = self.index(ip)
        return self.at(i) if i >= 0 else None

    def addr_array(self, np: Any) -> Any:
        """The symbols' start addresses as a numpy uint64 array (for bulk lookups)."""
        got = getattr(self, "_addr_np", None)
        if got is None:
            got = self._addr_np = np.array(self.addrs, dtype=np.uint64)
        return got

    def index(self, ip: int) -> int:
        """The index of the symbol covering ip (see at), -1 below the first one."""
        return bisect.bisect_right(self.addrs, ip) - 1

    def at(self, i: int) -> KernelSymbol:
        return self._sym(i) if self._line is not None else self._syms[i]


def demangle(names: set[str]) -> dict[str, str]:
    """mangled -> demangled C++ names, in one `c++filt -p` run (binutils; perf prints
    the same text through libiberty). {} where c++filt cannot run: names stay mangled."""
    order = sorted(names)
    if not order:
        return {}
    try:
        out = subprocess.run(
            ["c++filt", "-p"], input="\n".join(order) + "\n", capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) != len(order):
        return {}
    return dict(zip(order, lines, strict=True))


@dataclass
class MapEntry:
    start: int
    end: int
    pgoff: int
    filename: str
    build_id: str = ""


class Symbolizer:
    """Resolves sample addresses; fed the perf.data side-band records in file order."""

    def __init__(
        self,
        kernel: KernelSymbols | None,
        kernel_note: str,
        capture: Capture | None = None,
        elf_root: str = "",
    ) -> None:
        self.kernel = kernel
        self.kernel_note = kernel_note
        self.bpf_side = BpfTimeline()
        self.bpf_perf = BpfTimeline()
        self.capture = capture
        self.kcache: dict[int, Any] = {}
        self.kgen = 0  # bumped whenever kcache is dropped
        self.ucache: dict[int, dict[int, Sym]] = {}
        self.ugen: dict[int, int] = {}  # per pid, bumped whenever its maps change
        self.maps: dict[int, list[MapEntry]] = {}
        self.map_starts: dict[int, list[int]] = {}
        self.comms: dict[int, str] = {0: "swapper"}
        self.progs_perf: dict[int, BpfProg] = {}
        self.prog_infos: dict[int, Any] = {}
        self.btfs: dict[int, bytes] = {}
        self.build_ids: dict[str, str] = {}
        self.elf = ElfCache(elf_root)
        self.ool: dict[int, tuple[int, str]] = {}
        self._ksyms: dict[int, Sym] = {}  # kallsyms index -> its Sym
        self._unres: dict[Any, Sym] = {}
        self._by_file: dict[tuple[str, str, int], Sym] = {}
        self.pending_ksyms: list[BpfFunc] = []
        self.side_used = False
        if capture is not None:
            self._load_capture(capture)

    # ---- sources -------------------------------------------------------

    def _load_capture(self, cap: Capture) -> None:
        for p in cap.programs:
            prog = BpfProg(p.id, p.tag, origin=FROM_SIDE)
            prog.set_lines(p.lines)
            for i, fn in enumerate(p.functions):
                bf = BpfFunc(fn.name, fn.addr, fn.size, p.load_time, p.unload_time, FROM_SIDE, prog)
                if i == 0:
                    prog.main_name = fn.name
                self.bpf_side.add(bf)

    def set_header(self, progs: dict[int, Any], btfs: dict[int, bytes], build_ids: list) -> None:
        self.prog_infos = progs
        self.btfs = btfs
        for b in build_ids:
            self.build_ids[b.filename] = b.build_id

    def ksymbol(
        self, addr: int, length: int, ksym_type: int, flags: int, name: str, t: int | None
    ) -> None:
        if ksym_type == K.KSYMBOL_TYPE_BPF:
            if flags & K.KSYMBOL_FLAGS_UNREGISTER:
                self.bpf_perf.unregister(addr, t)
            else:
                fn = BpfFunc(name, addr, length, t or None, None, FROM_PERF)
                self.bpf_perf.add(fn)
                self.pending_ksyms.append(fn)
            self._drop_kcache()
        else:
            # out-of-line code (trampolines, dispatchers, ...): named by the kernel
            if flags & K.KSYMBOL_FLAGS_UNREGISTER:
                self.ool.pop(addr, None)
            else:
                self.ool[addr] = (length, name)
            self._drop_kcache()

    def bpf_event(self, etype: int, prog_id: int, tag: bytes, t: int | None) -> None:
        if etype != K.BPF_EVENT_PROG_LOAD:
            return
        info = self.prog_infos.get(prog_id)
        prog = BpfProg(prog_id, tag.hex())
        self.progs_perf[prog_id] = prog
        if info is not None and info.jited_ksyms:
            addrs = info.jited_ksyms
            mine = [f for f in self.pending_ksyms if f.addr in addrs]
            for fn in mine:
                fn.prog = prog
                if fn.addr == addrs[0] and len(addrs) > 1:
                    # perf names a synthesized main function after prog_tags[0]; kallsyms
                    # uses the program's tag (kernel bpf_prog_ksym_set_name)
                    self.bpf_perf.rename(fn, _retag(fn.name, prog.tag))
                if fn.addr == addrs[0]:
                    prog.main_name = fn.name
            self.pending_ksyms = [f for f in self.pending_ksyms if f not in mine]
            prog.set_lines(_perf_lines(info, self.btfs.get(int(info.info["btf_id"]))))
        else:
            # no prog info (pipe mode): the functions registered just before are this
            # program's; perf synthesizes them main function first, named after prog_tags[0]
            pend = self.pending_ksyms
            mine_tag = f"bpf_prog_{prog.tag}"
            if (
                len(pend) > 1
                and all(f.load is None for f in pend)
                and not any(f.name.startswith(mine_tag) for f in pend)
            ):
                self.bpf_perf.rename(pend[0], _retag(pend[0].name, prog.tag))
            for fn in self.pending_ksyms:
                if fn.name.startswith(f"bpf_prog_{prog.tag}"):
                    fn.prog = prog
                    prog.main_name = fn.name
            for fn in self.pending_ksyms:
                if fn.prog is None:
                    fn.prog = prog
            self.pending_ksyms = []

    def comm(self, pid: int, tid: int, name: str, exec_: bool) -> None:
        self.comms[tid] = name
        if exec_ and pid == tid:
            self.maps.pop(pid, None)
            self.map_starts.pop(pid, None)
            self._drop_ucache(pid)

    def fork(self, pid: int, ppid: int, tid: int, ptid: int) -> None:
        parent = self.comms.get(ptid)
        if parent is not None:
            self.comms[tid] = parent
        if pid != ppid and ppid in self.maps and pid not in self.maps:
            self.maps[pid] = list(self.maps[ppid])
            self.map_starts[pid] = list(self.map_starts[ppid])

    def mmap(self, pid: int, start: int, length: int, pgoff: int, filename: str, bid: str) -> None:
        if pid == 0xFFFFFFFF or pid == -1:
            return  # kernel maps: kallsyms covers them
        lst = self.maps.setdefault(pid, [])
        starts = self.map_starts.setdefault(pid, [])
        end = start + length
        # drop what the new map overlaps (maps__fixup_overlappings, simplified)
        keep = [m for m in lst if m.end <= start or m.start >= end]
        keep.append(MapEntry(start, end, pgoff, filename, bid or self.build_ids.get(filename, "")))
        keep.sort(key=lambda m: m.start)
        lst[:] = keep
        starts[:] = [m.start for m in keep]
        self._drop_ucache(pid)

    def _drop_kcache(self) -> None:
        self.kcache.clear()
        self.kgen += 1

    def _drop_ucache(self, pid: int) -> None:
        self.ucache.pop(pid, None)
        self.ugen[pid] = self.ugen.get(pid, 0) + 1

    # ---- lookups -------------------------------------------------------

    def resolve_chain(
        self, cpumode: int, pid: int, ip: int, chain: tuple[int, ...], t: int | None
    ) -> tuple[tuple[Sym, ...], bool]:
        """Symbols of a callchain, leaf first; the flag says the result holds at any time."""
        out: list[Sym] = []
        add = out.append
        mode = cpumode
        timeless = True
        first = True
        kcache = self.kcache
        ucache = self.ucache.get(pid)
        for e in chain:
            if e >= F.CONTEXT_MAX:
                mode = CONTEXT_MODES.get(e, 0)
                continue
            if first:
                first = False
                if e != ip:
                    add(self.resolve(cpumode, pid, ip, t))
            # resolve() with its caches looked at here first (the common case)
            if mode == F.MISC_KERNEL:
                c = kcache.get(e)
                if type(c) is Sym:
                    add(c)
                    continue
                add(self.resolve_kernel(e, t))
                if type(kcache.get(e)) is tuple:
                    timeless = False
            elif mode == F.MISC_USER:
                s = ucache.get(e) if ucache is not None else None
                if s is None:
                    s = self.resolve_user(pid, e)
                    ucache = self.ucache.get(pid)
                add(s)
            else:
                add(self.resolve(mode, pid, e, t))
        if first:
            out.append(self.resolve(cpumode, pid, ip, t))
        if cpumode == F.MISC_KERNEL and type(self.kcache.get(ip)) is tuple:
            timeless = False
        return tuple(out), timeless

    def thread_comm(self, tid: int) -> str:
        c = self.comms.get(tid)
        return c if c is not None else f":{tid}"

    def demangle(self) -> None:
        """Name C++ user-space symbols as perf does (demangled, without parameters)."""
        mangled = [s for s in self._unres.values() if s.kind == "." and s.name.startswith("_Z")]
        # perf demangles a PLT symbol's name before it adds "@plt"
        bare = {s.name: s.name[:-4] if s.name.endswith("@plt") else s.name for s in mangled}
        table = demangle(set(bare.values()))
        for s in mangled:
            b = bare[s.name]
            s.name = table.get(b, b) + s.name[len(b) :]

    def adopt(self, s: Sym) -> None:
        """A symbol resolved by another reading process: demangled with these."""
        self._unres[("adopted", id(s))] = s

    def unresolved(self, dso: str, kind: str, ip: int, reason: str) -> Sym:
        key = (dso, kind, ip, reason)
        s = self._unres.get(key)
        if s is None:
            s = Sym(f"0x{ip:016x}", dso, kind, UNRESOLVED, reason=reason, start=ip)
            self._unres[key] = s
        return s

    def resolve(self, cpumode: int, pid: int, ip: int, t: int | None) -> Sym:
        if cpumode == F.MISC_KERNEL:
            return self.resolve_kernel(ip, t)
        if cpumode == F.MISC_USER:
            return self.resolve_user(pid, ip)
        if cpumode == F.MISC_HYPERVISOR:
            return self.unresolved("[hypervisor]", "H", ip, "hypervisor")
        return self.unresolved("[guest]", "g", ip, "guest")

    def resolve_kernel(self, ip: int, t: int | None) -> Sym:
        c = self.kcache.get(ip)
        if c is None:
            c = self._kernel_entry(ip)
            self.kcache[ip] = c
        if type(c) is Sym:
            return c
        # (side candidates, perf candidates, fallback)
        side, perfc, fallback = c
        if side:
            fn = BpfTimeline.pick(side, t)
            if fn is not None and fn.sym is not None:
                self.side_used = True
                return fn.sym
        if perfc:
            fn = BpfTimeline.pick(perfc, t)
            if fn is not None and fn.sym is not None:
                return fn.sym
        return fallback

    def _kernel_entry(self, ip: int) -> Any:
        side = self.bpf_side.candidates(ip)
        perfc = self.bpf_perf.candidates(ip)
        if side or perfc:
            fallback = self.unresolved(
                "[bpf]", "k", ip, "BPF address with no program alive at the sample's time"
            )
            return (side, perfc, fallback)
        for addr, (length, name) in self.ool.items():
            if addr <= ip < addr + max(length, 1):
                return Sym(name, name, "k", FROM_PERF, start=addr)  # its own DSO, as perf
        if self.kernel is None:
            return self.unresolved("[kernel.kallsyms]", "k", ip, self.kernel_note)
        i = self.kernel.index(ip)
        if i < 0:
            return self.unresolved("[kernel.kallsyms]", "k", ip, "below the first kernel symbol")
        return self.kernel_sym(i)

    def kernel_sym(self, i: int) -> Sym:
        """The Sym of kallsyms symbol i: one per symbol, however many addresses land in it."""
        s = self._ksyms.get(i)
        if s is None:
            assert self.kernel is not None
            ks = self.kernel.at(i)
            dso = f"[{ks.module}]" if ks.module else "[kernel.kallsyms]"
            s = self._ksyms[i] = Sym(ks.name, dso, "k", self.kernel.origin, start=ks.addr)
        return s

    def bpf_envelope(self) -> tuple[int, int]:
        """[lo, hi) around every BPF function ever known (lo >= hi: none)."""
        a, b = self.bpf_side, self.bpf_perf
        return min(a.lo, b.lo), max(a.hi, b.hi)

    def resolve_user(self, pid: int, ip: int) -> Sym:
        cache = self.ucache.get(pid)
        if cache is None:
            cache = self.ucache[pid] = {}
        s = cache.get(ip)
        if s is None:
            s = cache[ip] = self._user(pid, ip)
        return s

    def _user(self, pid: int, ip: int) -> Sym:
        starts = self.map_starts.get(pid)
        if not starts:
            return self.unresolved("[unknown]", ".", ip, "no memory map for the process")
        i = bisect.bisect_right(starts, ip) - 1
        m = self.maps[pid][i] if i >= 0 else None
        if m is None or ip >= m.end:
            return self.unresolved("[unknown]", ".", ip, "address outside every memory map")
        rel = ip - m.start + m.pgoff
        key = (m.filename, m.build_id, rel)
        s = self._by_file.get(key)
        if s is None:
            s = self._by_file[key] = self._user_in(m, rel)
        return s

    def _user_in(self, m: MapEntry, rel: int) -> Sym:
        dso = os.path.basename(m.filename) or m.filename
        if m.filename.startswith("[") and not m.build_id:
            return self.unresolved(m.filename, ".", rel, f"no symbols for {m.filename}")
        elf = self.elf.get(m.filename, m.build_id)
        if isinstance(elf, str):
            return self.unresolved(dso, ".", rel, elf)
        hit = elf.lookup(rel)
        if hit is None:
            return self.unresolved(dso, ".", rel, elf.why_missing or "no symbol covers the address")
        return self._elf_sym(m.filename, dso, hit[1], hit[0])

    def _elf_sym(self, filename: str, dso: str, start: int, name: str) -> Sym:
        """The Sym of the function (or PLT stub) at start in filename: one per symbol."""
        key = (filename, start)
        s = self._unres.get(key)
        if s is None:
            s = self._unres[key] = Sym(name, dso, ".", FROM_ELF, start=start)
        return s

    def user_file_syms(self, np: Any, m: MapEntry, rels: Any) -> tuple[Any, list[Sym]]:
        """What _user_in(m, rel) gives for each of many addresses rels (numpy uint64) of
        one mapped file: an index into the returned list of symbols per address."""
        dso = os.path.basename(m.filename) or m.filename
        if m.filename.startswith("[") and not m.build_id:
            return self._each_unresolved(np, rels, m.filename, f"no symbols for {m.filename}")
        elf = self.elf.get(m.filename, m.build_id)
        if isinstance(elf, str):
            return self._each_unresolved(np, rels, dso, elf)
        n = len(rels)
        vaddr = np.zeros(n, dtype=np.uint64)
        mapped = np.zeros(n, dtype=bool)
        for off, size, va in elf.segs:
            sel = (rels >= np.uint64(off)) & (rels < np.uint64(off + size)) & ~mapped
            vaddr[sel] = rels[sel] - np.uint64(off) + np.uint64(va)
            mapped |= sel
        starts = elf.starts_array(np)
        i = np.searchsorted(starts, vaddr, side="right").astype(np.int64) - 1
        plt = elf.plt
        stub = None
        if plt is not None:
            stub = mapped & (vaddr >= np.uint64(plt.lo)) & (vaddr < np.uint64(plt.hi))
            if not bool(stub.any()):
                stub = None
            else:
                mapped = mapped & ~stub  # named below, as their PLT entries
        ok = mapped & (i >= 0)
        hit = unique(np, i[ok])[0]
        hit_l = hit.tolist()
        ends = np.array([elf._hit(k)[0] for k in hit_l], dtype=np.uint64)
        at = np.searchsorted(hit, np.where(ok, i, 0))
        ok &= vaddr < ends[np.minimum(at, max(len(hit) - 1, 0))] if len(hit) else False
        syms = [self._elf_sym(m.filename, dso, elf.starts[k], elf._hit(k)[1]) for k in hit_l]
        codes = np.where(ok, at, 0).astype(np.int64)
        if stub is not None and plt is not None:
            sel = np.flatnonzero(stub)
            entry, inv = unique(np, (vaddr[sel] - np.uint64(plt.lo)) // np.uint64(plt.entry))
            for k in entry.tolist():
                syms.append(self._elf_sym(m.filename, dso, plt.lo + k * plt.entry, plt.name(k)))
            codes[sel] = inv + (len(syms) - len(entry))
            ok |= stub
        miss = np.flatnonzero(~ok)
        if len(miss):
            why = elf.why_missing or "no symbol covers the address"
            mc, ms = self._each_unresolved(np, rels[miss], dso, why)
            codes[miss] = mc + len(syms)
            syms.extend(ms)
        return codes, syms

    def _each_unresolved(self, np: Any, rels: Any, dso: str, why: str) -> tuple[Any, list[Sym]]:
        u, inv = unique(np, rels)
        syms = [self.unresolved(dso, ".", r, why) for r in u.tolist()]
        return inv, syms


def unique(np: Any, a: Any) -> tuple[Any, Any]:
    """np.unique(a, return_inverse=True) for a 1-d array, without np.unique: numpy 2's
    imports numpy.ma on first use, which costs a short report more than the sorting."""
    perm = np.argsort(a, kind="stable")
    s = a[perm]
    new = np.empty(len(s), dtype=bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    inv = np.empty(len(s), dtype=np.int64)
    inv[perm] = np.cumsum(new) - 1
    return s[new], inv


GRID_BYTES = 4096


class SortedKallsyms(KernelSymbols):
    """/proc/kallsyms text looked up where it lies, for reports too small to be worth
    numpy: the kernel's own symbols come sorted by address (scripts/kallsyms sorts them
    and the kernel's lookups rely on it), so a lookup is a binary search over the text's
    lines; the module lines after them ("\t[name]") are read in full. It answers as
    KernelSymbols does: wanted types only, no zero addresses, the last line of one address.
    A symbol's index is its line's offset in the text (module symbols: past the kernel's).
    A line found not to parse raises bad(error) (default: a FormatError naming origin)."""

    def __init__(
        self,
        text: str,
        origin: str,
        note: str = "",
        bad: Callable[[Exception], Exception] | None = None,
    ) -> None:
        self.origin = origin
        self.note = note or origin
        self._line = None
        self.text = text
        self._bad = bad or (lambda e: FormatError(origin, 0, f"not a kallsyms line ({e})"))
        self._width = max(text.find(" "), 1)
        lo, hi = 0, len(text)  # the first module line: the kernel's lines have no "\t["
        while lo < hi:
            start = self._start(lo + (hi - lo) // 2)
            end = self._end(start)
            if "\t[" in text[start:end]:
                hi = start
            else:
                lo = end + 1
        self.core_end = min(lo, len(text))
        try:  # the few module lines, in full
            mods = KernelSymbols(parse_kallsyms(text[self.core_end :]), origin)
        except ValueError as e:
            raise self._bad(e) from None
        self._mod_addrs = mods.addrs
        self._mods = mods.syms
        self._made: dict[int, KernelSymbol] = {}
        grid = sorted({self._start(p) for p in range(0, self.core_end, GRID_BYTES)})
        self._grid = grid  # line starts about GRID_BYTES apart, and their addresses
        self._grid_addrs = [self._addr(g) for g in grid]
        self._windows: dict[int, tuple[list[int], list[int], list[bool]]] = {}

    def _start(self, pos: int) -> int:
        return self.text.rfind("\n", 0, pos) + 1

    def _end(self, start: int) -> int:
        end = self.text.find("\n", start)
        return len(self.text) if end < 0 else end

    def _addr(self, start: int) -> int:
        try:
            return int(self.text[start : start + self._width], 16)
        except ValueError as e:
            raise self._bad(e) from None

    def __len__(self) -> int:
        core = self.text.count("\n", 0, self.core_end)
        if core and not self._addr(self._start(self.core_end - 1)):
            core = 0  # every address zero (sorted): kptr_restrict hides them
        return core + len(self._mods)

    def _window(self, j: int) -> tuple[list[int], list[int], list[bool]]:
        """The lines from grid line j to the next: starts, addresses, wanted or not."""
        got = self._windows.get(j)
        if got is None:
            start = self._grid[j]
            end = self._grid[j + 1] if j + 1 < len(self._grid) else self.core_end
            starts, addrs, wanted = [], [], []
            w = self._width
            pos = start
            for line in self.text[start:end].splitlines(keepends=True):
                try:
                    a = int(line[:w], 16)
                except ValueError as e:
                    raise self._bad(e) from None
                starts.append(pos)
                addrs.append(a)
                wanted.append(line[w + 1 : w + 2] in KALLSYMS_TYPES and a != 0)
                pos += len(line)
            got = self._windows[j] = (starts, addrs, wanted)
        return got

    def index(self, ip: int) -> int:
        i = -1
        if self.core_end and self._grid_addrs[0] <= ip:
            # the 4 KB window (bisect in C), read once, then the line in it
            j = bisect.bisect_right(self._grid_addrs, ip) - 1
            starts, addrs, wanted = self._window(j)
            k = bisect.bisect_right(addrs, ip) - 1
            while True:
                while k >= 0 and not wanted[k]:
                    k -= 1
                if k >= 0 or j == 0:
                    break
                j -= 1  # none wanted here: the window before
                starts, addrs, wanted = self._window(j)
                k = len(starts) - 1
            i = starts[k] if k >= 0 else -1
        m = bisect.bisect_right(self._mod_addrs, ip) - 1
        if m >= 0 and (i < 0 or self._mod_addrs[m] >= self._addr(i)):
            return self.core_end + m  # modules come later in the text: theirs wins a tie
        return i

    def at(self, i: int) -> KernelSymbol:
        if i >= self.core_end:
            return self._mods[i - self.core_end]
        s = self._made.get(i)
        if s is None:
            parts = self.text[i : self._end(i)].split(None, 3)
            s = self._made[i] = KernelSymbol(int(parts[0], 16), parts[1], parts[2], "")
        return s

    def _order(self) -> list[int]:
        """Every symbol's index, by address (as KernelSymbols lists them)."""
        by_addr: dict[int, int] = {}
        for j in range(len(self._grid)):
            starts, addrs, wanted = self._window(j)
            for start, a, w in zip(starts, addrs, wanted, strict=True):
                if w:
                    by_addr[a] = start
        for k, a in enumerate(self._mod_addrs):
            by_addr[a] = self.core_end + k
        return [by_addr[a] for a in sorted(by_addr)]

    @property
    def addrs(self) -> list[int]:
        return [self.at(i).addr for i in self._order()]

    @property
    def syms(self) -> list[KernelSymbol]:
        return [self.at(i) for i in self._order()]

    def addr_array(self, np: Any) -> Any:
        return np.array(self.addrs, dtype=np.uint64)


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
        from .btfinfo import BtfIndex
        from .formats.errors import FormatError

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


@dataclass
class ElfFuncs:
    """Function symbols of a symbol table, sorted by value (table order kept within one).

    size < 0: unsized, ends within -size (its section's end). starts are the distinct
    values, firsts[i] the index of the first symbol at starts[i] (plus one past the end).
    """

    values: list[int]
    sizes: list[int]
    binds: list[int]
    names: list[int]  # st_name offsets into strtab
    strtab: bytes
    starts: list[int]
    firsts: list[int]


NO_FUNCS = ElfFuncs([], [], [], [], b"", [], [0])


class ElfSymbols:
    """Function symbols of one ELF file, looked up by file-offset-relative address.

    Names are decoded and the best of several symbols at one address is chosen only
    when a lookup lands there.
    """

    def __init__(
        self,
        funcs: ElfFuncs,
        segs: list[Any],
        stripped: bool | None = None,
        plt: PltTable | None = None,
    ) -> None:
        self.funcs = funcs
        self.plt = plt
        self.strtab = funcs.strtab
        self.segs = segs  # (p_offset, p_filesz, p_vaddr) of PT_LOAD segments
        self.starts = funcs.starts
        self._firsts = funcs.firsts
        self._hits: dict[int, tuple[int, str]] = {}  # index in starts -> (end, name)
        self._starts_np: Any = None
        if stripped is None:
            stripped = not funcs.values
        self.why_missing = "no symbols in the ELF file (stripped)" if stripped else ""

    def _name(self, off: int) -> str:
        strtab = self.strtab
        return strtab[off : strtab.find(b"\0", off)].decode("utf-8", "replace")

    def _hit(self, i: int) -> tuple[int, str]:
        got = self._hits.get(i)
        if got is not None:
            return got
        f = self.funcs
        lo, hi = self._firsts[i], self._firsts[i + 1]
        best = (f.values[lo], f.sizes[lo], f.binds[lo], self._name(f.names[lo]))
        for k in range(lo + 1, hi):
            best = _choose_best_elf(
                best, (f.values[k], f.sizes[k], f.binds[k], self._name(f.names[k]))
            )
        a, size, _, name = best
        starts = self.starts
        nxt = starts[i + 1] if i + 1 < len(starts) else a + max(abs(size), 1)
        if size > 0:
            end = a + size
        elif size < 0:  # unsized: up to the next symbol, within its section
            end = min(nxt, a - size)
        else:
            end = nxt
        got = self._hits[i] = (end, name)
        return got

    def starts_array(self, np: Any) -> Any:
        if self._starts_np is None:
            self._starts_np = np.array(self.starts, dtype=np.uint64)
        return self._starts_np

    def vaddr(self, rel: int) -> int | None:
        for off, size, va in self.segs:
            if off <= rel < off + size:
                return rel - off + va
        return None

    def lookup(self, rel: int) -> tuple[str, int] | None:
        vaddr = self.vaddr(rel)
        if vaddr is None:
            return None
        plt = self.plt
        if plt is not None and plt.lo <= vaddr < plt.hi:
            k = plt.index(vaddr)
            return plt.name(k), plt.lo + k * plt.entry
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0:
            return None
        end, name = self._hit(i)
        if vaddr >= end:
            return None
        return name, self.starts[i]


class ElfCache:
    """ELF symbol tables by path, debug files found by build id like perf does."""

    def __init__(self, root: str = "", np: Any = None) -> None:
        self.root = root
        self.np = np  # numpy, when there, reads the symbol tables
        self.cache: dict[tuple[str, str], ElfSymbols | str] = {}

    def get(self, path: str, build_id: str) -> ElfSymbols | str:
        key = (path, build_id)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self._load(path, build_id)
        return hit

    def _load(self, path: str, build_id: str) -> ElfSymbols | str:
        got = (
            None if path.startswith("[") else load_elf_symbols(self.root + path, build_id, self.np)
        )
        if isinstance(got, ElfSymbols):
            return got
        # gone, replaced or never a file ([vdso]): perf's build-id cache may have a copy
        # (perf record keeps one of every DSO with samples; perf archive carries them)
        cached = build_id_cache_file(build_id)
        if cached is not None:
            alt = load_elf_symbols(cached, build_id, self.np)
            if isinstance(alt, ElfSymbols):
                return alt
        return got if got is not None else f"no symbols for {path}"


DEBUG_ROOT = "/usr/lib/debug/.build-id"


def build_id_cache_file(build_id: str) -> str | None:
    """The copy of the ELF file with build_id in perf's build-id cache ($PERF_BUILDID_DIR,
    else ~/.debug): .build-id/xx/rest links to the directory holding `elf` or `vdso`."""
    if len(build_id) < 3:
        return None
    root = os.environ.get("PERF_BUILDID_DIR") or os.path.join(os.path.expanduser("~"), ".debug")
    d = os.path.join(root, ".build-id", build_id[:2], build_id[2:])
    for name in ("elf", "vdso"):
        f = os.path.join(d, name)
        if os.path.isfile(f):
            return f
    return None


@functools.cache
def _elf_structs(is64: bool, little: bool) -> dict[str, struct.Struct]:
    """struct.Structs of the formats.elf declarations for one ELF class and byte order."""
    L = elf_layouts(is64, little)
    names = ("ehdr", "shdr", "phdr", "sym", "nhdr", "rel", "rela")
    return {n: struct_of(getattr(L, n))[0] for n in names}


class ElfImage:
    """The headers of an ELF file in memory: sections, PT_LOAD segments, GNU build id.

    Reads only what symbolization needs, with structs derived from formats.elf;
    bad input raises FormatError.
    """

    def __init__(self, path: str, data: Any) -> None:
        self.path = path
        self.data = data
        if len(data) < E.IDENT_SIZE or data[:4] != E.MAGIC:
            raise FormatError(path, 0, "not an ELF file (bad magic)")
        cls, enc = data[E.EI_CLASS], data[E.EI_DATA]
        if cls not in (E.ELFCLASS32, E.ELFCLASS64) or enc not in (E.ELFDATA2LSB, E.ELFDATA2MSB):
            raise FormatError(path, E.EI_CLASS, f"unknown ELF class {cls} / data encoding {enc}")
        self.is64 = cls == E.ELFCLASS64
        self.little = enc == E.ELFDATA2LSB
        st = self.structs = _elf_structs(self.is64, self.little)
        eh = st["ehdr"]
        if len(data) < eh.size:
            raise FormatError(path, len(data), "truncated ELF header")
        (_, _, machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, shstrndx) = (
            eh.unpack_from(data, 0)
        )
        self.machine = machine
        sh = st["shdr"]
        self.sections: list[tuple[int, ...]] = []
        if shoff:
            if shentsize != sh.size:
                raise FormatError(path, 0, f"section header size {shentsize}, not {sh.size}")
            first = self._table(sh, shoff, 1, "section header")[0]
            if shnum == 0:
                shnum = first[5]  # sh_size of section 0 (gABI extended numbering)
            self.sections = self._table(sh, shoff, shnum, "section header")
            if shstrndx == E.SHN_XINDEX:
                shstrndx = first[6]
            if phnum == E.PN_XNUM:
                phnum = first[7]
        self.shstrtab = b""
        if 0 < shstrndx < len(self.sections):
            self.shstrtab = self.section_data(shstrndx)
        ph = st["phdr"]
        self.load_segments: list[tuple[int, int, int]] = []
        if phoff and phnum:
            if phentsize != ph.size:
                raise FormatError(path, 0, f"program header size {phentsize}, not {ph.size}")
            for p in self._table(ph, phoff, phnum, "program header"):
                if self.is64:
                    ptype, _, off, vaddr, _, filesz = p[:6]
                else:
                    ptype, off, vaddr, _, filesz = p[:5]
                if ptype == E.PT_LOAD:
                    self.load_segments.append((off, filesz, vaddr))

    def _table(self, s: struct.Struct, off: int, n: int, what: str) -> list[tuple[int, ...]]:
        end = off + n * s.size
        if end > len(self.data):
            raise FormatError(self.path, off, f"{what} table runs past the end of the file")
        return list(s.iter_unpack(self.data[off:end]))

    def section_name(self, i: int) -> str:
        tab = self.shstrtab
        off = self.sections[i][0]
        return tab[off : tab.find(b"\0", off)].decode("utf-8", "replace")

    def section_by_name(self, name: str) -> int | None:
        for i in range(len(self.sections)):
            if self.section_name(i) == name:
                return i
        return None

    def section_data(self, i: int) -> bytes:
        sec = self.sections[i]
        if sec[1] == E.SHT_NOBITS:
            return b""
        off, size = sec[4], sec[5]
        if off + size > len(self.data):
            raise FormatError(self.path, off, f"section {i} runs past the end of the file")
        return bytes(self.data[off : off + size])

    def build_id(self) -> str:
        """The NT_GNU_BUILD_ID note as hex ("" when there is none)."""
        nh = self.structs["nhdr"]
        for i, sec in enumerate(self.sections):
            if sec[1] != E.SHT_NOTE:
                continue
            data = self.section_data(i)
            pos = 0
            while pos + nh.size <= len(data):
                namesz, descsz, ntype = nh.unpack_from(data, pos)
                name_at = pos + nh.size
                desc_at = name_at + (namesz + 3) // 4 * 4
                if desc_at + descsz > len(data):
                    raise FormatError(self.path, sec[4] + pos, "note runs past its section")
                if ntype == E.NT_GNU_BUILD_ID and data[name_at : name_at + namesz] == E.NOTE_GNU:
                    return data[desc_at : desc_at + descsz].hex()
                pos = desc_at + (descsz + 3) // 4 * 4
        return ""

    def functions(self, name: str, np: Any = None) -> ElfFuncs:
        """Function symbols of the symbol table section `name` (numpy reads big ones)."""
        i = self.section_by_name(name)
        if i is None:
            return NO_FUNCS
        sec = self.sections[i]
        if sec[1] == E.SHT_NOBITS or not sec[5]:
            return NO_FUNCS
        rec = self.structs["sym"]
        data = self.section_data(i)
        if len(data) % rec.size:
            raise FormatError(self.path, sec[4], f"symbol table size {len(data)} is not whole")
        link = sec[6]
        if not 0 < link < len(self.sections):
            raise FormatError(self.path, sec[4], f"symbol table names section {link}")
        strtab = self.section_data(link)
        ends = [h[3] + h[5] for h in self.sections]  # sh_addr + sh_size
        if np is not None and len(data) >= 64 * rec.size:
            got = self._functions_np(np, data, ends, strtab)
            if got is not None:
                return got
        nsec = len(ends)
        if self.is64:
            rows: Any = rec.iter_unpack(data)
        else:
            rows = ((n, i_, o, sh, v, sz) for n, v, sz, i_, o, sh in rec.iter_unpack(data))
        out = []
        for name_off, info, _o, shndx, value, size in rows:
            # elf_sym__is_function: STT_FUNC or STT_GNU_IFUNC, defined, named
            t = info & 0xF
            if (t != E.STT_FUNC and t != E.STT_GNU_IFUNC) or shndx == 0 or not name_off:
                continue
            if not size and shndx < nsec:
                # an unsized symbol ends with its section at the latest (_init must not
                # swallow the .plt stubs after it, which perf names name@plt)
                size = -(ends[shndx] - value)
            out.append((value, size, info >> 4, name_off))
        out.sort(key=_first)
        starts: list[int] = []
        firsts: list[int] = []
        prev = None
        for k, f in enumerate(out):
            if f[0] != prev:
                prev = f[0]
                starts.append(prev)
                firsts.append(k)
        firsts.append(len(out))
        cols = [list(c) for c in zip(*out, strict=True)] if out else [[], [], [], []]
        return ElfFuncs(cols[0], cols[1], cols[2], cols[3], strtab, starts, firsts)

    def defines_objects(self) -> bool:
        """Whether .symtab (else .dynsym) has a defined, named data object (STT_OBJECT),
        which perf's symbol loading counts as well as functions."""
        for name in (".symtab", ".dynsym"):
            i = self.section_by_name(name)
            if i is None or self.sections[i][1] == E.SHT_NOBITS:
                continue
            rec = self.structs["sym"]
            data = self.section_data(i)
            for f in rec.iter_unpack(data[: len(data) // rec.size * rec.size]):
                if self.is64:
                    name_off, info, _o, shndx = f[:4]
                else:
                    name_off, info, shndx = f[0], f[3], f[5]
                if info & 0xF == E.STT_OBJECT and shndx != 0 and name_off:
                    return True
            return False
        return False

    def plt_table(self) -> PltTable | None:
        """perf's synthesized PLT symbols (see PltTable); None when the file has no PLT
        perf would name: as perf 6.1's dso__synthesize_plt_symbols (util/symbol-elf.c),
        it needs .plt, and .rela.plt (or .rel.plt) linked to .dynsym."""
        dyn = self.section_by_name(".dynsym")
        rel_i = self.section_by_name(".rela.plt")
        if rel_i is None:
            rel_i = self.section_by_name(".rel.plt")
        plt_i = self.section_by_name(".plt")
        if dyn is None or rel_i is None or plt_i is None:
            return None
        dsec, rsec, psec = self.sections[dyn], self.sections[rel_i], self.sections[plt_i]
        if dsec[1] != E.SHT_DYNSYM or rsec[1] not in (E.SHT_RELA, E.SHT_REL) or rsec[6] != dyn:
            return None
        if not 0 < dsec[6] < len(self.sections):
            return None
        strtab = self.section_data(dsec[6])
        header, entry = PLT_LAYOUTS.get(self.machine, (psec[9], psec[9]))
        if not strtab or not entry:
            return None
        rec = self.structs["rela" if rsec[1] == E.SHT_RELA else "rel"]
        rels = self.section_data(rel_i)
        # sh_addr, not perf's sh_offset: report looks symbols up by address
        return PltTable(
            psec[3] + header, entry, len(rels) // rec.size, rels, rec,
            32 if self.is64 else 8, self.section_data(dyn), self.structs["sym"], strtab,
            self.path,
        )  # fmt: skip

    def _functions_np(self, np: Any, data: bytes, ends: list[int], strtab: bytes) -> Any:
        """functions() with numpy; None when values are too big for int64 arithmetic."""
        a = np.frombuffer(data, dtype=_np_dtype(np, self.is64, self.little))
        t = a["st_info"] & 0xF
        shndx = a["st_shndx"]
        keep = np.flatnonzero(
            ((t == E.STT_FUNC) | (t == E.STT_GNU_IFUNC)) & (shndx != 0) & (a["st_name"] != 0)
        )
        value = a["st_value"][keep]
        if len(keep) and int(value.max()) >= 1 << 62:
            return None
        value = value.astype(np.int64)
        if len(keep) and int(a["st_size"][keep].max()) >= 1 << 62:
            return None
        size = a["st_size"][keep].astype(np.int64)
        if len(ends) and max(ends) >= 1 << 62:
            return None
        sh = shndx[keep].astype(np.int64)
        unsized = np.flatnonzero((size == 0) & (sh < len(ends)))
        if len(unsized):
            size[unsized] = value[unsized] - np.array(ends, dtype=np.int64)[sh[unsized]]
        order = np.argsort(value, kind="stable")
        value, size = value[order], size[order]
        bind = (a["st_info"][keep][order] >> 4).astype(np.int64)
        names = a["st_name"][keep][order].astype(np.int64)
        new = np.ones(len(value), dtype=bool)
        new[1:] = value[1:] != value[:-1]
        firsts = np.flatnonzero(new)
        return ElfFuncs(
            value.tolist(),
            size.tolist(),
            bind.tolist(),
            names.tolist(),
            strtab,
            value[firsts].tolist(),
            [*firsts.tolist(), len(value)],
        )


@functools.cache
def _np_dtype(np: Any, is64: bool, little: bool) -> Any:
    """The numpy record of formats.elf's sym (same fields as its struct_of)."""
    s, names = struct_of(elf_layouts(is64, little).sym)
    order = s.format[0]
    codes = {"B": "u1", "H": "u2", "I": "u4", "L": "u4", "Q": "u8"}
    return np.dtype([(n, order + codes[c]) for n, c in zip(names, s.format[1:], strict=True)])


def _first(x: tuple[int, ...]) -> int:
    return x[0]


# e_machine -> (PLT header size, PLT entry size) where .plt's sh_entsize is not both
PLT_LAYOUTS = {
    E.EM_ARM: (20, 12),
    E.EM_AARCH64: (32, 16),
    E.EM_SPARC: (48, 12),
    E.EM_SPARCV9: (128, 32),
}


class PltTable:
    """The PLT stubs perf names name@plt: entry i (relocation i of .rela.plt) starts at
    lo + i * entry and is named after the .dynsym symbol the relocation refers to.
    Names are read when a lookup lands in a stub."""

    def __init__(
        self, lo: int, entry: int, n: int, rels: bytes, rec: struct.Struct, shift: int,
        syms: bytes, sym: struct.Struct, strtab: bytes, path: str,
    ) -> None:  # fmt: skip
        self.lo, self.entry, self.n = lo, entry, n
        self.hi = lo + n * entry
        self._rels, self._rec, self._shift = rels, rec, shift
        self._syms, self._sym, self._strtab = syms, sym, strtab
        self._path = path

    def index(self, vaddr: int) -> int:
        """The entry covering vaddr, -1 outside the stubs."""
        return (vaddr - self.lo) // self.entry if self.lo <= vaddr < self.hi else -1

    def name(self, i: int) -> str:
        idx = self._rec.unpack_from(self._rels, i * self._rec.size)[1] >> self._shift
        if (idx + 1) * self._sym.size > len(self._syms):
            return "@plt"  # a relocation naming no symbol: perf prints the bare suffix
        off = self._sym.unpack_from(self._syms, idx * self._sym.size)[0]
        tab = self._strtab
        name = tab[off : tab.find(b"\0", off)] if off < len(tab) else b""
        return name.decode("utf-8", "replace") + "@plt"

    def entries(self) -> list[tuple[int, int, str]]:
        """Every stub: (address, size, name)."""
        return [(self.lo + i * self.entry, self.entry, self.name(i)) for i in range(self.n)]


def load_elf_symbols(path: str, build_id: str = "", np: Any = None) -> ElfSymbols | str:
    """Function symbols of an ELF file (or of its build-id debug file), or why there are none."""
    try:
        f = open(path, "rb")  # noqa: SIM115
    except OSError as e:
        return f"{path}: {e.strerror}"
    with f:
        try:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                elf = ElfImage(path, m)
                own = elf.build_id()
                if build_id and own and own != build_id:
                    return f"{path}: build id {own} differs from the recorded {build_id}"
                segs = elf.load_segments
                bid = build_id or own
                funcs = NO_FUNCS
                if bid:
                    dbg = f"{DEBUG_ROOT}/{bid[:2]}/{bid[2:]}.debug"
                    if os.path.exists(dbg):
                        funcs = _debug_functions(dbg, np)
                if not funcs.values:
                    funcs = elf.functions(".symtab", np)
                if not funcs.values:
                    funcs = elf.functions(".dynsym", np)
                stripped = not funcs.values
                # perf synthesizes name@plt symbols when the file's symbol table gave it
                # anything: functions, or data objects (stripped programs' .dynsym)
                plt = elf.plt_table() if funcs.values or elf.defines_objects() else None
        except FormatError as e:
            return f"{path}: unreadable ELF (offset {e.offset}: {e.what})"
        except (OSError, ValueError) as e:
            return f"{path}: unreadable ELF ({e})"
    return ElfSymbols(funcs, segs, stripped, plt)


def _debug_functions(path: str, np: Any) -> ElfFuncs:
    with open(path, "rb") as d, mmap.mmap(d.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return ElfImage(path, m).functions(".symtab", np)


def _choose_best_elf(a: tuple[int, int, int, str], b: tuple[int, int, int, str]) -> Any:
    """perf's choose_best_symbol: sized, non-weak, global, fewer leading _, longer name."""
    if (a[1] <= 0) != (b[1] <= 0):
        return a if a[1] > 0 else b
    if (a[2] == 2) != (b[2] == 2):
        return b if a[2] == 2 else a
    if (a[2] == 1) != (b[2] == 1):
        return a if a[2] == 1 else b
    ua = len(a[3]) - len(a[3].lstrip("_"))
    ub = len(b[3]) - len(b[3].lstrip("_"))
    if ua != ub:
        return a if ua < ub else b
    if len(a[3]) != len(b[3]):
        return a if len(a[3]) > len(b[3]) else b
    return a
