"""ELF files for user-space symbols: headers, PT_LOAD segments, build id, function
symbols (also from a build-id debug file) and the PLT stubs perf names name@plt.

Reads only what symbolization needs, with structs derived from formats.elf; bad input
raises FormatError.
"""

from __future__ import annotations

import bisect
import functools
import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any

from bpfsym.errors import FormatError
from bpfsym.formats import elf as E
from bpfsym.formats import struct_of
from bpfsym.formats.elf import elf_layouts


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


DEBUG_ROOT = "/usr/lib/debug/.build-id"


def build_id_cache_file(
    build_id: str, root: str | None = None, names: tuple[str, ...] = ("elf", "vdso")
) -> str | None:
    """The copy of the ELF file with build_id in perf's build-id cache (root, else
    $PERF_BUILDID_DIR, else ~/.debug): .build-id/xx/rest links to the directory holding
    `elf` or `vdso` (and `debug`, perf's copy of a debug file)."""
    if len(build_id) < 3:
        return None
    if root is None:
        root = os.environ.get("PERF_BUILDID_DIR") or os.path.join(os.path.expanduser("~"), ".debug")
    d = os.path.join(root, ".build-id", build_id[:2], build_id[2:])
    for name in names:
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
