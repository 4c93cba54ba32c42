"""tests/fixtures/annotate: captured programs, and a hand-built arm64 capture."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

from bpfsym.annotate import bpfinsn
from bpfsym.formats import bpfinsn as fmt
from bpfsym.model import (
    Capture,
    CaptureHeader,
    FuncInfo,
    Function,
    KernelSymbol,
    LineEntry,
    Program,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "annotate"


FIXTURE_NAMES = ["xdp_insns", "tp_insns", "sock_insns"]


def _b(v: Any) -> bytes | None:
    return base64.b64decode(v["b64"]) if isinstance(v, dict) and "b64" in v else v


def load_fixture(name: str) -> Any:
    """A recorded program: {"prog": Program, "kallsyms": [...], "bpftool_xlated": ...}."""
    if name == "verifier_insns":
        return (FIXTURES / "verifier_insns.txt").read_text().splitlines()
    d = json.loads((FIXTURES / f"{name}.json").read_text())
    p = d["program"]
    prog = Program(
        **{
            k: v
            for k, v in p.items()
            if k not in ("functions", "func_info", "lines", "xlated", "btf")
        }
    )
    prog.functions = [
        Function(f["name"], f["addr"], f["size"], _b(f["image"])) for f in p["functions"]
    ]
    prog.func_info = [FuncInfo(**fi) for fi in p["func_info"]]
    prog.lines = [LineEntry(**ln) for ln in p["lines"]]
    prog.xlated = _b(p["xlated"])
    prog.btf = _b(p["btf"])
    d["prog"] = prog
    d["ksyms"] = [KernelSymbol(a, t, n) for a, t, n in d["kallsyms"]]
    return d


def v4_only(insn: bpfinsn.Insn) -> bool:
    """Instructions newer than the disasm.c of the bpftool that recorded the fixtures."""
    cls, op, mode = insn.code & 0x07, insn.code & 0xF0, insn.code & 0xE0
    if cls in (fmt.BPF_ALU, fmt.BPF_ALU64):
        if op in (fmt.BPF_DIV, fmt.BPF_MOD) and insn.off == 1:
            return True
        if op == fmt.BPF_MOV and insn.code & 0x08 and insn.off:
            return True
        return cls == fmt.BPF_ALU64 and op == fmt.BPF_END
    if cls == fmt.BPF_LDX:
        return mode == fmt.BPF_MEMSX
    if cls == fmt.BPF_STX:
        return mode == fmt.BPF_ATOMIC and insn.imm in (fmt.BPF_LOAD_ACQ, fmt.BPF_STORE_REL)
    return insn.code == fmt.BPF_JMP32 | fmt.BPF_JA


A64_FN = 0xFFFF800081000000


A64_LOOKUP = 0xFFFF800080123450  # within bl range (+-128 MiB)


A64_KTIME = 0xFFFF8000801234A0  # reached through mov/movk/blr, as the arm64 JIT does


def a64_bl(pc: int, target: int) -> int:
    return 0x94000000 | (((target - pc) >> 2) & 0x3FFFFFF)


def a64_image() -> bytes:
    words = [
        0xA9BF7BFD,  # stp x29, x30, [sp, #-0x10]!
        0x910003FD,  # mov x29, sp
        a64_bl(A64_FN + 8, A64_LOOKUP),  # bl bpf_map_lookup_elem
        0x54000041,  # b.ne +8 (skips nothing taken or not: to the mov)
        0xD2800000 | ((A64_KTIME & 0xFFFF) << 5) | 10,  # mov x10, #lo16
        0xF2A00000 | (((A64_KTIME >> 16) & 0xFFFF) << 5) | 10,  # movk x10, #.., lsl #16
        0xF2C00000 | (((A64_KTIME >> 32) & 0xFFFF) << 5) | 10,  # movk x10, #.., lsl #32
        0xF2E00000 | (((A64_KTIME >> 48) & 0xFFFF) << 5) | 10,  # movk x10, #.., lsl #48
        0xD63F0140,  # blr x10
        0xA8C17BFD,  # ldp x29, x30, [sp], #0x10
        0xD65F03C0,  # ret
    ]
    return struct.pack("<11I", *words)


def a64_capture() -> Capture:
    image = a64_image()
    name = "bpf_prog_0123456789abcdef_a64"
    xl = b"".join(
        struct.pack("<BBhi", c, r, o, i)
        for c, r, o, i in [(0x85, 0, 0, 1), (0x85, 0, 0, 5), (0x95, 0, 0, 0)]
    )
    prog = Program(
        id=7, name="a64", tag="0123456789abcdef", type=6,
        functions=[Function(name, A64_FN, len(image), image)],
        xlated=xl,
        func_info=[FuncInfo(0, 1, "a64")],
        lines=[
            LineEntry(0, "/src/a.bpf.c", "\tv = bpf_map_lookup_elem(&m, &k);", 10, 6, A64_FN),
            LineEntry(1, "/src/a.bpf.c", "\tt = bpf_ktime_get_ns();", 11, 6, A64_FN + 16),
            LineEntry(2, "/src/a.bpf.c", "}", 12, 1, A64_FN + 36),
        ],
    )  # fmt: skip
    kallsyms = [
        KernelSymbol(0xFFFF800080000000, "T", "_text"),
        KernelSymbol(A64_LOOKUP, "T", "bpf_map_lookup_elem"),
        KernelSymbol(A64_KTIME, "T", "bpf_ktime_get_ns"),
        KernelSymbol(0xFFFF800080123500, "T", "bpf_ktime_get_boot_ns"),
    ]
    header = CaptureHeader("6.18.0", "aarch64", 4096, "x", -1, 0)
    return Capture(header, programs=[prog], kallsyms=kallsyms)
