"""User-space symbols: a process's memory maps, ELF symbol tables by path and build id
(perf's build-id cache too), C++ names demangled as perf prints them."""

from __future__ import annotations

import bisect
import operator
import os
from dataclasses import dataclass
from typing import Any

from bpfsym.read.arrays import unique
from bpfsym.read.elf import ElfSymbols, build_id_cache_file, load_elf_symbols
from bpfsym.symbolize.symbols import FROM_ELF, Sym


def demangle(names: set[str]) -> dict[str, str]:
    """mangled -> demangled C++ names, in one `c++filt -p` run (binutils; perf prints
    the same text through libiberty). {} where c++filt cannot run: names stay mangled."""
    order = sorted(names)
    if not order:
        return {}
    import subprocess  # here: most reports have no C++ names to demangle

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


_START = operator.attrgetter("start")


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
        # (not with a symfs: nothing of the host counts then)
        cached = None if self.root else build_id_cache_file(build_id)
        if cached is not None:
            alt = load_elf_symbols(cached, build_id, self.np)
            if isinstance(alt, ElfSymbols):
                return alt
        return got if got is not None else f"no symbols for {path}"


class UserResolver:
    """User-space symbols of a Symbolizer: the processes' comms and memory maps (fed by
    COMM, FORK and MMAP records in delivery order) and their addresses' ELF symbols, one
    at a time or in bulk (numpy). The state is the Symbolizer's own (made in its
    __init__); what is unresolved is named by its `unresolved`."""

    maps: dict[int, list[MapEntry]]
    map_starts: dict[int, list[int]]
    ucache: dict[int, dict[int, Sym]]
    unode: dict[int, dict[int, Sym]]
    ugen: dict[int, int]  # per pid, bumped whenever its maps change
    comms: dict[int, str]
    build_ids: dict[str, str]
    elf: ElfCache
    _unres: dict[Any, Sym]
    _by_file: dict[tuple[str, str, int], Sym]

    def unresolved(self, dso: str, kind: str, ip: int, reason: str) -> Sym:
        raise NotImplementedError

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
            self._drop_ucache(pid)  # a new generation of its maps (report.dwarf keys by it)

    def mmap(self, pid: int, start: int, length: int, pgoff: int, filename: str, bid: str) -> None:
        if pid == 0xFFFFFFFF or pid == -1:
            return  # kernel maps: kallsyms covers them
        lst = self.maps.setdefault(pid, [])
        starts = self.map_starts.setdefault(pid, [])
        end = start + length
        # what the new map overlaps loses the overlapped part only (maps.c
        # maps__fixup_overlappings): the loader maps a library's whole range first and
        # later mappings land inside it
        i, j = self._overlapped(lst, starts, start, end)
        mid = []
        for m in lst[i:j]:
            if m.end <= start or m.start >= end:
                mid.append(m)
                continue
            if m.start < start:
                mid.append(MapEntry(m.start, start, m.pgoff, m.filename, m.build_id))
            if m.end > end:
                after = m.pgoff + (end - m.start)
                mid.append(MapEntry(end, m.end, after, m.filename, m.build_id))
        mid.append(MapEntry(start, end, pgoff, filename, bid or self.build_ids.get(filename, "")))
        mid.sort(key=_START)
        lst[i:j] = mid
        starts[i:j] = [m.start for m in mid]
        self._drop_ucache(pid)

    @staticmethod
    def _overlapped(
        lst: list[MapEntry], starts: list[int], start: int, end: int
    ) -> tuple[int, int]:
        """The run lst[i:j] that holds every map [start, end) overlaps; the maps around
        it stay as they are.

        The maps are sorted by start and do not overlap (each new one cut out of those
        before it), empty ones aside: those a new map overlaps are the run just before
        the first that starts at or after its end, empty maps stepped over (one may share
        its start with a map that overlaps). 5000 mmaps of one process took 1.24 s when
        each made the whole list again, 0.012 s so. An empty new map takes the whole list,
        as every map did before."""
        if end <= start:
            return 0, len(lst)
        j = bisect.bisect_left(starts, end)
        i = j
        while i > 0 and (lst[i - 1].end > start or lst[i - 1].end <= lst[i - 1].start):
            i -= 1
        return i, j

    def _drop_ucache(self, pid: int) -> None:
        self.ucache.pop(pid, None)
        self.unode.pop(pid, None)
        self.ugen[pid] = self.ugen.get(pid, 0) + 1

    def thread_comm(self, tid: int) -> str:
        c = self.comms.get(tid)
        return c if c is not None else f":{tid}"

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
