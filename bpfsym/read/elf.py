"""ELF files for user-space symbols: headers, PT_LOAD segments, build id, function
symbols (also from a build-id debug file) and the PLT stubs perf names name@plt.

pyelftools reads the structure: the file header (its declarations, built once per kind of
file; _ElfFile stands in for its ELFFile), the section names, the notes and the build id, the PLT
relocations. Arrays of fixed-size records are decoded in bulk with a struct.Struct derived
from pyelftools' own declaration: symbol tables (Elf_Sym; numpy for big ones), because
iterating them through pyelftools is 15 to 175 times slower (bench/elf_speed.py), and the
section and program header tables (Elf_Shdr, Elf_Phdr), whose construct parse was most of a
small library's load (docs/elf.md). Headers are read as tables rather than through
ELFFile.iter_sections()/iter_segments(), which build every section's object (a hash
section parses its whole table, a dynamic segment walks every section). Whatever
pyelftools or its construct raises on bad input becomes FormatError in one place
(ElfImage._reading).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import io
import mmap
import operator
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.common.utils import struct_parse
from elftools.construct import ConstructError
from elftools.construct.adapters import MappingAdapter, MappingError
from elftools.construct.core import FormatField, Pass
from elftools.elf.constants import SHN_INDICES
from elftools.elf.enums import ENUM_ST_INFO_BIND, ENUM_ST_INFO_TYPE, ENUM_ST_SHNDX
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import NoteSection, StringTableSection
from elftools.elf.structs import ELFStructs

from bpfsym.errors import FormatError
from bpfsym.read.arrays import stable_argsort

# What pyelftools raises on bad input: its own errors (construct's wrapped as ELFParseError
# by struct_parse, not always), struct's, a bad UTF-8 name (a ValueError), a seek or read
# outside an mmap (ValueError, OverflowError)
_BAD_INPUT = (ELFError, ConstructError, struct.error, ValueError, OverflowError)

STT_OBJECT = ENUM_ST_INFO_TYPE["STT_OBJECT"]
STT_FUNC = ENUM_ST_INFO_TYPE["STT_FUNC"]
STT_GNU_IFUNC = ENUM_ST_INFO_TYPE["STT_LOOS"]  # pyelftools has no name of its own for 10
STB_GLOBAL = ENUM_ST_INFO_BIND["STB_GLOBAL"]
STB_WEAK = ENUM_ST_INFO_BIND["STB_WEAK"]
SHN_UNDEF = ENUM_ST_SHNDX["SHN_UNDEF"]
PN_XNUM = 0xFFFF  # e_phnum saying the count is elsewhere (pyelftools has no name for it)
SHN_XINDEX = SHN_INDICES.SHN_XINDEX  # e_shstrndx saying the index is elsewhere


@dataclass(repr=False, eq=False)
class ElfFuncs:
    """Function symbols of a symbol table, sorted by value (table order kept within one).

    size < 0: unsized, ends within -size (its section's end). starts are the distinct
    values, firsts[i] the index of the first symbol at starts[i] (plus one past the end).
    The numpy decode leaves values, sizes, binds, names and firsts int64 arrays (read an
    element at a time, on a lookup's hit: making Python lists of every symbol of a big
    table costs more than the rest of its decode); starts is a list (bisect) either way.
    """

    values: Any  # list[int] or an int64 array, as sizes, binds, names, firsts
    sizes: Any
    binds: Any
    names: Any  # st_name offsets into strtab
    strtab: bytes
    starts: list[int]
    firsts: Any

    def __len__(self) -> int:
        return len(self.values)


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
            stripped = not len(funcs)
        self.why_missing = "no symbols in the ELF file (stripped)" if stripped else ""

    def _name(self, off: int) -> str:
        strtab = self.strtab
        return strtab[off : strtab.find(b"\0", off)].decode("utf-8", "replace")

    def _hit(self, i: int) -> tuple[int, str]:
        got = self._hits.get(i)
        if got is not None:
            return got
        f = self.funcs
        lo, hi = int(self._firsts[i]), int(self._firsts[i + 1])
        best = _symbol(f, lo, self._name)
        for k in range(lo + 1, hi):
            best = _choose_best_elf(best, _symbol(f, k, self._name))
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


def _symbol(f: ElfFuncs, k: int, name: Any) -> tuple[int, int, int, str]:
    """(value, size, binding, name) of function k, as Python ints (arrays give numpy's)."""
    return int(f.values[k]), int(f.sizes[k]), int(f.binds[k]), name(int(f.names[k]))


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


# Elf_Sym's fields are all unsigned words of these sizes (gABI)
_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
# the field order the bulk decode works in (Elf64_Sym's; Elf32_Sym puts value and size first)
_SYM_FIELDS = ("st_name", "st_info", "st_other", "st_shndx", "st_value", "st_size")


@functools.cache
def sym_record(elfclass: int, little: bool) -> tuple[struct.Struct, tuple[str, ...]]:
    """The struct.Struct of pyelftools' Elf_Sym for one ELF class and byte order, and its
    field names: the bulk decode of symbol tables reads the layout pyelftools declares."""
    s = ELFStructs(little_endian=little, elfclass=elfclass)
    s.create_basic_structs()
    s.create_advanced_structs()
    fields = [(c.name, c.sizeof()) for c in s.Elf_Sym.subcons]
    rec = struct.Struct(("<" if little else ">") + "".join(_CODES[n] for _, n in fields))
    return rec, tuple(str(name) for name, _ in fields)


@functools.cache
def _np_dtype(np: Any, elfclass: int, little: bool) -> Any:
    """The numpy record of sym_record (pyelftools' Elf_Sym)."""
    rec, names = sym_record(elfclass, little)
    order = rec.format[0]
    codes = {"B": "u1", "H": "u2", "I": "u4", "Q": "u8"}
    return np.dtype([(n, order + codes[c]) for n, c in zip(names, rec.format[1:], strict=True)])


@functools.cache
def _structs(elfclass: int, little: bool, kind: tuple[Any, Any, Any] | None = None) -> ELFStructs:
    """pyelftools' declarations for one kind of ELF file: class and byte order, and for
    all but the file header its (e_type, e_machine, EI_OSABI), as ELFFile builds them."""
    s = ELFStructs(little_endian=little, elfclass=elfclass)
    s.create_basic_structs()
    if kind is not None:
        s.create_advanced_structs(*kind)
    return s


class _ElfFile:
    """What ElfImage and pyelftools' section classes (NoteSection, StringTableSection,
    RelocationSection) use of an ELFFile: the stream, class, byte order, file header and
    declarations. Not pyelftools' ELFFile itself: importing elftools.elf.elffile pulls in
    its DWARF modules (~10 ms of every report's start-up), and its constructor builds ~20
    declarations for every file opened, half of a small library's load; here they are
    built once per kind of file (_structs). The file is identified as ELFFile does (its
    errors, its messages); tests/offline/read/test_elf.py compares the two."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        stream.seek(0)
        ident = stream.read(6)  # EI_MAG0..3, EI_CLASS, EI_DATA
        if ident[:4] != b"\x7fELF":
            raise ELFError("Magic number does not match")
        elfclass = {b"\x01": 32, b"\x02": 64}.get(ident[4:5])
        if elfclass is None:
            raise ELFError(f"Invalid EI_CLASS {ident[4:5]!r}")
        little = {b"\x01": True, b"\x02": False}.get(ident[5:6])
        if little is None:
            raise ELFError(f"Invalid EI_DATA {ident[5:6]!r}")
        self.elfclass, self.little_endian = elfclass, little
        self.header = struct_parse(_structs(elfclass, little).Elf_Ehdr, stream, stream_pos=0)
        kind = (self.header["e_type"], self.header["e_machine"], self.header["e_ident"]["EI_OSABI"])
        self.structs = _structs(elfclass, little, kind)

    def __getitem__(self, name: str) -> Any:
        return self.header[name]


def header_record(decl: Any) -> tuple[struct.Struct, tuple[str, ...], list[tuple[str, Any]]] | None:
    """A struct.Struct of a pyelftools declaration made of fixed-size numbers (construct
    FormatFields, an enum's behind its MappingAdapter), its field names, and the enum
    fields with their adapters; None for a declaration of other parts.

    Headers are decoded a table at a time with it: construct parses one field at a time
    through the stream, 20-30 us a section header, more than the rest of a file's load
    for most libraries (docs/elf.md)."""
    order, codes, names, enums = "", [], [], []
    for c in decl.subcons:
        field = c.subcon if isinstance(c, MappingAdapter) else c
        if not isinstance(field, FormatField):
            return None
        fmt = field.packer.format
        if order and fmt[0] != order:
            return None
        order = fmt[0]
        codes.append(fmt[1:])
        names.append(c.name)
        if field is not c:
            enums.append((c.name, c))
    return struct.Struct(order + "".join(codes)), tuple(names), enums


def _decoded(adapter: Any, v: int) -> Any:
    """v through an enum's MappingAdapter, as its parse decodes it (its name, else by
    the adapter's default: the number itself, a fixed value, or a MappingError)."""
    got = adapter.decoding.get(v, _MISSING)
    if got is not _MISSING:
        return got
    default = adapter.decdefault
    if default is Pass:
        return v
    if default is NotImplemented:
        raise MappingError(f"no decoding mapping for {v!r} [{adapter.subcon.name}]")
    return default


_MISSING = object()


class ElfImage:
    """The structure of an ELF file in memory (bytes or an mmap), read by pyelftools:
    section headers and names, PT_LOAD segments, the GNU build id; symbol tables in bulk.

    Bad input raises FormatError.
    """

    def __init__(self, path: str, data: Any) -> None:
        self.path = path
        self.data = data
        # where reading is, for the offset of a FormatError (see _reading)
        self._at, self._what = 0, "ELF header"
        with self._reading():
            self._read_headers()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """The one boundary between pyelftools and the project: its errors on bad input
        become FormatError at the offset being read."""
        try:
            yield
        except _BAD_INPUT as e:
            raise FormatError(self.path, self._at, f"{self._what}: {e}") from None

    def _read_headers(self) -> None:
        # an mmap is a file object of its own (seek, read) for pyelftools
        stream: Any = self.data if isinstance(self.data, mmap.mmap) else io.BytesIO(self.data)
        # typed Any: pyelftools types its section classes for ELFFile; they use only what
        # the stand-in has (stream, structs, header)
        elf: Any = _ElfFile(stream)
        self.elf = elf
        self.is64 = elf.elfclass == 64
        self.little = elf.little_endian
        self.machine = elf["e_machine"]  # EM_* name (int when pyelftools knows none)
        self.sym, self.sym_fields = sym_record(elf.elfclass, elf.little_endian)
        st = elf.structs
        self.sections: list[Any] = []
        if elf["e_shoff"]:
            self._what = "section header"
            self._at = elf["e_shoff"]
            size = st.Elf_Shdr.sizeof()
            self._check_entsize(elf["e_shentsize"], size, "section header")
            self._fits(elf["e_shoff"], 1, size, "section header")  # section 0, read next
            n = elf["e_shnum"]  # else section 0's sh_size (gABI extended numbering)
            if not n:
                n = self._table(st.Elf_Shdr, elf["e_shoff"], 1, "section header")[0]["sh_size"]
            self.sections = self._table(st.Elf_Shdr, elf["e_shoff"], n, "section header")
        self.names = [""] * len(self.sections)
        self._at, self._what = elf["e_shoff"], "section names"
        shstrndx = elf["e_shstrndx"] if self.sections else 0
        if shstrndx == SHN_XINDEX:  # the index is section 0's sh_link (gABI)
            shstrndx = self.sections[0]["sh_link"]
        if 0 < shstrndx < len(self.sections) and self.sections[shstrndx]["sh_type"] != "SHT_NOBITS":
            self._in_file(shstrndx)
            tab = StringTableSection(self.sections[shstrndx], "", elf)
            self.names = [tab.get_string(h["sh_name"]) for h in self.sections]
        self._index: dict[str, int] = {}
        for i, name in enumerate(self.names):
            self._index.setdefault(name, i)  # the first of a name, as a search from 0
        self.load_segments: list[tuple[int, int, int]] = []
        self._at, self._what = elf["e_phoff"], "program header"
        phnum = elf["e_phnum"] if elf["e_phoff"] else 0
        if phnum == PN_XNUM and self.sections:
            phnum = self.sections[0]["sh_info"]  # gABI extended numbering
        if phnum:
            self._check_entsize(elf["e_phentsize"], st.Elf_Phdr.sizeof(), "program header")
            for p in self._table(st.Elf_Phdr, elf["e_phoff"], phnum, "program header"):
                if p["p_type"] == "PT_LOAD":
                    self.load_segments.append((p["p_offset"], p["p_filesz"], p["p_vaddr"]))

    def _check_entsize(self, got: int, want: int, what: str) -> None:
        if got != want:
            raise FormatError(self.path, 0, f"{what} size {got}, not {want}")

    def _table(self, decl: Any, off: int, n: int, what: str) -> list[Any]:
        """n headers of pyelftools' declaration decl from off on (the table checked to be
        in the file first: a corrupt count must not make a long loop), as mappings of its
        field names to what pyelftools' parse gives (enum fields by name)."""
        size = decl.sizeof()
        self._fits(off, n, size, what)
        got = header_record(decl)
        if got is None:  # a declaration of other parts: pyelftools parses each header
            stream = self.elf.stream
            return [struct_parse(decl, stream, off + k * size) for k in range(n)]
        rec, names, enums = got
        table = self.data[off : off + n * size]
        rows = [dict(zip(names, v, strict=True)) for v in rec.iter_unpack(table)]
        for name, adapter in enums:
            for row in rows:
                row[name] = _decoded(adapter, row[name])
        return rows

    def _fits(self, off: int, n: int, size: int, what: str) -> None:
        if off + n * size > len(self.data):
            raise FormatError(self.path, off, f"{what} table runs past the end of the file")

    def _in_file(self, i: int) -> tuple[int, int]:
        h = self.sections[i]
        off, size = h["sh_offset"], h["sh_size"]
        if off + size > len(self.data):
            raise FormatError(self.path, off, f"section {i} runs past the end of the file")
        return off, size

    def section_name(self, i: int) -> str:
        return self.names[i]

    def section_by_name(self, name: str) -> int | None:
        return self._index.get(name)

    def section_data(self, i: int) -> bytes:
        """The bytes of section i as stored (b"" for SHT_NOBITS)."""
        if self.sections[i]["sh_type"] == "SHT_NOBITS":
            return b""
        off, size = self._in_file(i)
        return bytes(self.data[off : off + size])

    def build_id(self) -> str:
        """The NT_GNU_BUILD_ID note as hex ("" when there is none)."""
        with self._reading():
            for i, h in enumerate(self.sections):
                if h["sh_type"] != "SHT_NOTE":
                    continue
                self._what = f"notes of section {i}"
                self._at = off = self._in_file(i)[0]
                end = off + h["sh_size"]
                for note in NoteSection(h, self.names[i], self.elf).iter_notes():
                    self._at = note["n_offset"]
                    # n_size pads the descriptor to 4 bytes; the section need not
                    if note["n_offset"] + note["n_size"] - (-note["n_descsz"] % 4) > end:
                        raise FormatError(self.path, self._at, "note runs past its section")
                    if note["n_type"] == "NT_GNU_BUILD_ID" and note["n_name"] == "GNU":
                        return str(note["n_desc"])
        return ""

    def _symbols(self, i: int) -> tuple[bytes, bytes] | None:
        """(symbol records, their string table) of symbol table section i; None when it
        has none."""
        h = self.sections[i]
        if h["sh_type"] == "SHT_NOBITS" or not h["sh_size"]:
            return None
        data = self.section_data(i)
        if len(data) % self.sym.size:
            raise FormatError(
                self.path, h["sh_offset"], f"symbol table size {len(data)} is not whole"
            )
        link = h["sh_link"]
        if not 0 < link < len(self.sections):
            raise FormatError(self.path, h["sh_offset"], f"symbol table names section {link}")
        return data, self.section_data(link)

    def _rows(self, data: bytes) -> Iterator[tuple[int, ...]]:
        """Every record of a symbol table, fields in _SYM_FIELDS' order."""
        rows = self.sym.iter_unpack(data)
        if self.sym_fields == _SYM_FIELDS:
            return rows
        return map(operator.itemgetter(*map(self.sym_fields.index, _SYM_FIELDS)), rows)

    def functions(self, name: str, np: Any = None) -> ElfFuncs:
        """Function symbols of the symbol table section `name` (numpy reads big ones)."""
        i = self.section_by_name(name)
        got = None if i is None else self._symbols(i)
        if got is None:
            return NO_FUNCS
        data, strtab = got
        ends = [h["sh_addr"] + h["sh_size"] for h in self.sections]
        if np is not None and len(data) >= 64 * self.sym.size:
            fast = self._functions_np(np, data, ends, strtab)
            if fast is not None:
                return fast
        nsec = len(ends)
        out = []
        for name_off, info, _o, shndx, value, size in self._rows(data):
            # elf_sym__is_function: STT_FUNC or STT_GNU_IFUNC, defined, named
            t = info & 0xF  # ELF_ST_TYPE
            if (t != STT_FUNC and t != STT_GNU_IFUNC) or shndx == SHN_UNDEF or not name_off:
                continue
            if not size and shndx < nsec:
                # an unsized symbol ends with its section at the latest (_init must not
                # swallow the .plt stubs after it, which perf names name@plt)
                size = -(ends[shndx] - value)
            out.append((value, size, info >> 4, name_off))  # info >> 4: ELF_ST_BIND
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
            if i is None or self.sections[i]["sh_type"] == "SHT_NOBITS":
                continue
            data = self.section_data(i)
            for name_off, info, _o, shndx, *_ in self._rows(
                data[: len(data) // self.sym.size * self.sym.size]
            ):
                if info & 0xF == STT_OBJECT and shndx != SHN_UNDEF and name_off:
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
        if (
            dsec["sh_type"] != "SHT_DYNSYM"
            or rsec["sh_type"] not in ("SHT_RELA", "SHT_REL")
            or rsec["sh_link"] != dyn
        ):
            return None
        if not 0 < dsec["sh_link"] < len(self.sections):
            return None
        strtab = self.section_data(dsec["sh_link"])
        entsize = psec["sh_entsize"]
        header, entry = PLT_LAYOUTS.get(self.machine, (entsize, entsize))
        if not strtab or not entry:
            return None
        with self._reading():
            self._at, self._what = rsec["sh_offset"], f"relocations of section {rel_i}"
            # pyelftools checks sh_entsize against its Elf_Rel or Elf_Rela
            rec = RelocationSection(rsec, self.names[rel_i], self.elf).entry_struct
        data = self.section_data(rel_i)
        # sh_addr, not perf's sh_offset: report looks symbols up by address
        return PltTable(
            psec["sh_addr"] + header, entry, len(data) // rec.sizeof(), data, rec,
            self.section_data(dyn), self.elf.structs.Elf_Sym, strtab,
        )  # fmt: skip

    def _functions_np(self, np: Any, data: bytes, ends: list[int], strtab: bytes) -> Any:
        """functions() with numpy; None when values are too big for int64 arithmetic."""
        a = np.frombuffer(data, dtype=_np_dtype(np, 64 if self.is64 else 32, self.little))
        t = a["st_info"] & 0xF
        shndx = a["st_shndx"]
        keep = np.flatnonzero(
            ((t == STT_FUNC) | (t == STT_GNU_IFUNC)) & (shndx != SHN_UNDEF) & (a["st_name"] != 0)
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
        order = stable_argsort(np, value)
        value, size = value[order], size[order]
        bind = (a["st_info"][keep][order] >> 4).astype(np.int64)
        names = a["st_name"][keep][order].astype(np.int64)
        new = np.ones(len(value), dtype=bool)
        new[1:] = value[1:] != value[:-1]
        firsts = np.flatnonzero(new)
        return ElfFuncs(
            value, size, bind, names, strtab, value[firsts].tolist(), np.append(firsts, len(value))
        )


def _first(x: tuple[int, ...]) -> int:
    return x[0]


# e_machine -> (PLT header size, PLT entry size) where .plt's sh_entsize is not both
# (perf 6.1 util/symbol-elf.c, dso__synthesize_plt_symbols)
PLT_LAYOUTS = {
    "EM_ARM": (20, 12),
    "EM_AARCH64": (32, 16),
    "EM_SPARC": (48, 12),
    "EM_SPARCV9": (128, 32),
}


class PltTable:
    """The PLT stubs perf names name@plt: entry i (relocation i of .rela.plt) starts at
    lo + i * entry and is named after the .dynsym symbol the relocation refers to.
    Names are read (with pyelftools' Elf_Rel(a) and Elf_Sym, from copies of the sections)
    when a lookup lands in a stub."""

    def __init__(
        self, lo: int, entry: int, n: int, rels: bytes, rel: Any, syms: bytes, sym: Any,
        strtab: bytes,
    ) -> None:  # fmt: skip
        self.lo, self.entry, self.n = lo, entry, n
        self.hi = lo + n * entry
        self._rels, self._rel, self._rel_size = rels, rel, rel.sizeof()
        self._syms, self._sym, self._sym_size = syms, sym, sym.sizeof()
        self._strtab = strtab
        self._names: dict[int, str] = {}  # each stub's name parsed once (construct: ~30 us)

    def index(self, vaddr: int) -> int:
        """The entry covering vaddr, -1 outside the stubs."""
        return (vaddr - self.lo) // self.entry if self.lo <= vaddr < self.hi else -1

    def name(self, i: int) -> str:
        got = self._names.get(i)
        if got is None:
            got = self._names[i] = self._name(i)
        return got

    def _name(self, i: int) -> str:
        at = i * self._rel_size
        idx = self._rel.parse(self._rels[at : at + self._rel_size])["r_info_sym"]
        at = idx * self._sym_size
        if at + self._sym_size > len(self._syms):
            return "@plt"  # a relocation naming no symbol: perf prints the bare suffix
        off = self._sym.parse(self._syms[at : at + self._sym_size])["st_name"]
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
                if not len(funcs):
                    funcs = elf.functions(".symtab", np)
                if not len(funcs):
                    funcs = elf.functions(".dynsym", np)
                stripped = not len(funcs)
                # perf synthesizes name@plt symbols when the file's symbol table gave it
                # anything: functions, or data objects (stripped programs' .dynsym)
                plt = elf.plt_table() if len(funcs) or elf.defines_objects() else None
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
    if (a[2] == STB_WEAK) != (b[2] == STB_WEAK):
        return b if a[2] == STB_WEAK else a
    if (a[2] == STB_GLOBAL) != (b[2] == STB_GLOBAL):
        return a if a[2] == STB_GLOBAL else b
    ua = len(a[3]) - len(a[3].lstrip("_"))
    ub = len(b[3]) - len(b[3].lstrip("_"))
    if ua != ub:
        return a if ua < ub else b
    if len(a[3]) != len(b[3]):
        return a if len(a[3]) > len(b[3]) else b
    return a
