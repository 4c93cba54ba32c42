"""The eBPF decoder/printer against the kernel's printer, and capstone's BPF backend against both.

Expected texts come from bpftool (`prog dump xlated`, recorded by
tests/fixtures/annotate/make_fixtures.py), from the kernel's verifier log of the same load
(the running kernel's disasm.c), or were worked out by hand from kernel/bpf/disasm.c formats.
"""

from __future__ import annotations

import re
import struct

import capstone
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kit.annotate_fixtures import FIXTURE_NAMES, load_fixture, v4_only

from bpfsym.annotate import bpfinsn
from bpfsym.formats import bpfinsn as fmt
from bpfsym.formats.errors import FormatError


def enc(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def text(raw: bytes, names: bpfinsn.CallNames | None = None) -> str:
    (insn,) = bpfinsn.decode(raw)
    return bpfinsn.format_insn(insn, names)


# (encoding, text) worked out by hand from the format strings of kernel/bpf/disasm.c (6.18)
HAND = [
    (enc(0x07, 1, 0, 0, -4), "(07) r1 += -4"),
    (enc(0x0C, 1, 2), "(0c) w1 += w2"),
    (enc(0x3F, 1, 2, 1), "(3f) r1 s/= r2"),
    (enc(0x94, 3, 0, 1, 7), "(94) w3 s%= 7"),
    (enc(0xBF, 1, 2, 16), "(bf) r1 = (s16)r2"),
    (enc(0xBC, 4, 5, 8), "(bc) w4 = (s8)w5"),
    (enc(0xBF, 1, 2, 1, 0x10002), "(bf) r1 = addr_space_cast(r2, 1, 2)"),
    (enc(0x84, 6), "(84) w6 = -w6"),
    (enc(0x87, 6), "(87) r6 = -r6"),
    (enc(0xDC, 2, 0, 0, 32), "(dc) r2 = be32 r2"),
    (enc(0xD4, 2, 0, 0, 64), "(d4) r2 = le64 r2"),
    (enc(0xD7, 2, 0, 0, 16), "(d7) r2 = bswap16 r2"),
    (enc(0x7B, 10, 1, -8), "(7b) *(u64 *)(r10 -8) = r1"),
    (enc(0x72, 10, 0, 3, 255), "(72) *(u8 *)(r10 +3) = 255"),
    (enc(0xC2, 0, 0, 0), "(c2) nospec"),
    (enc(0x69, 3, 4, 12), "(69) r3 = *(u16 *)(r4 +12)"),
    (enc(0x89, 3, 4, -2), "(89) r3 = *(s16 *)(r4 -2)"),
    (enc(0xDB, 1, 2, 8, 0x00), "(db) lock *(u64 *)(r1 +8) += r2"),
    (enc(0xC3, 1, 2, 8, 0xA0), "(c3) lock *(u32 *)(r1 +8) ^= r2"),
    (enc(0xDB, 1, 2, 8, 0x41), "(db) r2 = atomic64_fetch_or((u64 *)(r1 +8), r2)"),
    (enc(0xC3, 1, 2, 0, 0x51), "(c3) r2 = atomic_fetch_and((u32 *)(r1 +0), r2)"),
    (enc(0xDB, 1, 2, 0, 0xE1), "(db) r2 = atomic64_xchg((u64 *)(r1 +0), r2)"),
    (enc(0xDB, 1, 2, 0, 0xF1), "(db) r0 = atomic64_cmpxchg((u64 *)(r1 +0), r0, r2)"),
    (enc(0xD3, 1, 2, 4, 0x100), "(d3) r1 = load_acquire((u8 *)(r2 +4))"),
    (enc(0xCB, 1, 2, 4, 0x110), "(cb) store_release((u16 *)(r1 +4), r2)"),
    (enc(0xDB, 1, 2, 0, 0x77), "BUG_db"),
    (enc(0x30, 0, 0, 0, 12), "(30) r0 = *(u8 *)skb[12]"),
    (enc(0x48, 0, 7, 0, 2), "(48) r0 = *(u16 *)skb[r7 + 2]"),
    (enc(0x18, 1) + enc(0, 0, 0, 0, 1), "(18) r1 = 0x100000000"),
    (enc(0x85, 0, 0, 0, 1), "(85) call bpf_map_lookup_elem#1"),
    (enc(0x85, 0, 0, 0, 211), "(85) call bpf_cgrp_storage_delete#211"),
    (enc(0x85, 0, 0, 0, 212), "(85) call unknown#212"),
    (enc(0x85, 0, 1, 0, 7), "(85) call pc+7"),
    (enc(0x85, 0, 2, 0, 99), "(85) call kernel-function#99"),
    (enc(0x05, 0, 0, -3), "(05) goto pc-3"),
    (enc(0x06, 0, 0, 0, 70000), "(06) gotol pc+70000"),
    (enc(0xE5, 0, 0, 5), "(e5) may_goto pc+5"),
    (enc(0x95), "(95) exit"),
    (enc(0x1D, 1, 2, 4), "(1d) if r1 == r2 goto pc+4"),
    (enc(0x46, 1, 0, -1, 3), "(46) if w1 & 0x3 goto pc-1"),
    (enc(0xD5, 1, 0, 0, -3), "(d5) if r1 s<= 0xfffffffd goto pc+0"),
    (enc(0x96), "(96) if w0 exit 0x0 goto pc+0"),
    (enc(0xF5), "(f5) if r0 (null) 0x0 goto pc+0"),
    (enc(0xE4, 1, 0, 0, 2), "(e4) w1 (null) 2"),
    (enc(0x70, 1), "BUG_ld_70"),
    (enc(0x21, 1), "BUG_ldx_21"),
]


@pytest.mark.parametrize(("raw", "expected"), HAND)
def test_hand_derived(raw: bytes, expected: str) -> None:
    assert text(raw) == expected


def test_callbacks_like_bpftool() -> None:
    """bpftool's print_call/print_imm: exact kallsyms names, map ids, sub-program names."""
    syms = {0x1000 + 50: "bpf_some_helper", 0x9000: "bpf_prog_0011223344556677_sub"}
    names = bpfinsn.CallNames(syms.get, 0x1000, [0x8000, 0x9000])
    assert text(enc(0x85, 0, 0, 0, 50 + 0x10000), names) == "(85) call 0x11032#65586"
    assert text(enc(0x85, 0, 2, 0, 50), names) == "(85) call bpf_some_helper#50"
    assert text(enc(0x85, 0, 1, 12, 1), names) == "(85) call pc+12#bpf_prog_0011223344556677_sub"
    assert text(enc(0x85, 0, 1, 12, 0), names) == "(85) call pc+12#0x8000"
    assert text(enc(0x18, 1, 1, 0, 7) + enc(0), names) == "(18) r1 = map[id:7]"
    assert text(enc(0x18, 1, 2, 0, 7) + enc(0, 0, 0, 0, 16), names) == "(18) r1 = map[id:7][0]+16"
    assert text(enc(0x18, 1, 4, 0, -2) + enc(0), names) == "(18) r1 = subprog[-2]"


def listing_names(fx: dict) -> bpfinsn.CallNames:
    prog = fx["prog"]
    syms = {int(a): n for a, _, n in fx["kallsyms"]}
    syms.update({f.addr: f.name for f in prog.functions})
    base = next(a for a, n in syms.items() if n == "__bpf_call_base")
    return bpfinsn.CallNames(syms.get, base, [f.addr for f in prog.functions])


def bpftool_insns(dump: str) -> list[str]:
    return [ln for ln in dump.splitlines() if re.match(r"^ *\d+: ", ln)]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_equals_bpftool(name: str) -> None:
    """Every instruction as bpftool printed it; where this bpftool's disasm.c predates the
    instruction (cpu v4, load_acquire), as the running kernel's verifier log printed it."""
    fx = load_fixture(name)
    insns = bpfinsn.decode(fx["prog"].xlated)
    mine = bpfinsn.format_listing(insns, listing_names(fx))
    theirs = bpftool_insns(fx["bpftool_xlated"])
    assert len(mine) == len(theirs)
    kernel = set(load_fixture("verifier_insns"))
    v4 = 0
    for insn, m, t in zip(insns, mine, theirs, strict=True):
        if v4_only(insn):
            v4 += 1
            assert m.split(": ", 1)[1] in kernel, m
        else:
            assert m == t
    if name == "xdp_insns":
        assert v4 == 22  # 16 ALU + 3 ldsx + 2 acquire/release + gotol, as patched in


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_json_dump_equals(name: str) -> None:
    fx = load_fixture(name)
    insns = bpfinsn.decode(fx["prog"].xlated)
    names = listing_names(fx)
    got = [bpfinsn.format_insn(i, names) for i in insns if not v4_only(i)]
    want = [
        r["disasm"] for i, r in zip(insns, fx["bpftool_xlated_json"], strict=True) if not v4_only(i)
    ]
    assert got == want


def test_truncated() -> None:
    with pytest.raises(FormatError) as e:
        bpfinsn.decode(enc(0x95) + b"\x95\x00", path="x")
    assert e.value.offset == 8
    with pytest.raises(FormatError) as e:
        bpfinsn.decode(enc(0x95) + enc(0x18, 1), path="x")
    assert e.value.offset == 8 and "ld_imm64" in str(e.value)


def test_big_endian_regs() -> None:
    raw = struct.pack(">BBhi", 0xBF, 0x12, -1, 5)  # dst in the high nibble
    (insn,) = bpfinsn.decode(raw, little=False)
    assert (insn.dst, insn.src, insn.off, insn.imm) == (1, 2, -1, 5)
    c = fmt.bpf_insn(False).parse(raw)
    assert (c.regs.dst_reg, c.regs.src_reg) == (1, 2)


@given(st.binary(max_size=8 * 40))
def test_any_bytes(raw: bytes) -> None:
    try:
        insns = bpfinsn.decode(raw)
    except FormatError:
        return
    assert sum(i.width for i in insns) * 8 == len(raw)
    decl = fmt.bpf_insn(True)
    for i in insns:
        c = decl.parse(raw[i.index * 8 : i.index * 8 + 8])
        assert (c.code, c.regs.dst_reg, c.regs.src_reg, c.off, c.imm) == (
            i.code, i.dst, i.src, i.off, i.imm,
        )  # fmt: skip
        assert decl.build(c) == raw[i.index * 8 : i.index * 8 + 8]
        out = bpfinsn.format_insn(i)
        assert out.startswith(f"({i.code:02x}) ") or out.startswith("BUG_")


# ---- capstone's BPF backend (capstone issue 2211: outdated, drops instructions) ------------


def cs_text(raw: bytes) -> str | None:
    """capstone's decode of exactly one instruction, None when it refuses the bytes."""
    md = capstone.Cs(capstone.CS_ARCH_BPF, capstone.CS_MODE_BPF_EXTENDED)
    got = list(md.disasm(raw, 0))
    if not got or sum(g.size for g in got) != len(raw):
        return None
    return " | ".join(f"{g.mnemonic} {g.op_str}".strip() for g in got)


# instructions the kernel emits that capstone 5.0 does not decode at all (disasm stops there)
CS_DROPS = {
    "jmp32 conditional jumps": enc(0x1E, 1, 2, 1),
    "jmp32 immediate jumps": enc(0x16, 0, 0, 1, 0),
    "gotol (v4)": enc(0x06, 0, 0, 0, 1),
    "bswap (v4)": enc(0xD7, 1, 0, 0, 16),
    "ldsx (v4)": enc(0x91, 5, 10, -32),
    "verifier's r11 (BPF_REG_AX)": enc(0x25, 11, 0, 4, 1),
}
# instructions capstone decodes to the same text as a different instruction
CS_CONFUSES = {
    "sdiv is printed as udiv": (enc(0x3F, 1, 2, 1), enc(0x3F, 1, 2, 0)),
    "smod is printed as umod": (enc(0x97, 1, 0, 1, 3), enc(0x97, 1, 0, 0, 3)),
    "movsx is printed as mov": (enc(0xBF, 1, 2, 8), enc(0xBF, 1, 2, 0)),
    "atomic or is printed as add": (enc(0xDB, 1, 3, 8, 0x40), enc(0xDB, 1, 3, 8, 0)),
    "atomic fetch_add is printed as add": (enc(0xDB, 1, 3, 0, 0x01), enc(0xDB, 1, 3, 0, 0)),
    "xchg is printed as add": (enc(0xC3, 1, 6, 64, 0xE1), enc(0xC3, 1, 6, 64, 0)),
    "cmpxchg is printed as add": (enc(0xDB, 1, 2, 56, 0xF1), enc(0xDB, 1, 2, 56, 0)),
    "store_release is printed as add": (enc(0xDB, 10, 1, -8, 0x110), enc(0xDB, 10, 1, -8, 0)),
    "map fd ld_imm64 loses its pseudo src": (
        enc(0x18, 1, 1, 0, 5) + enc(0),
        enc(0x18, 1, 0, 0, 5) + enc(0),
    ),
    "pseudo call is printed as a helper call": (enc(0x85, 0, 1, 0, 1), enc(0x85, 0, 0, 0, 1)),
}


@pytest.mark.parametrize("what", sorted(CS_DROPS))
def test_capstone_drops(what: str) -> None:
    raw = CS_DROPS[what]
    assert cs_text(raw) is None
    assert not text(raw).startswith("BUG")  # the kernel's printer knows it


@pytest.mark.parametrize("what", sorted(CS_CONFUSES))
def test_capstone_confuses(what: str) -> None:
    a, b = CS_CONFUSES[what]
    assert cs_text(a) is not None and cs_text(a) == cs_text(b)
    bpftool_like = bpfinsn.CallNames(lambda addr: None)
    assert text(a, bpftool_like) != text(b, bpftool_like)  # ours tells them apart, as bpftool


def test_capstone_on_real_program() -> None:
    """On the loaded program, capstone drops or confuses exactly the classes listed above."""
    fx = load_fixture("xdp_insns")
    raw = fx["prog"].xlated
    insns = bpfinsn.decode(raw)
    dropped = set()
    for i in insns:
        one = raw[i.index * 8 : (i.index + i.width) * 8]
        if cs_text(one) is None:
            cls = i.code & 0x07
            dropped.add(
                "jmp32"
                if cls == fmt.BPF_JMP32
                else "r11"
                if 11 in (i.dst, i.src)
                else f"{i.code:02x}"
            )
    assert dropped == {"jmp32", "r11", "d7", "91", "89", "81"}
