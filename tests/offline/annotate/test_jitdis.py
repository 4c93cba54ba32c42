"""JIT image disassembly: exact bytes, objdump's boundaries, named targets, x86-64 and arm64."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kit.annotate_fixtures import (
    A64_FN,
    A64_KTIME,
    A64_LOOKUP,
    FIXTURE_NAMES,
    a64_capture,
    a64_image,
    load_fixture,
)

from bpfsym.annotate import jitdis
from bpfsym.model import Function, KernelSymbol, Program
from bpfsym.read.kallsyms import capture_kernel_symbols


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_images(name: str) -> None:
    fx = load_fixture(name)
    for fn, want in zip(fx["prog"].functions, fx["objdump"], strict=True):
        insns = jitdis.disassemble(fn.image, fn.addr, "x86_64")
        assert b"".join(i.raw for i in insns) == fn.image
        assert [[i.addr, i.size] for i in insns] == want  # GNU objdump's decode


def test_branch_targets_leave_the_image() -> None:
    fx = load_fixture("xdp_insns")
    main = fx["prog"].functions[0]
    subs = {f.addr for f in fx["prog"].functions[1:]}
    assert jitdis.branch_targets(main.image, main.addr, "x86_64") >= subs


def test_symbol_table() -> None:
    prog = Program(1, "p", "00" * 8, 6, functions=[Function("bpf_prog_x_f", 0x9000, 0x40)])
    syms = jitdis.SymbolTable(
        [
            KernelSymbol(0x1000, "T", "a"),
            KernelSymbol(0x1000, "t", "a_alias"),
            KernelSymbol(0x1100, "D", "data_not_code"),
            KernelSymbol(0x2000, "t", "b"),
        ],
        [prog],
    )
    assert syms.exact(0x1000) == "a" and syms.exact(0x9000) == "bpf_prog_x_f"
    assert syms.name(0x1000) == "a"
    assert syms.name(0x1104) == "a+0x104"  # data symbols do not name code
    assert syms.name(0x2000 + jitdis.MAX_SYMBOL_OFFSET - 1) is not None
    assert syms.name(0x2000 + jitdis.MAX_SYMBOL_OFFSET) is None
    assert syms.name(0x903F) == "bpf_prog_x_f+0x3f"
    assert syms.name(0x9040) == "b+0x7040"
    assert syms.name(0x10) is None
    assert syms.address("b") == 0x2000


def test_x86_targets_and_labels() -> None:
    # call rel32 to 0x1000; jne +2 (local); jmp -4 (back to the jne); ret; nop; nop
    base = 0x5000
    code = b"\xe8" + struct.pack("<i", 0x1000 - (base + 5)) + b"\x75\x02\xeb\xfc\xc3\x90\x90"
    insns = jitdis.disassemble(code, base, "x86_64")
    assert [(i.mnemonic, i.target, i.is_call) for i in insns[:3]] == [
        ("call", 0x1000, True),
        ("jne", base + 9, False),
        ("jmp", base + 5, False),
    ]
    syms = jitdis.SymbolTable([KernelSymbol(0x1000, "T", "bpf_map_lookup_elem")])
    labels, outside = jitdis.target_names(insns, base, len(code), syms)
    assert labels == {base + 5: ".L0", base + 9: ".L1"}
    assert outside == {0x1000: "bpf_map_lookup_elem"}


def test_undecodable_bytes_kept() -> None:
    # 0x06 (push es) does not exist in 64-bit mode
    insns = jitdis.disassemble(b"\x90\x06\xc3", 0x100, "x86_64")
    assert [(i.addr, i.mnemonic, i.raw) for i in insns] == [
        (0x100, "nop", b"\x90"),
        (0x101, ".byte", b"\x06"),
        (0x102, "ret", b"\xc3"),
    ]
    # a truncated trailing A64 word
    insns = jitdis.disassemble(struct.pack("<I", 0xD65F03C0) + b"\x01\x02", 0x100, "aarch64")
    assert [(i.mnemonic, i.raw) for i in insns] == [
        ("ret", b"\xc0\x03\x5f\xd6"),
        (".byte", b"\x01\x02"),
    ]


def test_arm64_decoded() -> None:
    image = a64_image()
    insns = jitdis.disassemble(image, A64_FN, "aarch64")
    assert b"".join(i.raw for i in insns) == image
    assert [i.addr for i in insns] == list(range(A64_FN, A64_FN + 44, 4))
    assert [i.text for i in insns[:3]] == [
        "stp x29, x30, [sp, #-0x10]!",
        "mov x29, sp",
        f"bl #{A64_LOOKUP:#x}",
    ]
    assert (insns[2].target, insns[2].is_call) == (A64_LOOKUP, True)
    assert (insns[8].text, insns[8].target, insns[8].is_call) == ("blr x10", A64_KTIME, True)
    assert insns[10].text == "ret" and insns[10].target is None
    cap = a64_capture()
    syms = jitdis.SymbolTable(capture_kernel_symbols(cap), cap.programs)
    labels, outside = jitdis.target_names(insns, A64_FN, len(image), syms)
    assert outside == {A64_LOOKUP: "bpf_map_lookup_elem", A64_KTIME: "bpf_ktime_get_ns"}
    assert labels == {A64_FN + 0x14: ".L0"}


def test_unknown_arch() -> None:
    assert not jitdis.supported("riscv64")
    with pytest.raises(ValueError):
        jitdis.disassemble(b"\x00" * 4, 0, "riscv64")


@given(st.binary(max_size=200), st.sampled_from(["x86_64", "aarch64"]))
def test_any_bytes_cover_the_image(code: bytes, arch: str) -> None:
    insns = jitdis.disassemble(code, 0xFFFFFFFFC0000000, arch)
    assert b"".join(i.raw for i in insns) == code
    pos = 0xFFFFFFFFC0000000
    for i in insns:
        assert i.addr == pos and i.size > 0
        pos += i.size
