"""top's holder iterator (bpfsym/top/holders.py) packs and reads with struct.Structs derived from
formats/ declarations. These pin each declaration to the struct format holders.py used before
it had them: a later edit of a declaration that moves, resizes or reorders a field fails here."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bpfsym.formats import bpf as fb
from bpfsym.formats import bpfinsn as fi
from bpfsym.formats import btf as fbtf
from bpfsym.formats import fixed_head, struct_of
from bpfsym.top import holders

# (declaration, holders.py's struct of it, the format holders.py had, field names in order)
LAYOUTS = {
    "prog_load_btf_attr": (
        fb.prog_load_btf_attr,
        holders._LOAD_ATTR,
        "=IIQQIIQII16sIIIIQIIQIII4x",
        (
            "prog_type", "insn_cnt", "insns", "license", "log_level", "log_size", "log_buf",
            "kern_version", "prog_flags", "prog_name", "prog_ifindex", "expected_attach_type",
            "prog_btf_fd", "func_info_rec_size", "func_info", "func_info_cnt",
            "line_info_rec_size", "line_info", "line_info_cnt", "attach_btf_id",
            "attach_btf_obj_fd",
        ),
    ),
    "link_create_attr": (
        fb.link_create_attr,
        holders._LINK_ATTR,
        "=IIIIQI4x",
        ("prog_fd", "target_fd", "attach_type", "flags", "iter_info", "iter_info_len"),
    ),
    "iter_create_attr": (fb.iter_create_attr, holders._ITER_ATTR, "=II", ("link_fd", "flags")),
    "holder_record": (fb.holder_record, holders.RECORD, "=II16s", ("tgid", "prog_id", "comm")),
    "btf_type_head": (
        fbtf.btf_type_head(True),
        holders._TYPE_HEAD,
        "<III",
        ("name_off", "info", "size_type"),
    ),
    "btf_member": (
        fbtf.btf_member(True),
        holders._MEMBER,
        "<III",
        ("name_off", "type", "offset"),
    ),
    "btf_array": (
        fbtf.btf_array(True),
        holders._ARRAY,
        "<III",
        ("type", "index_type", "nelems"),
    ),
    "btf_param": (fbtf.btf_param(True), holders._PARAM, "<II", ("name_off", "type")),
    "bpf_insn": (fb.bpf_insn, holders._INSN, "<BBhi", ("code", "regs", "off", "imm")),
}  # fmt: skip


def distinct_values(fmt: struct.Struct) -> tuple[object, ...]:
    """One value per field of fmt, each different (integers small enough for any width)."""
    return tuple(
        bytes((7 * i + j) % 251 + 1 for j in range(len(zero))) if isinstance(zero, bytes) else i + 1
        for i, zero in enumerate(fmt.unpack(bytes(fmt.size)))
    )


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_declaration_is_the_old_format(name: str) -> None:
    decl, used, old_format, names = LAYOUTS[name]
    fast, got_names = struct_of(decl)
    old = struct.Struct(old_format)
    assert got_names == names
    assert fast.size == old.size == used.size
    assert used.format == fast.format  # holders.py uses the declaration's struct
    assert decl.sizeof() == old.size
    # every field where it was: the same values pack to the same bytes, the same bytes unpack
    # to the same values
    values = distinct_values(old)
    assert fast.pack(*values) == old.pack(*values)
    pattern = bytes(range(1, old.size + 1))
    assert fast.unpack(pattern) == old.unpack(pattern)


@pytest.mark.parametrize(
    "field, offset",
    [("expected_attach_type", 68), ("attach_btf_id", 108), ("attach_btf_obj_fd", 112)],
)
def test_prog_load_btf_attr_offsets(field: str, offset: int) -> None:
    # include/uapi/linux/bpf.h's offsets of the fields the iterator's load sets
    assert fixed_head(fb.prog_load_btf_attr.subcon, field)[0].size == offset


def test_prog_load_attr_unchanged() -> None:
    # its other users (live.perf_process, tests' and bench's filters) build these 64 bytes
    fast, names = struct_of(fb.prog_load_attr)
    assert fast.size == fb.prog_load_attr.sizeof() == 64
    assert names == LAYOUTS["prog_load_btf_attr"][3][:10]


u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)


@given(st.lists(u32, min_size=21, max_size=21), u64, u64, u64, u64, u64)
def test_prog_load_btf_attr_builds_as_packed(vals: list[int], a, b, c, d, e) -> None:
    decl = fb.prog_load_btf_attr
    names = LAYOUTS["prog_load_btf_attr"][3]
    value: dict[str, object] = dict(zip(names, vals, strict=True))
    value.update(insns=a, license=b, log_buf=c, func_info=d, line_info=e, prog_name="bpfsym_x")
    packed = holders._LOAD_ATTR.pack(*({**value, "prog_name": b"bpfsym_x"}[k] for k in names))
    assert decl.build(value) == packed


@given(u32, u32, u32, u32, u64, u32)
def test_link_create_attr_builds_as_packed(fd, target, kind, flags, info, info_len) -> None:
    value = dict(
        prog_fd=fd, target_fd=target, attach_type=kind, flags=flags, iter_info=info,
        iter_info_len=info_len,
    )  # fmt: skip
    assert fb.link_create_attr.build(value) == holders._LINK_ATTR.pack(*value.values())


nibble = st.integers(0, 15)


@given(
    st.integers(0, 255),
    nibble,
    nibble,
    st.integers(-(2**15), 2**15 - 1),
    st.integers(-(2**31), 2**31 - 1),
)
def test_insn_regs_byte(code: int, dst: int, src: int, off: int, imm: int) -> None:
    # holders' (src << 4) | dst is the bitfield order of struct bpf_insn on little-endian
    a = holders._Asm()
    a.emit(code, dst, src, off, imm)
    want = fi.bpf_insn(True).build(
        {"code": code, "regs": {"dst_reg": dst, "src_reg": src}, "off": off, "imm": imm}
    )
    assert a.code() == want == struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


@given(u64)
def test_ld64_halves(value: int) -> None:
    a = holders._Asm()
    a.ld64(3, value)
    (_, _, _, _, lo), (_, _, _, _, hi) = a.insns
    assert (lo, hi) == struct.unpack("<ii", struct.pack("<Q", value))
    assert a.code()[4:8] + a.code()[12:16] == value.to_bytes(8, "little")


@pytest.mark.parametrize("little", [True, False])
@given(u32, st.integers(0, 0x1F), st.integers(0, 0xFFFF), st.booleans(), u32)
def test_btf_type_head_is_btf_types_head(
    little: bool, name_off: int, kind: int, vlen: int, kflag: bool, size_type: int
) -> None:
    # btf_type_head reads the bytes btf_type declares, with info's bits where holders takes them
    info = {"kind_flag": kflag, "kind": kind, "vlen": vlen}
    # a PTR (no data after the head), then the info word of any kind in its place
    ptr = {**info, "kind": fbtf.KIND_PTR}
    t = {"name_off": name_off, "info": ptr, "size_type": size_type, "data": None}
    raw = fbtf.btf_type(little).build(t)
    raw = raw[:4] + fbtf.btf_info(little).build(info) + raw[8:]
    head = struct_of(fbtf.btf_type_head(little))[0]
    assert head.size == len(raw) == fbtf.type_size(fbtf.KIND_PTR, 0)
    got_name, word, got_st = head.unpack(raw)
    assert (got_name, got_st) == (name_off, size_type)
    assert ((word >> 24) & 0x1F, word & 0xFFFF, bool(word >> 31)) == (kind, vlen, kflag)
