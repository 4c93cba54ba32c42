"""The ELF reader (bpfsym/read/elf.py: structure through pyelftools, symbol tables in bulk)
against readelf, objdump and pyelftools' own symbol iteration on real binaries (PLT symbols
too), and on files clang and ld build here in the other ELF classes and byte orders; perf's
build-id cache; bad input gives FormatError (or a why-string) and nothing else; the bulk
symbol record is pyelftools' Elf_Sym."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess

import numpy
import pytest
from elftools.common.exceptions import ELFError
from elftools.construct.lib.container import Container
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_ST_SHNDX
from elftools.elf.structs import ELFStructs
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.formats.errors import FormatError
from bpfsym.read.elf import (
    ElfImage,
    ElfSymbols,
    _decoded,
    _ElfFile,
    header_record,
    load_elf_symbols,
    sym_record,
)
from bpfsym.symbolize.user import ElfCache

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
PERF = "/usr/bin/perf"
BINARIES = [LIBC, PERF, "/usr/bin/bash", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"]
FUNC_TYPES = ("STT_FUNC", "STT_LOOS")  # pyelftools calls STT_GNU_IFUNC (10) STT_LOOS
BINDS = {"STB_LOCAL": 0, "STB_GLOBAL": 1, "STB_WEAK": 2, "STB_GNU_UNIQUE": 10}

# C with enough functions for the numpy decode (>= 64 symbols), calling two external ones
# (PLT slots in a shared object), one of them unsized (an assembler label)
SOURCE = (
    "extern int ext_fn(int); extern int other(int);\n"
    + "".join(f"int f{i}(int x) {{ return ext_fn(x + {i}) + other(x); }}\n" for i in range(80))
    + 'asm(".text\\n.globl bare\\n.type bare,@function\\nbare: nop\\n");\n'
)
# (clang target, ELF class, byte order): relocatable objects of the other layouts
FOREIGN = [
    ("i386-linux-gnu", 32, "LSB"),
    ("powerpc-linux-gnu", 32, "MSB"),
    ("s390x-linux-gnu", 64, "MSB"),
    ("aarch64_be-linux-gnu", 64, "MSB"),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Files clang and binutils' ld make: {target: relocatable object} and "i386.so", an
    Elf32 shared object with a .rel.plt and a build id."""
    d = tmp_path_factory.mktemp("elf")
    src = d / "t.c"
    src.write_text(SOURCE)
    out = {}
    for target, _cls, _order in FOREIGN:
        obj = d / f"{target}.o"
        subprocess.run(
            ["clang", f"--target={target}", "-fPIC", "-O1", "-c", str(src), "-o", str(obj)],
            check=True,
        )
        out[target] = str(obj)
    so = d / "i386.so"
    subprocess.run(
        ["ld", "-m", "elf_i386", "-shared", "--build-id", "-o", str(so), out["i386-linux-gnu"]],
        check=True,
    )
    out["i386.so"] = str(so)
    return out


def _image(path: str) -> ElfImage:
    with open(path, "rb") as f:
        return ElfImage(path, f.read())


def _readelf_sections(path: str) -> list[tuple[str, int, int, int, int]]:
    """(name, addr, offset, size, link) of every section, as readelf -SW prints them:
    [Nr] Name Type Address Off Size ES Flg Lk Inf Al (Name empty for section 0, Flg
    often)."""
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True)
    rows = []
    for line in out.stdout.splitlines():
        if not re.match(r"^\s*\[\s*\d+\]", line):
            continue
        tok = line.split("]", 1)[1].split()
        k = next(i for i, t in enumerate(tok) if re.fullmatch(r"[0-9a-f]{8,16}", t))
        name = tok[0] if k == 2 else ""
        addr, off, size = (int(t, 16) for t in tok[k : k + 3])
        rows.append((name, addr, off, size, int(tok[-3])))
    return rows


def _readelf_loads(path: str) -> list[tuple[int, int, int]]:
    """(offset, filesz, vaddr) of every PT_LOAD, as readelf -lW prints them."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True, check=True)
    return [
        (int(off, 16), int(filesz, 16), int(va, 16))
        for off, va, filesz in re.findall(
            r"^\s*LOAD\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x([0-9a-f]+)",
            out.stdout,
            re.M,
        )
    ]


def _check_sections_and_segments(path: str) -> None:
    img = _image(path)
    want = _readelf_sections(path)
    got = [
        (img.section_name(i), h["sh_addr"], h["sh_offset"], h["sh_size"], h["sh_link"])
        for i, h in enumerate(img.sections)
    ]
    assert got == want
    assert img.load_segments == _readelf_loads(path)


@pytest.mark.parametrize("path", BINARIES)
def test_sections_and_segments_match_readelf(path):
    _check_sections_and_segments(path)
    assert len(_image(path).load_segments) >= 2


def test_elf32_sections_and_segments_match_readelf(built):
    _check_sections_and_segments(built["i386.so"])
    for target, _cls, _order in FOREIGN:
        _check_sections_and_segments(built[target])


def _readelf_build_id(path: str) -> str:
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True, check=True)
    m = re.search(r"Build ID: ([0-9a-f]+)", out.stdout)
    assert m is not None
    return m.group(1)


@pytest.mark.parametrize("path", BINARIES)
def test_build_id_matches_readelf(path):
    assert _image(path).build_id() == _readelf_build_id(path)


def test_elf32_build_id_matches_readelf(built):
    path = built["i386.so"]
    assert _image(path).build_id() == _readelf_build_id(path)
    assert _image(built["s390x-linux-gnu"]).build_id() == ""  # an object has none


def _pyelftools_functions(path: str, name: str) -> list[tuple[int, int, int, str]]:
    """(value, size or -(section end - value), binding, name) by perf's function rule."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sec = elf.get_section_by_name(name)
        if sec is None:
            return []
        ends = [s["sh_addr"] + s["sh_size"] for s in elf.iter_sections()]
        out = []
        for sym in sec.iter_symbols():
            shndx = sym["st_shndx"]
            if sym["st_info"]["type"] not in FUNC_TYPES or shndx == "SHN_UNDEF" or not sym.name:
                continue
            size = sym["st_size"]
            if not size and isinstance(shndx, int):
                size = -(ends[shndx] - sym["st_value"])
            out.append((sym["st_value"], size, BINDS[sym["st_info"]["bind"]], sym.name))
    out.sort(key=lambda x: x[0])
    return out


def _ours(path: str, name: str, np: object) -> list[tuple[int, int, int, str]]:
    fs = _image(path).functions(name, np)
    tab = fs.strtab
    names = [tab[o : tab.find(b"\0", o)].decode() for o in fs.names]
    return list(zip(fs.values, fs.sizes, fs.binds, names, strict=True))


@pytest.mark.parametrize("path", BINARIES)
@pytest.mark.parametrize("section", [".dynsym", ".symtab"])
def test_function_symbols_match_pyelftools(path, section):
    want = _pyelftools_functions(path, section)
    assert _ours(path, section, None) == want
    assert _ours(path, section, numpy) == want


@pytest.mark.parametrize("target", [t for t, _c, _o in FOREIGN] + ["i386.so"])
def test_other_classes_and_byte_orders_match_pyelftools(built, target):
    path = built[target]
    for section in (".symtab", ".dynsym"):
        want = _pyelftools_functions(path, section)
        assert _ours(path, section, None) == want
        assert _ours(path, section, numpy) == want
    want = _pyelftools_functions(path, ".symtab")
    assert len(want) >= 81  # numpy's path (>= 64 symbols) was taken
    assert [w for w in want if w[3] == "bare"][0][1] < 0  # unsized: ends with .text


def test_libc_has_many_functions():
    assert len(_pyelftools_functions(LIBC, ".dynsym")) > 1000


@pytest.mark.parametrize("path", [LIBC, PERF])
def test_lookup_names_the_symbol_at_its_address(path):
    """Every sized function's first byte resolves to a symbol starting there (perf's
    choice among aliases), found through the file offset like a sample address."""
    syms = load_elf_symbols(path, "", numpy)
    assert not isinstance(syms, str)
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sec = elf.get_section_by_name(".dynsym")
        funcs = [
            s
            for s in sec.iter_symbols()
            if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] > 0 and s["st_shndx"] != 0
        ]
    assert funcs
    at: dict[int, set[str]] = {}
    for s in funcs:
        at.setdefault(s["st_value"], set()).add(s.name)
    checked = 0
    for vaddr, names in at.items():
        for off, size, va in syms.segs:
            if va <= vaddr < va + size:
                rel = vaddr - va + off
                break
        else:
            continue
        hit = syms.lookup(rel)
        assert hit is not None and hit[1] == vaddr, (hex(vaddr), names, hit)
        checked += 1
    assert checked > len(at) // 2


def test_missing_and_stripped():
    assert "No such file" in str(load_elf_symbols("/nonexistent/lib.so"))
    assert "unreadable ELF" in str(load_elf_symbols("/proc/self/status"))


# ---- bad input ---------------------------------------------------------------


def _small() -> bytes:
    with open("/usr/bin/true", "rb") as f:
        return f.read()


def _shdr_at(data: bytes, i: int) -> tuple[int, object]:
    """Offset of section header i in data and pyelftools' Elf_Shdr (to build a new one)."""
    with open("/usr/bin/true", "rb") as f:
        elf = ELFFile(f)
        return elf["e_shoff"] + i * elf["e_shentsize"], elf.structs.Elf_Shdr


def test_bad_magic():
    with pytest.raises(FormatError, match="ELF header: Magic number does not match"):
        ElfImage("x", b"\x7fELG" + bytes(100))


def test_bad_class():
    data = bytearray(_small())
    data[4] = 7  # e_ident[EI_CLASS]
    with pytest.raises(FormatError, match="EI_CLASS"):
        ElfImage("x", bytes(data))


@pytest.mark.parametrize("cut", [0, 10, 20, 63])
def test_truncated_header(cut):
    with pytest.raises(FormatError):
        ElfImage("x", _small()[:cut])


def test_section_table_past_the_end():
    data = _small()
    img = ElfImage("x", data)
    assert img.sections
    shoff = _shdr_at(data, 0)[0]
    with pytest.raises(FormatError, match="section header table runs past"):
        ElfImage("x", data[: shoff + 10])


def test_symbol_table_not_whole():
    data = bytearray(_small())
    img = ElfImage("x", bytes(data))
    i = img.section_by_name(".dynsym")
    assert i is not None
    at, shdr = _shdr_at(data, i)
    h = Container(**img.sections[i])  # the header's fields, for Elf_Shdr to build
    h["sh_size"] -= 1
    raw = shdr.build(h)
    data[at : at + len(raw)] = raw
    with pytest.raises(FormatError, match="not whole"):
        ElfImage("x", bytes(data)).functions(".dynsym")
    p = f"/tmp/bpfsym-test-elf-{os.getpid()}"
    try:
        with open(p, "wb") as f:
            f.write(data)
        why = load_elf_symbols(p)
        assert isinstance(why, str) and "unreadable ELF" in why
    finally:
        os.unlink(p)


def _corrupt(data, raw: bytes) -> bytearray:
    raw = bytearray(raw)
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    for _ in range(data.draw(st.integers(0, 8))):
        if raw:
            pos = data.draw(st.integers(0, min(len(raw) - 1, 4096)))
            raw[pos] = data.draw(st.integers(0, 255))
    # and sometimes a byte of the section headers, which sit at the end
    if raw and data.draw(st.booleans()):
        pos = data.draw(st.integers(max(0, len(raw) - 2048), len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    return raw


@settings(max_examples=300)
@given(st.data())
def test_corrupt_elf_raises_format_error_only(data):
    """Any truncation or byte flip of a real binary reads or raises FormatError."""
    raw = _corrupt(data, _small())
    try:
        img = ElfImage("x", bytes(raw))
        img.build_id()
        for name in (".dynsym", ".symtab"):
            img.functions(name)
            img.functions(name, numpy)
        img.defines_objects()
        plt = img.plt_table()
        if plt is not None:
            plt.entries()
    except FormatError:
        pass


@settings(max_examples=150)
@given(data=st.data())
def test_corrupt_elf_file_gives_symbols_or_why(data, tmp_path_factory):
    """The same through load_elf_symbols, over an mmap (which raises on seeks past its
    end where bytes do not): symbols, or a string saying why there are none."""
    raw = _corrupt(data, _small())
    p = tmp_path_factory.mktemp("corrupt") / "elf"
    p.write_bytes(raw)
    got = load_elf_symbols(str(p), "", numpy)
    if isinstance(got, ElfSymbols):
        for rel in (0, 0x1000, 0x2000, 0x3000):
            got.lookup(rel)
        if got.plt is not None:
            got.plt.entries()
    else:
        assert isinstance(got, str) and got.startswith(str(p))


# ---- the bulk symbol record -------------------------------------------------------


@settings(max_examples=200)
@given(st.sampled_from([32, 64]), st.booleans(), st.binary(min_size=24, max_size=24))
def test_sym_record_is_pyelftools_elf_sym(elfclass, little, raw):
    """The struct the bulk decode reads symbols with gives the fields pyelftools' Elf_Sym
    parses from the same bytes (st_info's and st_other's bit fields as their byte)."""
    s = ELFStructs(little_endian=little, elfclass=elfclass)
    s.create_basic_structs()
    s.create_advanced_structs()
    rec, names = sym_record(elfclass, little)
    raw = raw[: rec.size]
    assert rec.size == s.Elf_Sym.sizeof() == (24 if elfclass == 64 else 16)
    got = dict(zip(names, rec.unpack(raw), strict=True))
    want = s.Elf_Sym.parse(raw)
    for k in ("st_name", "st_value", "st_size"):
        assert got[k] == want[k]
    for k in ("st_info", "st_other"):  # bit fields, parsed from their byte
        assert s.Elf_Sym.subcons[names.index(k)].parse(bytes([got[k]])) == want[k]
    w = want["st_shndx"]  # SHN_* names for the reserved indices
    assert got["st_shndx"] == (ENUM_ST_SHNDX[w] if isinstance(w, str) else w)


@settings(max_examples=200)
@given(
    st.sampled_from([32, 64]),
    st.booleans(),
    st.sampled_from(["EM_X86_64", "EM_AARCH64", "EM_ARM", "EM_MIPS"]),
    st.sampled_from(["Elf_Shdr", "Elf_Phdr"]),
    st.binary(min_size=3 * 64, max_size=3 * 64),
)
def test_header_tables_decode_as_pyelftools_parses(elfclass, little, machine, name, raw):
    """A section or program header table decoded at once (header_record) gives, header by
    header, what pyelftools' construct parses: the same numbers and the same enum names
    (the machine's own sh_type and p_type names, the number when it has none)."""
    s = ELFStructs(little_endian=little, elfclass=elfclass)
    s.create_basic_structs()
    s.create_advanced_structs("ET_DYN", machine, "ELFOSABI_SYSV")
    decl = getattr(s, name)
    size = decl.sizeof()
    raw = raw[: 3 * size]
    got = header_record(decl)
    assert got is not None
    rec, names, enums = got
    assert rec.size == size and [n for n, _ in enums] == [
        names[0] if name == "Elf_Phdr" else "sh_type"
    ]
    for k, values in enumerate(rec.iter_unpack(raw)):
        row = dict(zip(names, values, strict=True))
        for field, adapter in enums:
            row[field] = _decoded(adapter, row[field])
        want = decl.parse(raw[k * size : (k + 1) * size])
        assert row == {n: want[n] for n in names}


@pytest.mark.parametrize("path", [*BINARIES, "built"])
def test_elf_file_stand_in_reads_as_pyelftools_elffile(path, built):
    """_ElfFile (no elftools.elf.elffile import, declarations built once per kind of
    file) gives what pyelftools' ELFFile gives: class, byte order, header, declarations'
    layouts; ElfImage's section count, name table index and segments are ELFFile's."""
    path = built["i386.so"] if path == "built" else path
    with open(path, "rb") as f, open(path, "rb") as g:
        ours, theirs = _ElfFile(f), ELFFile(g)
        assert (ours.elfclass, ours.little_endian) == (theirs.elfclass, theirs.little_endian)
        assert ours.header == theirs.header
        for decl in ("Elf_Shdr", "Elf_Phdr", "Elf_Sym", "Elf_Rel", "Elf_Rela", "Elf_Nhdr"):
            a, b = getattr(ours.structs, decl), getattr(theirs.structs, decl)
            assert a.sizeof() == b.sizeof()
            assert [c.name for c in a.subcons] == [c.name for c in b.subcons]
        img = _image(path)
        assert len(img.sections) == theirs.num_sections()
        assert img.sections == [theirs.get_section(i).header for i in range(len(img.sections))]
        assert img.names == [theirs.get_section(i).name for i in range(len(img.sections))]
        loads = [s.header for s in theirs.iter_segments() if s["p_type"] == "PT_LOAD"]
        assert img.load_segments == [(p["p_offset"], p["p_filesz"], p["p_vaddr"]) for p in loads]


@pytest.mark.parametrize(
    "head, message",
    [(b"\x7fELG", "Magic number does not match"), (b"\x7fEL", "Magic number does not match"),
     (b"\x7fELF\x03\x01", "Invalid EI_CLASS b'\\x03'"), (b"\x7fELF\x02", "Invalid EI_DATA b''"),
     (b"\x7fELF\x01\x07", "Invalid EI_DATA b'\\x07'")],
)  # fmt: skip
def test_elf_identification_errors_are_pyelftools(head, message):
    """A file that is not ELF gets pyelftools' own error and message."""
    for cls in (_ElfFile, ELFFile):
        with pytest.raises(ELFError, match=re.escape(message)):
            cls(io.BytesIO(head))


PLT_BINARIES = ["/usr/bin/dd", "/usr/bin/bash", PERF]


def _objdump_plt(path: str) -> dict[int, str]:
    out = subprocess.run(
        ["objdump", "-d", "-j", ".plt", path], capture_output=True, text=True, check=True
    ).stdout
    return {
        int(a, 16): name
        for a, name in re.findall(r"^([0-9a-f]+) <(.+@plt)>:$", out, re.M)
        if not name.startswith("*ABS*")  # objdump's name for IFUNC slots; perf's is "@plt"
    }


@pytest.mark.parametrize("path", PLT_BINARIES)
def test_plt_symbols_match_objdump(path):
    # perf 6.1 names the .plt stubs name@plt from .rela.plt, as objdump labels them
    plt = _image(path).plt_table()
    assert plt is not None
    got = {a: (size, name) for a, size, name in plt.entries()}
    want = _objdump_plt(path)
    assert len(want) > 20
    assert {a: got[a][1] for a in want} == want
    assert {s for s, _ in got.values()} == {16}


def test_elf32_rel_plt_symbols_follow_perfs_rule(built):
    """An Elf32 .rel.plt (r_info's symbol above bit 8, no addend), as readelf reads it:
    perf 6.1's rule on x86 takes header and entry size from .plt's sh_entsize, which
    binutils' ld sets to 4 for i386 (objdump's 16-byte stubs are the same names)."""
    path = built["i386.so"]
    plt = _image(path).plt_table()
    assert plt is not None
    rels = subprocess.run(["readelf", "-rW", path], capture_output=True, text=True, check=True)
    names = re.findall(r"R_386_JUMP_SLOT\s+[0-9a-f]+\s+(\S+)$", rels.stdout, re.M)
    assert sorted(names) == ["ext_fn", "other"]
    sec = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True)
    m = re.search(r"\.plt\s+PROGBITS\s+([0-9a-f]+)\s[0-9a-f]+\s[0-9a-f]+\s([0-9a-f]+)", sec.stdout)
    assert m is not None
    addr, es = int(m.group(1), 16), int(m.group(2), 16)
    want = {addr + es + k * es: f"{n}@plt" for k, n in enumerate(names)}
    assert {a: name for a, _size, name in plt.entries()} == want
    assert sorted(want.values()) == sorted(_objdump_plt(path).values())
    syms = load_elf_symbols(path, "", numpy)
    assert isinstance(syms, ElfSymbols)
    for a, name in want.items():
        off, _filesz, va = next(s for s in syms.segs if s[2] <= a < s[2] + s[1])
        assert syms.lookup(a - va + off + 1) == (name, a)


def test_a_stripped_program_has_its_plt_symbols():
    path = "/usr/bin/dd"  # no .symtab, no defined functions in .dynsym: only data objects
    syms = load_elf_symbols(path)
    assert not isinstance(syms, str)
    assert syms.why_missing == "no symbols in the ELF file (stripped)"
    img = _image(path)
    plt = img.plt_table()
    assert plt is not None
    addr, _size, name = plt.entries()[3]
    off, _filesz, vaddr = next(s for s in img.load_segments if s[2] <= addr < s[2] + s[1])
    rel = addr - vaddr + off  # a file offset, as report looks addresses up
    assert syms.lookup(rel + 6) == (name, addr)
    text = img.sections[img.section_by_name(".text")]
    assert (
        syms.lookup(text["sh_addr"] - vaddr + off + 0x40) is None
    )  # the program's own code: unnamed


def test_build_id_cache_names_a_file_that_is_gone(tmp_path, monkeypatch):
    bash = "/usr/bin/bash"
    bid = _image(bash).build_id()
    d = tmp_path / ".build-id" / bid[:2] / bid[2:]
    d.mkdir(parents=True)
    shutil.copy(bash, d / "elf")
    monkeypatch.setenv("PERF_BUILDID_DIR", str(tmp_path))
    here = load_elf_symbols(bash)
    assert not isinstance(here, str)
    rel = 0x30000  # somewhere in bash's code
    want = here.lookup(rel)
    assert want is not None
    got = ElfCache().get("/gone/bin/bash", bid)
    assert not isinstance(got, str) and got.lookup(rel) == want
    # perf keeps the vDSO as .../[vdso]/<build id>/vdso: any "[...]" map with a build id
    (d / "elf").rename(d / "vdso")
    got = ElfCache().get("[vdso]", bid)
    assert not isinstance(got, str) and got.lookup(rel) == want
    assert ElfCache().get("[vdso]", "00" * 20) == "no symbols for [vdso]"
