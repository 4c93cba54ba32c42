"""BTF layouts (formats/btf.py) and func/line info resolution (bpfsym/btfinfo.py).

Fixtures in tests/fixtures/btf: two BPF objects built from their C sources, and what
the kernel returned for them once loaded (raw BTF, func_info, line_info,
jited_line_info) next to bpftool's text view of the same programs, which is the
reference here.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest
from construct import Container, ListContainer
from elftools.elf.elffile import ELFFile
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.formats import bpf, btf
from bpfsym.formats.errors import FormatError
from bpfsym.read import btf as btfinfo

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "btf"
NAMES = ["btftest", "minimal"]

_spec = importlib.util.spec_from_file_location("bpftool_text", FIX / "bpftool_text.py")
assert _spec and _spec.loader
bpftool_text = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bpftool_text)


def fixture(name: str, suffix: str) -> bytes:
    return (FIX / f"{name}.{suffix}").read_bytes()


def meta(name: str) -> dict:
    return json.loads(fixture(name, "json"))


def elf_btf(name: str) -> bytes:
    with open(FIX / f"{name}.bpf.o", "rb") as f:
        sec = ELFFile(f).get_section_by_name(".BTF")
        assert sec is not None
        return sec.data()


def info(kind_flag: bool, kind: int, vlen: int) -> Container:
    return Container(kind_flag=kind_flag, kind=kind, vlen=vlen)


def t(name_off: int, kind: int, size_type: int, data, vlen: int = 0, kflag: bool = False):
    return Container(
        name_off=name_off, info=info(kflag, kind, vlen), size_type=size_type, data=data
    )


def member(n: int, ty: int, off: int) -> Container:
    return Container(name_off=n, type=ty, offset=off)


# One example of every kind of include/uapi/linux/btf.h
EXAMPLES = {
    btf.KIND_INT: t(1, btf.KIND_INT, 4, Container(encoding=btf.INT_SIGNED, offset=0, bits=32)),
    btf.KIND_PTR: t(0, btf.KIND_PTR, 1, None),
    btf.KIND_ARRAY: t(0, btf.KIND_ARRAY, 0, Container(type=1, index_type=1, nelems=16)),
    btf.KIND_STRUCT: t(
        5,
        btf.KIND_STRUCT,
        8,
        ListContainer([member(7, 1, 0), member(9, 1, (3 << 24) | 32)]),
        vlen=2,
        kflag=True,
    ),
    btf.KIND_UNION: t(5, btf.KIND_UNION, 4, ListContainer([member(7, 1, 0)]), vlen=1),
    btf.KIND_ENUM: t(
        5,
        btf.KIND_ENUM,
        4,
        ListContainer([Container(name_off=7, val=-1), Container(name_off=9, val=2**31 - 1)]),
        vlen=2,
        kflag=True,
    ),
    btf.KIND_FWD: t(5, btf.KIND_FWD, 0, None, kflag=True),
    btf.KIND_TYPEDEF: t(5, btf.KIND_TYPEDEF, 1, None),
    btf.KIND_VOLATILE: t(0, btf.KIND_VOLATILE, 1, None),
    btf.KIND_CONST: t(0, btf.KIND_CONST, 1, None),
    btf.KIND_RESTRICT: t(0, btf.KIND_RESTRICT, 2, None),
    btf.KIND_FUNC: t(7, btf.KIND_FUNC, 13, None, vlen=1),  # vlen of FUNC is the linkage
    btf.KIND_FUNC_PROTO: t(
        0,
        btf.KIND_FUNC_PROTO,
        1,
        ListContainer([Container(name_off=7, type=1), Container(name_off=0, type=0)]),
        vlen=2,
    ),
    btf.KIND_VAR: t(9, btf.KIND_VAR, 1, Container(linkage=1)),
    btf.KIND_DATASEC: t(
        1, btf.KIND_DATASEC, 8, ListContainer([Container(type=14, offset=4, size=4)]), vlen=1
    ),
    btf.KIND_FLOAT: t(1, btf.KIND_FLOAT, 8, None),
    btf.KIND_DECL_TAG: t(7, btf.KIND_DECL_TAG, 4, Container(component_idx=-1)),
    btf.KIND_TYPE_TAG: t(7, btf.KIND_TYPE_TAG, 2, None),
    btf.KIND_ENUM64: t(
        5,
        btf.KIND_ENUM64,
        8,
        ListContainer([Container(name_off=7, val_lo32=0xFFFFFFFF, val_hi32=0x80000000)]),
        vlen=1,
        kflag=True,
    ),
}
STRINGS = b"\0int\0s\0a\0b\0"


def test_every_kind_has_an_example():
    assert sorted(EXAMPLES) == list(range(1, len(btf.KIND_NAMES)))


@pytest.mark.parametrize("little", [True, False])
@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_type_roundtrip(kind, little):
    x = EXAMPLES[kind]
    raw = btf.btf_type(little).build(x)
    assert btf.btf_type(little).parse(raw) == x
    assert btf._compiled_type(little).parse(raw) == btf.btf_type(little).parse(raw)
    assert len(raw) == btf.type_size(kind, x.info.vlen)


def test_info_word_bit_positions():
    # hand-derived: kind_flag bit 31, kind bits 24-28, vlen bits 0-15
    raw = btf.btf_info(True).build(info(True, btf.KIND_STRUCT, 0x1234))
    assert struct.unpack("<I", raw)[0] == 0x80000000 | (4 << 24) | 0x1234
    raw = btf.btf_info(False).build(info(False, btf.KIND_ENUM64, 7))
    assert struct.unpack(">I", raw)[0] == (19 << 24) | 7
    # BTF_INT_ENCODING bits 24-27, BTF_INT_OFFSET bits 16-23, BTF_INT_BITS bits 0-7
    raw = btf.btf_int(True).build(Container(encoding=btf.INT_BOOL, offset=3, bits=1))
    assert struct.unpack("<I", raw)[0] == (4 << 24) | (3 << 16) | 1


@pytest.mark.parametrize("little", [True, False])
def test_blob_roundtrip(little):
    types = [EXAMPLES[k] for k in sorted(EXAMPLES)]
    blob = btf.build(types, STRINGS, little)
    assert blob[:2] == (b"\x9f\xeb" if little else b"\xeb\x9f")
    got = btf.parse(blob)
    assert got.little is little
    assert got.types == types
    assert got.strings == STRINGS
    assert got.name(1) == "int" and got.name(7) == "s" and got.name(2) == ""
    assert btf.build(got.types, got.strings, little) == blob


def test_records_compile():
    for little in (True, False):
        for name, rec in btf._records(little).items():
            raw = bytes(range(rec.sizeof()))
            assert rec.compile().parse(raw) == rec.parse(raw), name
            assert rec.build(rec.parse(raw)) == raw, name
        hdr = btf.btf_header(little)
        raw = bytes(range(hdr.sizeof()))
        assert hdr.compile().parse(raw) == hdr.parse(raw)
        assert hdr.sizeof() == 24


@pytest.mark.parametrize("name", NAMES)
def test_fixture_header(name):
    blob = fixture(name, "btf")
    h = btf.parse(blob).header
    assert (h.magic, h.version, h.flags, h.hdr_len, h.type_off) == (0xEB9F, 1, 0, 24, 0)
    assert h.str_off == h.type_len
    assert 24 + h.type_len + h.str_len == len(blob)


@pytest.mark.parametrize("name,blob", [(n, s) for n in NAMES for s in ("btf", "bpf.o")])
def test_fixture_types_match_bpftool(name, blob):
    data = fixture(name, "btf") if blob == "btf" else elf_btf(name)
    ref = fixture(name, "btf.txt" if blob == "btf" else "bpf.btf.txt").decode()
    parsed = btf.parse(data)
    ours = [
        (i + 1, btf.KIND_NAMES[x.info.kind], parsed.string(x.name_off) or "(anon)")
        for i, x in enumerate(parsed.types)
    ]
    assert ours == bpftool_text.btf_types(ref)
    index = btfinfo.BtfIndex(data)
    assert len(index.type_offsets()) == len(parsed.types)
    assert [index.type_kind_name(i + 1)[1] for i in range(len(parsed.types))] == [
        parsed.name(i + 1) for i in range(len(parsed.types))
    ]


def test_fixture_covers_kinds():
    kinds = {x.info.kind for x in btf.parse(fixture("btftest", "btf")).types}
    # every kind clang 14 emits; ENUM64 comes from vmlinux in the live test
    assert kinds == set(range(1, 19))


@pytest.mark.parametrize("name", NAMES)
def test_resolve_matches_bpftool(name):
    m = meta(name)
    blob = fixture(name, "btf")
    funcs = btfinfo.resolve_funcs(blob, fixture(name, "func_info"), m["func_info_rec_size"])
    jited = btfinfo.jited_addrs(fixture(name, "jited_line_info"))
    lines = btfinfo.resolve_lines(blob, fixture(name, "line_info"), m["line_info_rec_size"], jited)
    ref_funcs, ref_lines = bpftool_text.xlated_linum(fixture(name, "linum.txt").decode())
    assert [(f.insn_off, f.name) for f in funcs] == ref_funcs
    assert [(x.insn_off, x.file, x.text.strip(), x.line, x.col) for x in lines] == ref_lines
    assert len(funcs) == m["nr_func_info"] and len(lines) == m["nr_line_info"]
    assert [x.jited_addr for x in lines] == jited
    assert all(a >= 0xFFFF800000000000 for a in jited)  # x86-64 kernel addresses


def test_resolve_without_btf():
    m = meta("btftest")
    funcs = btfinfo.resolve_funcs(None, fixture("btftest", "func_info"), 8)
    lines = btfinfo.resolve_lines(None, fixture("btftest", "line_info"), 16)
    ref_funcs, ref_lines = bpftool_text.xlated_linum(fixture("btftest", "linum.txt").decode())
    assert [(f.insn_off, f.name) for f in funcs] == [(off, "") for off, _ in ref_funcs]
    assert [(x.insn_off, x.file, x.text, x.line, x.col, x.jited_addr) for x in lines] == [
        (off, "", "", line, col, None) for off, _, _, line, col in ref_lines
    ]
    assert len(lines) == m["nr_line_info"]
    assert btfinfo.type_name(None, 18) == ""


def test_larger_record_size():
    def widen(data: bytes, size: int, new: int) -> bytes:
        return b"".join(
            data[i : i + size] + b"\xee" * (new - size) for i in range(0, len(data), size)
        )

    blob = fixture("btftest", "btf")
    fi, li = fixture("btftest", "func_info"), fixture("btftest", "line_info")
    assert btfinfo.resolve_funcs(blob, widen(fi, 8, 12), 12) == btfinfo.resolve_funcs(blob, fi, 8)
    assert btfinfo.resolve_lines(blob, widen(li, 16, 24), 24) == btfinfo.resolve_lines(blob, li, 16)


def test_struct_views_agree_with_construct():
    li = fixture("btftest", "line_info")
    for rec, off in zip(btfinfo._LINE_REC.iter_unpack(li), range(0, len(li), 16), strict=True):
        c = bpf.line_info.parse(li[off:])
        assert rec == (c.insn_off, c.file_name_off, c.line_off, c.line_col)
    fi = fixture("btftest", "func_info")
    for rec, off in zip(btfinfo._FUNC_REC.iter_unpack(fi), range(0, len(fi), 8), strict=True):
        c = bpf.func_info.parse(fi[off:])
        assert rec == (c.insn_off, c.type_id)


def test_type_name():
    blob = fixture("btftest", "btf")
    # hand-checked against btftest.btf.txt
    assert btfinfo.type_name(blob, 0) == ""
    assert btfinfo.type_name(blob, 2) == "__sk_buff"
    assert btfinfo.type_name(blob, 1) == ""


def _hdr(**kw) -> bytes:
    d = dict(magic=0xEB9F, version=1, flags=0, hdr_len=24, type_off=0, type_len=0)
    d.update(str_off=0, str_len=1)
    d.update(kw)
    return btf.btf_header(True).build(d)


@pytest.mark.parametrize(
    "blob,offset",
    [
        (b"", 0),
        (b"\x9f", 0),
        (b"\x00\x00" + bytes(22), 0),
        (b"\x9f\xeb\x01\x00", 4),  # truncated header
        (_hdr(version=2) + b"\0", 2),
        (_hdr(hdr_len=0xFFFFFFFF) + b"\0", 4),
        (_hdr(hdr_len=4) + b"\0", 4),
        (_hdr(hdr_len=28) + b"\1\0\0\0\0", 24),  # unknown header tail not zero
        (_hdr(type_len=0xFFFFFFF0) + b"\0", 12),
        (_hdr(str_len=0xFFFFFFFF) + b"\0", 20),
        (_hdr(type_off=2, type_len=1) + b"\0\0\0\0", 8),
        (_hdr(type_len=4, str_off=2, str_len=4) + b"\0" * 8, 16),
        (_hdr(str_len=2) + b"a\1", 25),  # string section not NUL-terminated
    ],
)
def test_bad_header(blob, offset):
    with pytest.raises(FormatError) as e:
        btf.parse(blob, "x.btf")
    assert e.value.offset == offset and e.value.path == "x.btf"
    with pytest.raises(FormatError):
        btfinfo.BtfIndex(blob)


def _blob_with_types(raw_types: bytes) -> bytes:
    return _hdr(type_len=len(raw_types), str_off=len(raw_types)) + raw_types + b"\0"


@pytest.mark.parametrize(
    "raw,offset",
    [
        (struct.pack("<III", 0, 20 << 24, 0), 28),  # unknown kind 20
        (struct.pack("<III", 0, 0, 0), 28),  # BTF_KIND_UNKN
        (struct.pack("<II", 0, 1 << 24), 24),  # truncated btf_type
        (struct.pack("<III", 0, 1 << 24, 4), 24),  # INT without its u32
        (struct.pack("<III", 0, (4 << 24) | 0xFFFF, 8) + bytes(12), 24),  # vlen past the section
    ],
)
def test_bad_types(raw, offset):
    blob = _blob_with_types(raw)
    with pytest.raises(FormatError) as e:
        btf.parse(blob)
    assert e.value.offset == offset
    with pytest.raises(FormatError) as e2:
        btfinfo.BtfIndex(blob).type_offsets()
    assert e2.value.offset == offset


def test_truncated_fixtures():
    blob = fixture("btftest", "btf")
    for n in (0, 1, 10, 23, 24, 100, len(blob) - 1):
        with pytest.raises(FormatError):
            btf.parse(blob[:n])


def test_bad_strings_and_records():
    blob = fixture("btftest", "btf")
    parsed = btf.parse(blob)
    with pytest.raises(FormatError):
        parsed.string(len(parsed.strings))
    with pytest.raises(FormatError):
        parsed.type(len(parsed.types) + 1)
    with pytest.raises(FormatError):
        btf.string_at(b"ab", 0)  # unterminated
    fi = fixture("btftest", "func_info")
    with pytest.raises(FormatError):
        btfinfo.resolve_funcs(blob, fi[:-1], 8)  # not whole records
    with pytest.raises(FormatError):
        btfinfo.resolve_funcs(blob, fi, 4)  # record smaller than bpf_func_info
    with pytest.raises(FormatError):
        btfinfo.resolve_funcs(blob, struct.pack("<II", 0, 999), 8)  # no such type
    with pytest.raises(FormatError):
        btfinfo.resolve_funcs(blob, struct.pack("<II", 0, 2), 8)  # a STRUCT, not a FUNC
    with pytest.raises(FormatError):
        btfinfo.resolve_lines(blob, struct.pack("<IIII", 0, 10**6, 0, 0), 16)


# --- property tests -------------------------------------------------------------------

_u32 = st.integers(0, 2**32 - 1)
_s32 = st.integers(-(2**31), 2**31 - 1)
_REC = {
    "member": st.builds(Container, name_off=_u32, type=_u32, offset=_u32),
    "enum": st.builds(Container, name_off=_u32, val=_s32),
    "param": st.builds(Container, name_off=_u32, type=_u32),
    "secinfo": st.builds(Container, type=_u32, offset=_u32, size=_u32),
    "enum64": st.builds(Container, name_off=_u32, val_lo32=_u32, val_hi32=_u32),
}
_VLEN_KINDS = {
    btf.KIND_STRUCT: "member",
    btf.KIND_UNION: "member",
    btf.KIND_ENUM: "enum",
    btf.KIND_FUNC_PROTO: "param",
    btf.KIND_DATASEC: "secinfo",
    btf.KIND_ENUM64: "enum64",
}
_FIXED = {
    btf.KIND_INT: st.builds(
        Container, encoding=st.integers(0, 15), offset=st.integers(0, 255), bits=st.integers(0, 255)
    ),
    btf.KIND_ARRAY: st.builds(Container, type=_u32, index_type=_u32, nelems=_u32),
    btf.KIND_VAR: st.builds(Container, linkage=_u32),
    btf.KIND_DECL_TAG: st.builds(Container, component_idx=_s32),
}


@st.composite
def btf_types(draw):
    kind = draw(st.integers(1, len(btf.KIND_NAMES) - 1))
    kflag = draw(st.booleans())
    if kind in _VLEN_KINDS:
        data = ListContainer(draw(st.lists(_REC[_VLEN_KINDS[kind]], max_size=5)))
        vlen = len(data)
    else:
        data = draw(_FIXED[kind]) if kind in _FIXED else None
        vlen = draw(st.integers(0, 0xFFFF))
    return t(draw(_u32), kind, draw(_u32), data, vlen=vlen, kflag=kflag)


@given(st.lists(btf_types(), max_size=8), st.binary(max_size=32), st.booleans())
def test_property_roundtrip(types, strings, little):
    strings = strings + b"\0"
    got = btf.parse(btf.build(types, strings, little))
    assert got.types == types and got.strings == strings


def _only_format_errors(blob: bytes) -> None:
    try:
        parsed = btf.parse(blob)
    except FormatError:
        parsed = None
    try:
        index = btfinfo.BtfIndex(blob)
        index.type_offsets()
        btfinfo.resolve_funcs(index, fixture("btftest", "func_info"), 8)
        btfinfo.resolve_lines(index, fixture("btftest", "line_info"), 16)
    except FormatError:
        return
    assert parsed is not None  # what the index accepts, the full parser accepts


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_property_random_bytes(data):
    _only_format_errors(b"\x9f\xeb\x01\x00" + data)
    _only_format_errors(data)


@settings(max_examples=300)
@given(
    st.sampled_from(NAMES),
    st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=6),
    st.integers(0, 4000),
)
def test_property_mutated_fixtures(name, flips, cut):
    blob = bytearray(fixture(name, "btf"))
    for pos, val in flips:
        if pos < len(blob):
            blob[pos] = val
    _only_format_errors(bytes(blob))
    _only_format_errors(bytes(blob[:cut]))
