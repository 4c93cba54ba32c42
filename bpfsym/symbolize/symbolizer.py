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
from typing import Any

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.model import ORIGIN_PERF, Capture, Function, Program
from bpfsym.read.bpf_events import LoadPairing
from bpfsym.read.kallsyms import KernelSymbols
from bpfsym.read.proginfo import program_from_perf
from bpfsym.symbolize.symbols import (
    CONTEXT_MODES,
    FROM_PERF,
    FROM_SIDE,
    UNRESOLVED,
    Sym,
)
from bpfsym.symbolize.timeline import BpfFunc, BpfTimeline, _retag, capture_timeline
from bpfsym.symbolize.user import ElfCache, MapEntry, UserResolver, demangle

# perf.data's KSYMBOL/BPF_EVENT records are paired in delivery order (their CPU is not
# always recorded: sample_type without PERF_SAMPLE_CPU)
PERF_CPU = 0


def _addr(fn: BpfFunc) -> int:
    return fn.addr


KERNEL_MAP = "[kernel.kallsyms"  # perf's kernel map: [kernel.kallsyms]_text or _stext
KERNEL_MAP_DSO = "[kernel.kallsyms]"
COMPRESSED = (".gz", ".xz", ".zst", ".bz2", ".lzma", ".lz4")


def module_dso(filename: str) -> str:
    """A kernel module map's DSO name as perf gives it (dso.c __kmod_path__parse): the
    file's basename without a compression suffix; a .ko is [name] with - made _."""
    if filename.startswith("["):
        return filename
    base = os.path.basename(filename)
    for ext in COMPRESSED:
        if base.endswith(ext):
            base = base[: -len(ext)]
            break
    if base.endswith(".ko"):
        return "[" + base[:-3].replace("-", "_") + "]"
    return base


class Symbolizer(UserResolver):
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
        self.knode: dict[int, Sym] = {}  # call-chain nodes (raw when unresolved), by address
        self.unode: dict[int, dict[int, Sym]] = {}  # the same per pid, for user addresses
        self.ugen: dict[int, int] = {}  # per pid, bumped whenever its maps change
        self.maps: dict[int, list[MapEntry]] = {}
        self.map_starts: dict[int, list[int]] = {}
        self.comms: dict[int, str] = {0: "swapper"}
        self.progs_perf: dict[int, Program] = {}
        self.prog_infos: dict[int, dict[str, bytes]] = {}
        self.btfs: dict[int, bytes] = {}
        self.build_ids: dict[str, str] = {}
        self.elf = ElfCache(elf_root)
        self.ool: dict[int, tuple[int, str]] = {}
        self.kmaps: list[tuple[int, int, str]] = []  # (start, end, DSO), sorted
        self._kmap_starts: list[int] = []
        self._ksyms: dict[int, Sym] = {}  # kallsyms index -> its Sym
        self._unres: dict[Any, Sym] = {}
        self._by_file: dict[tuple[str, str, int], Sym] = {}
        self.pairing: LoadPairing[BpfFunc] = LoadPairing()
        self.little = True  # perf.data's byte order (its BPF_PROG_INFO blobs)
        self.side_used = False
        if capture is not None:
            self._load_capture(capture)

    # ---- sources -------------------------------------------------------

    def _load_capture(self, cap: Capture) -> None:
        self.bpf_side = capture_timeline(cap, FROM_SIDE)

    def set_header(
        self,
        progs: dict[int, dict[str, bytes]],
        btfs: dict[int, bytes],
        build_ids: list,
        little: bool = True,
    ) -> None:
        self.prog_infos = progs
        self.little = little
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
                if name.startswith("bpf_prog_"):  # not a trampoline's or dispatcher's
                    self.pairing.ksymbol(PERF_CPU, fn)
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
        blobs = self.prog_infos.get(prog_id)
        if blobs is not None and blobs.get("ksyms"):
            prog = program_from_perf(prog_id, blobs, self.btfs, load_time=t, little=self.little)
            addrs = [f.addr for f in prog.functions]
            mine = self.pairing.take(PERF_CPU, addrs, _addr)
            by_addr = {fn.addr: fn for fn in mine}
            for i, f in enumerate(prog.functions):
                fn = by_addr.get(f.addr)
                if fn is None:
                    continue
                fn.prog = prog
                if i == 0 and len(addrs) > 1:
                    # perf names a synthesized main function after prog_tags[0]; kallsyms
                    # uses the program's tag (kernel bpf_prog_ksym_set_name)
                    self.bpf_perf.rename(fn, _retag(fn.name, prog.tag))
                f.name = fn.name  # the kernel's own names (KSYMBOL), exact by construction
        else:
            # no prog info (pipe mode): the functions registered just before are this
            # program's; perf synthesizes them main function first, named after prog_tags[0]
            prog = Program(prog_id, "", tag.hex(), -1, load_time=t, origin=ORIGIN_PERF)
            pend = self.pairing.take(PERF_CPU)
            mine_tag = f"bpf_prog_{prog.tag}"
            if (
                len(pend) > 1
                and all(f.load is None for f in pend)
                and not any(f.name.startswith(mine_tag) for f in pend)
            ):
                self.bpf_perf.rename(pend[0], _retag(pend[0].name, prog.tag))
            main = [fn for fn in pend if fn.name.startswith(mine_tag)][-1:]
            for fn in main + [fn for fn in pend if fn not in main]:
                fn.prog = prog
                if main:  # no main function, no program name (as the kernel would have it)
                    prog.functions.append(Function(fn.name, fn.addr, fn.size))
        self.progs_perf[prog_id] = prog

    def kernel_mmap(self, start: int, length: int, filename: str) -> None:
        """A kernel-cpumode MMAP: the kernel itself ([kernel.kallsyms]_text) or a module.
        Kernel samples are looked up in these maps only, as perf does (machine.c
        machine__process_kernel_mmap_event; event.c thread__find_map)."""
        end = (start + length) & (2**64 - 1)
        if filename.startswith(KERNEL_MAP):
            if start == 0 and length == 0:
                end = 2**64  # a synthesized map of no size covers everything
            self.kmaps = [m for m in self.kmaps if m[2] != KERNEL_MAP_DSO]
            self.kmaps.append((start, end, KERNEL_MAP_DSO))
        elif filename.startswith(("/", "[")):
            self.kmaps.append((start, end, module_dso(filename)))
        else:
            return
        self.kmaps.sort()
        self._kmap_starts = [m[0] for m in self.kmaps]
        self._drop_kcache()

    def kernel_map(self, ip: int) -> tuple[int, int, str] | None:
        """The kernel map holding ip (start, end, DSO), None outside all of them."""
        i = bisect.bisect_right(self._kmap_starts, ip) - 1
        while i >= 0:
            m = self.kmaps[i]
            if ip < m[1]:
                return m
            if m[2] != KERNEL_MAP_DSO and i > 0 and self.kmaps[i - 1][1] > ip:
                i -= 1  # module maps may sit inside the kernel's range
                continue
            return None
        return None

    def vmlinux_range(self) -> tuple[int, int] | None:
        """[start, end) of the kernel's own map, when the data has one."""
        for m in self.kmaps:
            if m[2] == KERNEL_MAP_DSO:
                return m[0], m[1]
        return None

    def _drop_kcache(self) -> None:
        self.kcache.clear()
        self.knode.clear()
        self.kgen += 1

    # ---- lookups -------------------------------------------------------

    def resolve_chain(
        self, cpumode: int, pid: int, ip: int, chain: tuple[int, ...], t: int | None
    ) -> tuple[tuple[Sym, ...], bool]:
        """Symbols of a callchain, leaf first; the flag says the result holds at any time.

        The sample's own entry comes first; a call-chain node without a symbol is named by
        its raw address, as perf's children entries are (machine.c add_callchain_ip keeps
        the ip, callchain.c fill_callchain_info), so the sample's map-relative entry and
        the node can be two entries. Nodes are cached by address (knode, unode: dropped
        with kcache and ucache), raw ones too."""
        out: list[Sym] = []
        add = out.append
        mode = cpumode
        timeless = True
        first = True
        own: Sym | None = None  # the sample's own entry, when the chain starts elsewhere
        knode = self.knode
        unode = self.unode.get(pid)
        context_max, kernel, user = F.CONTEXT_MAX, F.MISC_KERNEL, F.MISC_USER  # locals: hot
        for e in chain:
            if e >= context_max:
                mode = CONTEXT_MODES.get(e, 0)
                continue
            if first:
                first = False
                if e != ip:
                    own = self.resolve(cpumode, pid, ip, t)
            if mode == kernel:
                s = knode.get(e)
                if s is None:
                    s = self.kernel_node(e, t)
                    if type(self.kcache.get(e)) is tuple:
                        timeless = False  # BPF code: which function depends on the time
                add(s)
            elif mode == user:
                s = unode.get(e) if unode is not None else None
                if s is None:
                    s = self.user_node(pid, e)
                    unode = self.unode[pid]
                add(s)
            else:
                add(self.node(self.resolve(mode, pid, e, t), e))
        if first:
            out.append(self.resolve(cpumode, pid, ip, t))
        elif any(x.origin is UNRESOLVED for x in out) or (
            own is not None and own.origin is UNRESOLVED
        ):
            # the sample's own entry kept before the nodes when it has no symbol and is not
            # the first node already (a resolved one that differs from the chain's start
            # is left out, as perf's children entries)
            if own is None:
                own = self.resolve(cpumode, pid, ip, t)
            if own.origin is UNRESOLVED and (not out or out[0] is not own):
                out.insert(0, own)
        elif own is not None:
            out.insert(0, own)
        if cpumode == F.MISC_KERNEL and type(self.kcache.get(ip)) is tuple:
            timeless = False
        return tuple(out), timeless

    def node(self, s: Sym, e: int) -> Sym:
        """The call-chain node at address e whose symbol is s: s, or when s has none the
        entry named by the raw address (in s's DSO), as perf's children entries."""
        if s.origin is UNRESOLVED:
            return self.unresolved(s.dso, s.kind, e, s.reason)
        return s

    def kernel_node(self, e: int, t: int | None) -> Sym:
        """A kernel call-chain node at address e (at time t): its symbol, or its raw
        address when it has none; cached in knode unless BPF code (the time decides)."""
        s = self.node(self.resolve_kernel(e, t), e)
        if type(self.kcache.get(e)) is not tuple:
            self.knode[e] = s
        return s

    def user_node(self, pid: int, e: int) -> Sym:
        """A user call-chain node of pid at address e, as kernel_node (cached in unode)."""
        s = self.node(self.resolve_user(pid, e), e)
        unode = self.unode.get(pid)
        if unode is None:
            unode = self.unode[pid] = {}
        unode[e] = s
        return s

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
        # one entry per (DSO, address), whatever its level: perf's sort__sym_cmp compares
        # the address alone where there is no symbol (the first entry made gives the level)
        key = (dso, ip)
        s = self._unres.get(key)
        if s is None:
            # perf's %-#.*llx: C's # flag puts no 0x before a zero
            name = f"0x{ip:016x}" if ip else f"{0:016x}"
            s = Sym(name, dso, kind, UNRESOLVED, reason=reason, start=ip)
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
        m = self.kernel_map(ip)
        vmlinux = self.vmlinux_range()
        if m is None and self.kernel is not None and vmlinux is not None and ip >= vmlinux[0]:
            # past the recorded map's end (init text, say): perf's kernel map grows to the
            # kallsyms symbols it loads (symbol.c maps__split_kallsyms, maps__fixup_end)
            i = self.kernel.index(ip)
            if i >= 0 and not self.kernel.at(i).module:
                return self.kernel_sym(i)
        if m is None:
            why = "outside every kernel map" if self.kmaps else "no kernel map in the data"
            return self.unresolved("[unknown]", "k", ip, why)
        start, _end, dso = m
        if self.kernel is None:
            if dso != KERNEL_MAP_DSO:  # module addresses are shown module-relative
                return self.unresolved(dso, "k", ip - start, self.kernel_note)
            return self.unresolved(dso, "k", ip, self.kernel_note)
        i = self.kernel.index(ip)
        if dso != KERNEL_MAP_DSO:
            if i >= 0 and f"[{self.kernel.at(i).module}]" == dso:
                return self.kernel_sym(i)
            return self.unresolved(dso, "k", ip - start, f"no kallsyms symbol of {dso}")
        if i < 0:
            return self.unresolved(dso, "k", ip, "below the first kernel symbol")
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
