"""The struct ELF reader (formats/elf.py layouts) against pyelftools, readelf and objdump on
real binaries (PLT symbols too); perf's build-id cache; bad input gives FormatError; the
layouts round-trip and agree with struct_of."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy
import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.formats import elf as E
from bpfsym.formats import struct_of
from bpfsym.formats.errors import FormatError
from bpfsym.read.elf import ElfImage, load_elf_symbols
from bpfsym.symbolize.user import ElfCache

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
PERF = "/usr/bin/perf"
BINARIES = [LIBC, PERF, "/usr/bin/bash", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"]
FUNC_TYPES = ("STT_FUNC", "STT_LOOS")  # pyelftools calls STT_GNU_IFUNC (10) STT_LOOS
BINDS = {"STB_LOCAL": 0, "STB_GLOBAL": 1, "STB_WEAK": 2, "STB_GNU_UNIQUE": 10}


def _image(path: str) -> ElfImage:
    with open(path, "rb") as f:
        return ElfImage(path, f.read())


@pytest.mark.parametrize("path", BINARIES)
def test_sections_and_segments_match_pyelftools(path):
    img = _image(path)
    with open(path, "rb") as f:
        elf = ELFFile(f)
        want = [
            (s.name, s["sh_type"], s["sh_addr"], s["sh_offset"], s["sh_size"], s["sh_link"])
            for s in elf.iter_sections()
        ]
        loads = [
            (p["p_offset"], p["p_filesz"], p["p_vaddr"])
            for p in elf.iter_segments()
            if p["p_type"] == "PT_LOAD"
        ]
    got = [(img.section_name(i), s[1], s[3], s[4], s[5], s[6]) for i, s in enumerate(img.sections)]
    assert [g[0] for g in got] == [w[0] for w in want]
    assert [g[2:] for g in got] == [w[2:] for w in want]
    assert img.load_segments == loads
    assert len(loads) >= 2


@pytest.mark.parametrize("path", BINARIES)
def test_build_id_matches_readelf(path):
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True, check=True)
    m = re.search(r"Build ID: ([0-9a-f]+)", out.stdout)
    assert m is not None
    assert _image(path).build_id() == m.group(1)


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


def test_bad_magic():
    with pytest.raises(FormatError, match="not an ELF"):
        ElfImage("x", b"\x7fELG" + bytes(100))


def test_bad_class():
    data = bytearray(_small())
    data[E.EI_CLASS] = 7
    with pytest.raises(FormatError, match="unknown ELF class"):
        ElfImage("x", bytes(data))


@pytest.mark.parametrize("cut", [0, 10, 20, 63])
def test_truncated_header(cut):
    with pytest.raises(FormatError):
        ElfImage("x", _small()[:cut])


def test_section_table_past_the_end():
    data = _small()
    img = ElfImage("x", data)
    shoff = struct_of(E.elf_layouts(True, True).ehdr)[0].unpack_from(data)[6]
    assert img.sections
    with pytest.raises(FormatError, match="section header table runs past"):
        ElfImage("x", data[: shoff + 10])


def test_symbol_table_not_whole():
    data = bytearray(_small())
    img = ElfImage("x", bytes(data))
    i = img.section_by_name(".dynsym")
    assert i is not None
    lay = E.elf_layouts(True, True)
    sh, _ = struct_of(lay.shdr)
    shoff = struct_of(lay.ehdr)[0].unpack_from(data)[6]
    at = shoff + i * sh.size
    fields = list(sh.unpack_from(data, at))
    fields[5] -= 1  # sh_size
    sh.pack_into(data, at, *fields)
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


@settings(max_examples=300)
@given(st.data())
def test_corrupt_elf_raises_format_error_only(data):
    """Any truncation or byte flip of a real binary reads or raises FormatError."""
    raw = bytearray(_small())
    cut = data.draw(st.integers(0, len(raw)))
    raw = raw[:cut]
    for _ in range(data.draw(st.integers(0, 8))):
        if raw:
            pos = data.draw(st.integers(0, min(len(raw) - 1, 4096)))
            raw[pos] = data.draw(st.integers(0, 255))
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


# ---- the layouts ---------------------------------------------------------------

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)


@pytest.mark.parametrize("is64", [True, False])
@pytest.mark.parametrize("little", [True, False])
def test_layout_sizes(is64, little):
    lay = E.elf_layouts(is64, little)
    sizes = (64, 64, 56, 24) if is64 else (52, 40, 32, 16)
    assert (lay.ehdr.sizeof(), lay.shdr.sizeof(), lay.phdr.sizeof(), lay.sym.sizeof()) == sizes
    assert lay.nhdr.sizeof() == 12
    for decl in (lay.ehdr, lay.shdr, lay.phdr, lay.sym, lay.nhdr):
        assert struct_of(decl)[0].size == decl.sizeof()


@given(st.booleans(), st.booleans(), u32, u8, u8, u16, u64, u64)
def test_sym_roundtrip_and_struct(is64, little, name, info, other, shndx, value, size):
    lay = E.elf_layouts(is64, little)
    if not is64:
        value &= 0xFFFFFFFF
        size &= 0xFFFFFFFF
    x = {
        "st_name": name,
        "st_info": info,
        "st_other": other,
        "st_shndx": shndx,
        "st_value": value,
        "st_size": size,
    }
    raw = lay.sym.build(x)
    got = lay.sym.parse(raw)
    assert {k: got[k] for k in x} == x
    assert lay.sym.compile().parse(raw) == got
    s, names = struct_of(lay.sym)
    assert dict(zip(names, s.unpack(raw), strict=True)) == x


@given(st.booleans(), st.booleans(), st.lists(u32, min_size=10, max_size=10))
def test_shdr_roundtrip_and_struct(is64, little, vals):
    lay = E.elf_layouts(is64, little)
    names = [sc.name for sc in lay.shdr.subcons]
    x = dict(zip(names, vals, strict=True))
    raw = lay.shdr.build(x)
    got = lay.shdr.parse(raw)
    assert {k: got[k] for k in x} == x
    assert lay.shdr.compile().parse(raw) == got
    s, fields = struct_of(lay.shdr)
    assert dict(zip(fields, s.unpack(raw), strict=True)) == x


PLT_BINARIES = ["/usr/bin/dd", "/usr/bin/bash", PERF]


@pytest.mark.parametrize("path", PLT_BINARIES)
def test_plt_symbols_match_objdump(path):
    # perf 6.1 names the .plt stubs name@plt from .rela.plt, as objdump labels them
    plt = _image(path).plt_table()
    assert plt is not None
    got = {a: (size, name) for a, size, name in plt.entries()}
    out = subprocess.run(
        ["objdump", "-d", "-j", ".plt", path], capture_output=True, text=True, check=True
    ).stdout
    want = {
        int(a, 16): name
        for a, name in re.findall(r"^([0-9a-f]+) <(.+@plt)>:$", out, re.M)
        if not name.startswith("*ABS*")  # objdump's name for IFUNC slots; perf's is "@plt"
    }
    assert len(want) > 20
    assert {a: got[a][1] for a in want} == want
    assert {s for s, _ in got.values()} == {16}


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
    assert syms.lookup(text[3] - vaddr + off + 0x40) is None  # the program's own code: unnamed


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
