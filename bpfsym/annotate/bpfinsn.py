"""eBPF instruction decoder and printer: the kernel's text for each instruction.

Prints exactly what kernel/bpf/disasm.c (Linux 6.18) prints, with the call and immediate
callbacks of bpftool's xlated dumper (tools/bpf/bpftool/xlated_dumper.c), i.e. the text of
`bpftool prog dump xlated`, from the raw xlated instructions of a captured program.

capstone's BPF backend (5.0) cannot stand in for this: it has no cpu=v4 instructions, no
atomics beyond add, and prints its own syntax (tests/offline/annotate/test_bpfinsn.py documents where).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bpfsym.errors import FormatError
from bpfsym.formats import bpfinsn as f
from bpfsym.formats import struct_of

_INSN_LE = struct_of(f.bpf_insn_packed(True))[0]  # code, regs, off, imm
_INSN_BE = struct_of(f.bpf_insn_packed(False))[0]
_LD_IMM64 = f.BPF_LD | f.BPF_IMM | f.BPF_DW


@dataclass(frozen=True, slots=True)
class Insn:
    """One instruction; a 16-byte ld_imm64 is one Insn (width 2) like the kernel prints it."""

    index: int  # position in the xlated array, in 8-byte slots
    code: int
    dst: int
    src: int
    off: int
    imm: int
    next_imm: int = 0  # imm of the second slot of ld_imm64

    @property
    def width(self) -> int:
        return 2 if self.code == _LD_IMM64 else 1

    @property
    def imm64(self) -> int:
        return ((self.next_imm & 0xFFFFFFFF) << 32) | (self.imm & 0xFFFFFFFF)


def decode(data: bytes, *, little: bool = True, path: str = "<xlated>") -> list[Insn]:
    """Split raw struct bpf_insn bytes into instructions (ld_imm64 takes two slots)."""
    if len(data) % f.INSN_SIZE:
        raise FormatError(path, len(data) - len(data) % f.INSN_SIZE, "truncated bpf_insn")
    unpack = _INSN_LE if little else _INSN_BE
    raw = list(unpack.iter_unpack(data))
    out: list[Insn] = []
    i = 0
    while i < len(raw):
        code, regs, off, imm = raw[i]
        dst, src = (regs & 0xF, regs >> 4) if little else (regs >> 4, regs & 0xF)
        if code == _LD_IMM64:
            if i + 1 >= len(raw):
                raise FormatError(path, i * f.INSN_SIZE, "ld_imm64 without its second half")
            out.append(Insn(i, code, dst, src, off, imm, raw[i + 1][3]))
            i += 2
        else:
            out.append(Insn(i, code, dst, src, off, imm))
            i += 1
    return out


@dataclass
class CallNames:
    """What bpftool's callbacks know: kallsyms (exact address -> name) and the program's functions.

    Without it (CallNames() with no lookup) calls print like the verifier log does.
    """

    lookup: Callable[[int], str | None] | None = None  # exact kallsyms match, bpf symbols too
    call_base: int = 0  # address of __bpf_call_base: helper/kfunc address = call_base + imm
    jited_ksyms: list[int] = field(default_factory=list)  # bpf_prog_info.jited_ksyms


def _u32(x: int) -> int:
    return x & 0xFFFFFFFF


def _call_name(insn: Insn, names: CallNames | None) -> str:
    """disasm.c __func_get_name() with bpftool's print_call() as cb_call."""
    if insn.src == 0 and 0 <= insn.imm < len(f.HELPER_NAMES):
        return "bpf_" + f.HELPER_NAMES[insn.imm]
    if names is not None and names.lookup is not None:
        address = (names.call_base + insn.imm) & 0xFFFFFFFFFFFFFFFF
        if insn.src == f.BPF_PSEUDO_CALL and _u32(insn.imm) < len(names.jited_ksyms):
            address = names.jited_ksyms[_u32(insn.imm)]
        sym = names.lookup(address)
        if insn.src == f.BPF_PSEUDO_CALL:
            if not names.jited_ksyms:
                return f"{insn.off:+d}"
            return f"{insn.off:+d}#{sym}" if sym else f"{insn.off:+d}#{address:#x}"
        return sym if sym else f"{address:#x}"
    if insn.src == f.BPF_PSEUDO_CALL:
        return f"{insn.imm:+d}"
    if insn.src == f.BPF_PSEUDO_KFUNC_CALL:
        return "kernel-function"
    return "unknown"


def _imm_text(insn: Insn, names: CallNames | None) -> str:
    """bpftool's print_imm() for ld_imm64 (disasm.c prints 0x%llx without callbacks)."""
    if names is None or names.lookup is None:
        return f"{insn.imm64:#x}"
    if insn.src == f.BPF_PSEUDO_MAP_FD:
        return f"map[id:{_u32(insn.imm)}]"
    if insn.src == f.BPF_PSEUDO_MAP_VALUE:
        return f"map[id:{_u32(insn.imm)}][0]+{_u32(insn.next_imm)}"
    if insn.src == f.BPF_PSEUDO_MAP_IDX_VALUE:
        return f"map[idx:{_u32(insn.imm)}]+{_u32(insn.next_imm)}"
    if insn.src == f.BPF_PSEUDO_FUNC:
        return f"subprog[{insn.imm:+d}]"
    return f"{insn.imm64:#x}"


def _s(table: dict[int, str], key: int) -> str:
    return table.get(key, "(null)")  # glibc prints a NULL %s as "(null)"


def _alu(insn: Insn) -> str:
    code, cls, op = insn.code, insn.code & 0x07, insn.code & 0xF0
    r = "w" if cls == f.BPF_ALU else "r"
    if op == f.BPF_END:
        if cls == f.BPF_ALU64:
            return f"({code:02x}) r{insn.dst} = bswap{insn.imm} r{insn.dst}"
        end = "be" if code & 0x08 == f.BPF_TO_BE else "le"
        return f"({code:02x}) r{insn.dst} = {end}{insn.imm} r{insn.dst}"
    if op == f.BPF_NEG:
        return f"({code:02x}) {r}{insn.dst} = -{r}{insn.dst}"
    if code == f.BPF_ALU64 | f.BPF_MOV | f.BPF_X and insn.off == f.BPF_ADDR_SPACE_CAST:
        imm = _u32(insn.imm)
        return (
            f"({code:02x}) r{insn.dst} = addr_space_cast(r{insn.src}, {imm >> 16}, {imm & 0xFFFF})"
        )
    signed = op in (f.BPF_DIV, f.BPF_MOD) and insn.off == 1
    opname = _s(f.ALU_SIGNED_OPS if signed else f.ALU_OPS, op)
    if code & 0x08 == f.BPF_X:
        cast = f.MOVSX_CASTS.get(insn.off, "") if op == f.BPF_MOV else ""
        return f"({code:02x}) {r}{insn.dst} {opname} {cast}{r}{insn.src}"
    return f"({code:02x}) {r}{insn.dst} {opname} {insn.imm}"


def _stx(insn: Insn) -> str:
    code, mode, size = insn.code, insn.code & 0xE0, insn.code & 0x18
    t = f.LDST_TYPES[size]
    at = f"({t} *)(r{insn.dst} {insn.off:+d})"
    bits = "64" if size == f.BPF_DW else ""
    imm = insn.imm
    if mode == f.BPF_MEM:
        return f"({code:02x}) *{at} = r{insn.src}"
    if mode != f.BPF_ATOMIC:
        return f"BUG_{code:02x}"
    if imm in (f.BPF_ADD, f.BPF_AND, f.BPF_OR, f.BPF_XOR):
        return f"({code:02x}) lock *{at} {f.ALU_OPS[imm & 0xF0]} r{insn.src}"
    if imm in (op | f.BPF_FETCH for op in (f.BPF_ADD, f.BPF_AND, f.BPF_OR, f.BPF_XOR)):
        name = f.ATOMIC_ALU_NAMES[imm & 0xF0]
        return f"({code:02x}) r{insn.src} = atomic{bits}_fetch_{name}({at}, r{insn.src})"
    if imm == f.BPF_CMPXCHG:
        return f"({code:02x}) r0 = atomic{bits}_cmpxchg({at}, r0, r{insn.src})"
    if imm == f.BPF_XCHG:
        return f"({code:02x}) r{insn.src} = atomic{bits}_xchg({at}, r{insn.src})"
    if imm == f.BPF_LOAD_ACQ:
        return f"({code:02x}) r{insn.dst} = load_acquire(({t} *)(r{insn.src} {insn.off:+d}))"
    if imm == f.BPF_STORE_REL:
        return f"({code:02x}) store_release({at}, r{insn.src})"
    return f"BUG_{code:02x}"


def _jmp(insn: Insn, names: CallNames | None) -> str:
    code, cls, op = insn.code, insn.code & 0x07, insn.code & 0xF0
    if op == f.BPF_CALL:
        if insn.src == f.BPF_PSEUDO_CALL:
            return f"({code:02x}) call pc{_call_name(insn, names)}"
        return f"({code:02x}) call {_call_name(insn, names)}#{insn.imm}"
    if code == f.BPF_JMP | f.BPF_JA:
        return f"({code:02x}) goto pc{insn.off:+d}"
    if code == f.BPF_JMP | f.BPF_JCOND and insn.src == f.BPF_MAY_GOTO:
        return f"({code:02x}) may_goto pc{insn.off:+d}"
    if code == f.BPF_JMP32 | f.BPF_JA:
        return f"({code:02x}) gotol pc{insn.imm:+d}"
    if code == f.BPF_JMP | f.BPF_EXIT:
        return f"({code:02x}) exit"
    r = "w" if cls == f.BPF_JMP32 else "r"
    opname = _s(f.JMP_OPS, op)
    if code & 0x08 == f.BPF_X:
        return f"({code:02x}) if {r}{insn.dst} {opname} {r}{insn.src} goto pc{insn.off:+d}"
    return f"({code:02x}) if {r}{insn.dst} {opname} {_u32(insn.imm):#x} goto pc{insn.off:+d}"


def format_insn(insn: Insn, names: CallNames | None = None) -> str:
    """The kernel's text for one instruction, e.g. "(bf) r1 = r2" (no index, no newline)."""
    code, cls = insn.code, insn.code & 0x07
    mode, size = code & 0xE0, code & 0x18
    if cls in (f.BPF_ALU, f.BPF_ALU64):
        return _alu(insn)
    if cls == f.BPF_STX:
        return _stx(insn)
    if cls == f.BPF_ST:
        if mode == f.BPF_MEM:
            t = f.LDST_TYPES[size]
            return f"({code:02x}) *({t} *)(r{insn.dst} {insn.off:+d}) = {insn.imm}"
        if mode == f.BPF_NOSPEC:
            return f"({code:02x}) nospec"
        return f"BUG_st_{code:02x}"
    if cls == f.BPF_LDX:
        if mode not in (f.BPF_MEM, f.BPF_MEMSX):
            return f"BUG_ldx_{code:02x}"
        t = _s(f.LDST_TYPES if mode == f.BPF_MEM else f.LDSX_TYPES, size)
        return f"({code:02x}) r{insn.dst} = *({t} *)(r{insn.src} {insn.off:+d})"
    if cls == f.BPF_LD:
        t = f.LDST_TYPES[size]
        if mode == f.BPF_ABS:
            return f"({code:02x}) r0 = *({t} *)skb[{insn.imm}]"
        if mode == f.BPF_IND:
            return f"({code:02x}) r0 = *({t} *)skb[r{insn.src} + {insn.imm}]"
        if mode == f.BPF_IMM and size == f.BPF_DW:
            return f"({code:02x}) r{insn.dst} = {_imm_text(insn, names)}"
        return f"BUG_ld_{code:02x}"
    return _jmp(insn, names)


def is_call(insn: Insn) -> bool:
    return insn.code & 0xF7 == f.BPF_JMP | f.BPF_CALL  # JMP or JMP32 class


def format_listing(insns: list[Insn], names: CallNames | None = None) -> list[str]:
    """`bpftool prog dump xlated` lines without source and prototypes: "% 4d: (bf) r1 = r2"."""
    return [f"{i.index: 4d}: {format_insn(i, names)}" for i in insns]
