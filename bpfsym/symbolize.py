"""Turn (cpumode, pid, address, time) into names: BPF, kernel and user-space symbols.

BPF functions come with lifetimes (JIT addresses are recycled), so they are
looked up by address *and* time: from the side file's timeline, or, without
one, from perf.data's own KSYMBOL/BPF_EVENT records and HEADER_BPF_PROG_INFO.
Kernel symbols come from a kallsyms snapshot; user-space ones from MMAP/MMAP2
records and ELF symbol tables. Lookups are cached by address.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass, field
from typing import Any

from .formats import perf as K
from .formats import perfdata as F
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
        if self.bpf is None or self.bpf.prog is None:
            return "??:0"
        return self.bpf.prog.srcline(ip)


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
        return f"{os.path.basename(e.file) or '??'}:{e.line}"


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

    def add(self, fn: BpfFunc) -> None:
        fn.sym = Sym(fn.name, "[bpf]", "k", fn.origin, bpf=fn, start=fn.addr)
        self.funcs.append(fn)
        self.by_addr.setdefault(fn.addr, []).append(fn)
        self._max_size = max(self._max_size, fn.size)
        self._dirty = True

    def rename(self, fn: BpfFunc, name: str) -> None:
        fn.name = name
        fn.sym = Sym(name, "[bpf]", "k", fn.origin, bpf=fn, start=fn.addr)

    def unregister(self, addr: int, t: int | None) -> None:
        for fn in reversed(self.by_addr.get(addr, [])):
            if fn.unload is None:
                fn.unload = t if t is not None else 0
                return

    def candidates(self, ip: int) -> list[BpfFunc]:
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
        buf = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
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
        if "\t[bpf]" in text:
            return False  # read_host_kallsyms cut those: this is other text
        keep = np.flatnonzero(wanted[buf[starts + width + 1]] & (addr != 0))
        order = keep[np.argsort(addr[keep], kind="stable")]
        a = addr[order]
        last = np.ones(len(a), dtype=bool)  # of one address, the last line (see _build)
        last[:-1] = a[1:] != a[:-1]
        order = order[last]
        self.addrs = addr[order].tolist()
        self._line = (text, starts[order].tolist(), ends[order].tolist())
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
        self.addrs = sorted(by_addr)
        self._syms = [KernelSymbol(*by_addr[a]) for a in self.addrs]

    @property
    def syms(self) -> list[KernelSymbol]:
        if self._line is not None:
            return [self._sym(i) for i in range(len(self.addrs))]
        return self._syms

    def _sym(self, i: int) -> KernelSymbol:
        s = self._made.get(i)
        if s is None:
            text, starts, ends = self._line
            parts = text[starts[i] : ends[i]].split(None, 3)
            mod = parts[3].strip()[1:-1] if len(parts) > 3 else ""
            s = self._made[i] = KernelSymbol(self.addrs[i], parts[1], parts[2], mod)
        return s

    def __len__(self) -> int:
        return len(self.addrs)

    def lookup(self, ip: int) -> KernelSymbol | None:
        i = bisect.bisect_right(self.addrs, ip) - 1
        if i < 0:
            return None
        return self._sym(i) if self._line is not None else self._syms[i]


def read_host_kallsyms(path: str = "/proc/kallsyms") -> str:
    """The kernel part of a kallsyms file (up to the first [bpf] line: those come last)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    cut = text.find("\t[bpf]")
    if cut >= 0:
        text = text[: text.rfind("\n", 0, cut) + 1]
    return text


def host_boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


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
        self._unres: dict[str, Sym] = {}
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
        mode = cpumode
        timeless = True
        first = True
        for e in chain:
            if e >= F.CONTEXT_MAX:
                mode = CONTEXT_MODES.get(e, 0)
                continue
            if first:
                first = False
                if e != ip:
                    out.append(self.resolve(cpumode, pid, ip, t))
            out.append(self.resolve(mode, pid, e, t))
            if mode == F.MISC_KERNEL and type(self.kcache.get(e)) is tuple:
                timeless = False
        if first:
            out.append(self.resolve(cpumode, pid, ip, t))
        if cpumode == F.MISC_KERNEL and type(self.kcache.get(ip)) is tuple:
            timeless = False
        return tuple(out), timeless

    def thread_comm(self, tid: int) -> str:
        c = self.comms.get(tid)
        return c if c is not None else f":{tid}"

    def unresolved(self, dso: str, kind: str, ip: int, reason: str) -> Sym:
        key = f"{dso}\0{kind}\0{ip}\0{reason}"
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
                return Sym(name, "[kernel.kallsyms]", "k", FROM_PERF, start=addr)
        if self.kernel is None:
            return self.unresolved("[kernel.kallsyms]", "k", ip, self.kernel_note)
        ks = self.kernel.lookup(ip)
        if ks is None:
            return self.unresolved("[kernel.kallsyms]", "k", ip, "below the first kernel symbol")
        dso = f"[{ks.module}]" if ks.module else "[kernel.kallsyms]"
        return Sym(ks.name, dso, "k", self.kernel.origin, start=ks.addr)

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
        if m.filename.startswith("["):
            return self.unresolved(m.filename, ".", rel, f"no symbols for {m.filename}")
        elf = self.elf.get(m.filename, m.build_id)
        if isinstance(elf, str):
            return self.unresolved(dso, ".", rel, elf)
        hit = elf.lookup(rel)
        if hit is None:
            return self.unresolved(dso, ".", rel, elf.why_missing or "no symbol covers the address")
        name, start = hit
        key = f"{m.filename}\0{start}"
        s = self._unres.get(key)
        if s is None:
            s = self._unres[key] = Sym(name, dso, ".", FROM_ELF, start=start)
        return s


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


class ElfSymbols:
    """Function symbols of one ELF file, looked up by file-offset-relative address."""

    def __init__(self, starts: list[int], ends: list[int], names: list[str], segs: list[Any]):
        self.starts = starts
        self.ends = ends
        self.names = names
        self.segs = segs  # (p_offset, p_filesz, p_vaddr) of PT_LOAD segments
        self.why_missing = "" if names else "no symbols in the ELF file (stripped)"

    def lookup(self, rel: int) -> tuple[str, int] | None:
        vaddr = None
        for off, size, va in self.segs:
            if off <= rel < off + size:
                vaddr = rel - off + va
                break
        if vaddr is None:
            return None
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0 or vaddr >= self.ends[i]:
            return None
        return self.names[i], self.starts[i]


class ElfCache:
    """ELF symbol tables by path, debug files found by build id like perf does."""

    def __init__(self, root: str = "") -> None:
        self.root = root
        self.cache: dict[tuple[str, str], ElfSymbols | str] = {}

    def get(self, path: str, build_id: str) -> ElfSymbols | str:
        key = (path, build_id)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self._load(path, build_id)
        return hit

    def _load(self, path: str, build_id: str) -> ElfSymbols | str:
        return load_elf_symbols(self.root + path, build_id)


DEBUG_ROOT = "/usr/lib/debug/.build-id"
_SYM64 = struct.Struct("<IBBHQQ")  # Elf64_Sym, little-endian
_SYM64B = struct.Struct(">IBBHQQ")
_SYM32 = struct.Struct("<IIIBBH")  # Elf32_Sym
_SYM32B = struct.Struct(">IIIBBH")


def load_elf_symbols(path: str, build_id: str = "") -> ElfSymbols | str:
    """Function symbols of an ELF file (or of its build-id debug file), or why there are none."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        f = open(path, "rb")  # noqa: SIM115
    except OSError as e:
        return f"{path}: {e.strerror}"
    with f:
        try:
            elf = ELFFile(f)
            own = _elf_build_id(elf)
            if build_id and own and own != build_id:
                return f"{path}: build id {own} differs from the recorded {build_id}"
            segs = [
                (seg["p_offset"], seg["p_filesz"], seg["p_vaddr"])
                for seg in elf.iter_segments()
                if seg["p_type"] == "PT_LOAD"
            ]
            bid = build_id or own
            syms = None
            if bid:
                dbg = f"{DEBUG_ROOT}/{bid[:2]}/{bid[2:]}.debug"
                if os.path.exists(dbg):
                    with open(dbg, "rb") as d:
                        syms = _elf_funcs(ELFFile(d), ".symtab")
            if not syms:
                syms = _elf_funcs(elf, ".symtab") or _elf_funcs(elf, ".dynsym")
        except (ELFError, OSError, ValueError, struct.error) as e:
            return f"{path}: unreadable ELF ({e})"
    return _symbols_table(syms or [], segs)


def _elf_build_id(elf: Any) -> str:
    for sec in elf.iter_sections():
        if sec["sh_type"] == "SHT_NOTE":
            for note in sec.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return str(note["n_desc"])
    return ""


def _elf_funcs(elf: Any, name: str) -> list[tuple[int, int, int, str]]:
    sec = elf.get_section_by_name(name)
    if sec is None or sec["sh_type"] == "SHT_NOBITS" or not sec["sh_size"]:
        return []
    strtab = elf.get_section(sec["sh_link"]).data()
    data = sec.data()
    little = elf.little_endian
    if elf.elfclass == 64:
        rec = _SYM64 if little else _SYM64B
        rows = ((n, i, sh, v, sz) for n, i, _o, sh, v, sz in rec.iter_unpack(data))
    else:
        rec = _SYM32 if little else _SYM32B
        rows = ((n, i, sh, v, sz) for n, v, sz, i, _o, sh in rec.iter_unpack(data))
    ends = [h["sh_addr"] + h["sh_size"] for h in (elf.get_section(i).header
            for i in range(elf.num_sections()))]  # fmt: skip
    out = []
    for name_off, info, shndx, value, size in rows:
        # elf_sym__is_function: STT_FUNC or STT_GNU_IFUNC, defined, named
        if (info & 0xF) not in (2, 10) or shndx == 0 or not name_off:
            continue
        end = strtab.find(b"\0", name_off)
        if not size and shndx < len(ends):
            # an unsized symbol ends with its section at the latest (_init must not swallow
            # the .plt stubs after it, which perf names name@plt)
            size = -(ends[shndx] - value)
        out.append((value, size, info >> 4, strtab[name_off:end].decode("utf-8", "replace")))
    return out


def _symbols_table(syms: list[tuple[int, int, int, str]], segs: list[Any]) -> ElfSymbols:
    best: dict[int, tuple[int, int, int, str]] = {}
    for s in syms:
        old = best.get(s[0])
        best[s[0]] = s if old is None else _choose_best_elf(old, s)
    starts = sorted(best)
    ends = []
    names = []
    for k, a in enumerate(starts):
        _, size, _, name = best[a]
        nxt = starts[k + 1] if k + 1 < len(starts) else a + max(abs(size), 1)
        if size > 0:
            ends.append(a + size)
        elif size < 0:  # unsized: up to the next symbol, within its section
            ends.append(min(nxt, a - size))
        else:
            ends.append(nxt)
        names.append(name)
    return ElfSymbols(starts, ends, names, segs)


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
