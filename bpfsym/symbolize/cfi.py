"""DWARF call frame information of a binary (.eh_frame, else .debug_frame, read with
pyelftools) compiled into rows per address, and the register sets of x86-64 and arm64
in perf's numbering (arch/*/include/uapi/asm/perf_regs.h) against DWARF's."""

from __future__ import annotations

import bisect
import functools
import io
import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from bpfsym.formats import integers, struct_of
from bpfsym.formats.elf import (
    DW_EH_PE_DATAREL_SDATA4,
    DW_EH_PE_UDATA4,
    EH_PE_SIZES,
    eh_frame_hdr_head,
)
from bpfsym.symbolize.unwind_stops import (
    BAD_CFI,
    NO_BINARY,
    NO_CFI,
    UNSUPPORTED,
)

X86_64 = "x86_64"

ARM64 = "arm64"

# perf.data HEADER_ARCH (uname -m of the recording machine) to the register set
ARCH_NAMES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": ARM64, "arm64": ARM64}

# enum perf_event_x86_regs (arch/x86/include/uapi/asm/perf_regs.h)
PERF_REG_X86_AX = 0

PERF_REG_X86_BX = 1

PERF_REG_X86_CX = 2

PERF_REG_X86_DX = 3

PERF_REG_X86_SI = 4

PERF_REG_X86_DI = 5

PERF_REG_X86_BP = 6

PERF_REG_X86_SP = 7

PERF_REG_X86_IP = 8

PERF_REG_X86_R8 = 16  # R8..R15 are 16..23

# enum perf_event_arm64_regs (arch/arm64/include/uapi/asm/perf_regs.h): X0..X30 = 0..30
PERF_REG_ARM64_LR = 30

PERF_REG_ARM64_SP = 31

PERF_REG_ARM64_PC = 32


@dataclass(frozen=True)
class RegSet:
    """One architecture's registers: perf's numbering against DWARF's."""

    name: str
    nregs: int  # DWARF register columns kept (0 .. nregs-1)
    perf_sp: int
    perf_ip: int
    sp: int  # DWARF number of the stack pointer (the caller's value is the CFA)
    ip: int  # DWARF column that holds the pc while unwinding (-1: none)
    ra: int  # return address column CIEs of the ABI use
    dwarf_of_perf: tuple[tuple[int, int], ...]  # (perf number, DWARF number)
    addr_mask: int  # bits of a code address (arm64: pointer authentication codes above)

    @functools.cached_property
    def perf_of_dwarf(self) -> tuple[int, ...]:
        """The perf register number of each DWARF column (-1: perf has none)."""
        out = [-1] * self.nregs
        for p, d in self.dwarf_of_perf:
            if d < self.nregs:
                out[d] = p
        return tuple(out)


# System V x86-64 psABI DWARF numbers: rax rdx rcx rbx rsi rdi rbp rsp r8..r15, 16 = RA (rip)
_X86_DWARF = {
    PERF_REG_X86_AX: 0,
    PERF_REG_X86_DX: 1,
    PERF_REG_X86_CX: 2,
    PERF_REG_X86_BX: 3,
    PERF_REG_X86_SI: 4,
    PERF_REG_X86_DI: 5,
    PERF_REG_X86_BP: 6,
    PERF_REG_X86_SP: 7,
    **{PERF_REG_X86_R8 + i: 8 + i for i in range(8)},
    PERF_REG_X86_IP: 16,
}

REGSETS = {
    X86_64: RegSet(
        name=X86_64,
        nregs=17,
        perf_sp=PERF_REG_X86_SP,
        perf_ip=PERF_REG_X86_IP,
        sp=7,
        ip=16,  # the PLT's CFA expression reads rip (DW_OP_breg16)
        ra=16,
        dwarf_of_perf=tuple(sorted(_X86_DWARF.items())),
        addr_mask=(1 << 64) - 1,
    ),
    # AAPCS64 DWARF numbers (aadwarf64): x0..x30 = 0..30, sp = 31; the RA is x30 (LR)
    ARM64: RegSet(
        name=ARM64,
        nregs=32,
        perf_sp=PERF_REG_ARM64_SP,
        perf_ip=PERF_REG_ARM64_PC,
        sp=31,
        ip=-1,
        ra=30,
        dwarf_of_perf=tuple((i, i) for i in range(32)),
        # return addresses signed with pointer authentication (DW_CFA_AARCH64_negate_ra_state)
        # carry the code above the 48-bit user address space: strip it
        addr_mask=(1 << 48) - 1,
    ),
}

# compiled CFI rows: (kind, arg) per register, kinds below
R_OFFSET = 0  # saved at CFA + arg

R_VAL_OFFSET = 1  # is CFA + arg

R_REGISTER = 2  # is in register arg

R_SAME = 3  # unchanged

R_UNDEFINED = 4  # not recoverable (for the RA column: the outermost frame)

R_EXPRESSION = 5  # saved at the address the expression arg computes (CFA pushed first)

R_VAL_EXPRESSION = 6  # is the value the expression arg computes (CFA pushed first)


class Row(NamedTuple):
    """The unwinding rule of one address: how to find the CFA, then each register."""

    cfa_reg: int  # -1: cfa_expr computes it
    cfa_off: int
    cfa_expr: bytes
    saved: tuple[tuple[int, int], ...]  # OFFSET rules, the common case: (register, offset)
    other: tuple[tuple[int, int, Any], ...]  # every other rule: (register, kind, arg)
    ra: int  # the CIE's return address column
    ra_undefined: bool  # its rule is "undefined": the outermost frame (_start, clone)
    sp_rule: bool  # a rule gives the stack pointer (else the caller's is the CFA)
    signal: bool  # the FDE's CIE has augmentation "S": a signal trampoline


_RULE_KINDS = {
    "OFFSET": R_OFFSET,
    "VAL_OFFSET": R_VAL_OFFSET,
    "REGISTER": R_REGISTER,
    "SAME_VALUE": R_SAME,
    "UNDEFINED": R_UNDEFINED,
    "EXPRESSION": R_EXPRESSION,
    "VAL_EXPRESSION": R_VAL_EXPRESSION,
}


class _Fdes:
    """One CFI section's FDEs, sorted by start address, each decoded when first used."""

    def __init__(self, cfi: Any, locate: list[tuple[int, int]] | None) -> None:
        self.cfi = cfi  # elftools CallFrameInfo
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.refs: list[Any] = []  # FDE objects, or section offsets still to parse
        if locate is not None:
            # .eh_frame_hdr: (initial location, FDE offset), sorted; lengths come with the FDE
            self.starts = [a for a, _ in locate]
            self.ends = [-1] * len(locate)
            self.refs = [off for _, off in locate]
            return
        from elftools.dwarf.callframe import FDE

        fdes = [e for e in cfi.get_entries() if isinstance(e, FDE)]
        fdes.sort(key=lambda e: int(e.header.initial_location))
        for e in fdes:
            lo = int(e.header.initial_location)
            self.starts.append(lo)
            self.ends.append(lo + int(e.header.address_range))
            self.refs.append(e)

    def find(self, vaddr: int) -> Any:
        """The FDE covering vaddr, or None."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0:
            return None
        ref = self.refs[i]
        if isinstance(ref, int):
            ref = self.refs[i] = self._parse(ref)
            self.ends[i] = int(ref.header.initial_location) + int(ref.header.address_range)
        return ref if vaddr < self.ends[i] else None

    def _parse(self, offset: int) -> Any:
        from elftools.dwarf.callframe import FDE

        # pyelftools parses one entry (and its CIE) at a section offset; its public API
        # parses the whole section, which costs a second per 10k FDEs
        e = self.cfi._parse_entry_at(offset)
        if not isinstance(e, FDE):
            raise ValueError(f".eh_frame_hdr points at a non-FDE at {offset:#x}")
        return e


@dataclass
class Binary:
    """One ELF file's load segments and CFI, with decoded rows cached per address."""

    path: str
    build_id: str
    arch: str  # X86_64, ARM64, or the ELF e_machine of another
    segments: list[tuple[int, int, int]]  # (p_offset, p_filesz, p_vaddr) of PT_LOAD
    cfis: list[_Fdes]
    rows: dict[int, Row | tuple[str, str]] = field(default_factory=dict)  # by file offset

    def vaddr(self, off: int) -> int | None:
        for p_off, size, va in self.segments:
            if p_off <= off < p_off + size:
                return off - p_off + va
        return None

    def row(self, off: int) -> Row | tuple[str, str]:
        """The rule at file offset off (a cache hit for every address seen before), or
        (reason, detail)."""
        got = self.rows.get(off)
        if got is None:
            got = self.rows[off] = self._row(off)
        return got

    def _row(self, off: int) -> Row | tuple[str, str]:
        va = self.vaddr(off)
        name = os.path.basename(self.path)
        if va is None:
            return (NO_CFI, f"file offset {off:#x} of {name} is in no loaded segment")
        rs = REGSETS.get(self.arch)
        if rs is None:
            return (UNSUPPORTED, f"{name} is for {self.arch}")
        for fdes in self.cfis:
            try:
                fde = fdes.find(va)
                if fde is None:
                    continue
                return _compile_row(fde, va, rs)
            except Exception as e:  # noqa: BLE001 - pyelftools on damaged CFI raises anything
                return (BAD_CFI, f"{name} at {va:#x}: {type(e).__name__}: {str(e)[:80]}")
        return (NO_CFI, f"{va:#x} in {name}")


def _compile_row(fde: Any, va: int, rs: RegSet) -> Row:
    nregs = rs.nregs
    table = fde.get_decoded().table
    if not table:
        raise ValueError("FDE without rows")
    pcs = [r["pc"] for r in table]
    r = table[max(bisect.bisect_right(pcs, va) - 1, 0)]
    cfa = r["cfa"]
    if cfa.expr is not None:
        cfa_reg, cfa_off, cfa_expr = -1, 0, bytes(cfa.expr)
    elif cfa.reg is None:
        raise ValueError("row without a CFA rule")
    else:
        cfa_reg, cfa_off, cfa_expr = int(cfa.reg), int(cfa.offset or 0), b""
    if cfa_reg >= nregs:
        raise ValueError(f"CFA in DWARF register {cfa_reg}")
    cie = fde.cie
    ra = int(cie.header.get("return_address_register", -1))
    if not 0 <= ra < nregs:
        raise ValueError(f"return address column {ra}")
    saved: list[tuple[int, int]] = []
    other: list[tuple[int, int, Any]] = []
    ra_undefined = sp_rule = False
    for k, rule in r.items():
        # vector and other registers perf does not sample (arm64 d8-d15 are 72-79)
        if not isinstance(k, int) or not 0 <= k < nregs:
            continue
        kind = _RULE_KINDS.get(rule.type)
        if kind is None:
            raise ValueError(f"register rule {rule.type}")
        sp_rule |= kind != R_SAME and k == rs.sp
        if kind == R_OFFSET:
            saved.append((k, int(rule.arg)))
        elif kind == R_SAME:
            pass
        elif kind == R_UNDEFINED and k == ra:
            ra_undefined = True
        elif kind == R_REGISTER:
            if not 0 <= int(rule.arg) < nregs:
                raise ValueError(f"register rule from DWARF register {rule.arg}")
            other.append((k, kind, int(rule.arg)))
        elif kind in (R_EXPRESSION, R_VAL_EXPRESSION):
            other.append((k, kind, bytes(rule.arg)))
        else:
            other.append((k, kind, rule.arg))
    return Row(
        cfa_reg,
        cfa_off,
        cfa_expr,
        tuple(saved),
        tuple(other),
        ra,
        ra_undefined,
        sp_rule,
        bool(cie.augmentation_dict.get(True)),  # pyelftools keys augmentation "S" as True
    )


_EH_HDR = struct_of(eh_frame_hdr_head)[0]  # version, eh_frame_ptr_enc, fde_count_enc, table_enc


def _eh_frame_hdr(data: bytes, hdr_addr: int, eh_addr: int, little: bool) -> list | None:
    """The binary search table of .eh_frame_hdr as (initial location, .eh_frame offset),
    or None when it is absent or encoded in a way other than the linkers' usual
    (version 1, table DW_EH_PE_datarel|sdata4: LSB gABI, "Exception Frame Header")."""
    if len(data) < 12:
        return None
    version, ptr_enc, count_enc, table_enc = _EH_HDR.unpack_from(data, 0)
    if version != 1 or table_enc != DW_EH_PE_DATAREL_SDATA4:
        return None
    pos = _EH_HDR.size
    # eh_frame_ptr: skip it (we know the section); count: udata4 as ld and lld write it
    if ptr_enc not in EH_PE_SIZES or count_enc != DW_EH_PE_UDATA4:
        return None
    pos += EH_PE_SIZES[ptr_enc]
    if pos + 4 > len(data):
        return None
    ints = integers(little)
    (count,) = ints.u32.unpack_from(data, pos)
    pos += 4
    if pos + 8 * count > len(data):
        return None
    vals = ints.array("i", 2 * count).unpack_from(data, pos)
    return [(hdr_addr + vals[2 * i], hdr_addr + vals[2 * i + 1] - eh_addr) for i in range(count)]


def load_binary(path: str, build_id: str = "") -> Binary | tuple[str, str]:
    """A Binary for the ELF file at path (its build id checked when one is given), or
    (reason, detail) when it cannot serve. Only the headers and CFI sections are read."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, after pyelftools read it
    except OSError as e:
        return (NO_BINARY, f"{path}: {e.strerror or e}")
    try:
        with f:
            return _load(path, f, build_id)
    except Exception as e:  # noqa: BLE001 - pyelftools on a damaged ELF raises anything
        return (BAD_CFI, f"{path}: {type(e).__name__}: {str(e)[:80]}")


def _section(elf: Any, name: str) -> tuple[bytes, int] | None:
    sec = elf.get_section_by_name(name)
    if sec is None or sec["sh_type"] == "SHT_NOBITS" or not sec["sh_size"]:
        return None
    return sec.data(), int(sec["sh_addr"])  # pyelftools decompresses SHF_COMPRESSED


def _load(path: str, f: Any, build_id: str) -> Binary | tuple[str, str]:
    from elftools.dwarf.callframe import CallFrameInfo
    from elftools.dwarf.structs import DWARFStructs
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(f)
    got = _build_id(elf)
    if build_id and got != build_id:
        return (NO_BINARY, f"{path} has build id {got or 'none'}, not {build_id}")
    segs = [
        (int(s["p_offset"]), int(s["p_filesz"]), int(s["p_vaddr"]))
        for s in elf.iter_segments()
        if s["p_type"] == "PT_LOAD"
    ]
    structs = DWARFStructs(
        little_endian=elf.little_endian, dwarf_format=32, address_size=elf.elfclass // 8
    )
    cfis = []
    eh = _section(elf, ".eh_frame")
    if eh is not None:
        data, addr = eh
        cfi = CallFrameInfo(io.BytesIO(data), len(data), addr, structs, for_eh_frame=True)
        hdr = _section(elf, ".eh_frame_hdr")
        table = None
        if hdr is not None and hasattr(cfi, "_parse_entry_at"):
            table = _eh_frame_hdr(hdr[0], hdr[1], addr, elf.little_endian)
        cfis.append(_Fdes(cfi, table))
    dbg = _section(elf, ".debug_frame")
    if dbg is not None:
        data = dbg[0]
        cfis.append(_Fdes(CallFrameInfo(io.BytesIO(data), len(data), 0, structs), None))
    if not cfis:
        return (NO_CFI, f"{path} has no .eh_frame or .debug_frame")
    machine = str(elf["e_machine"])
    return Binary(path, got, ELF_ARCHES.get(machine, machine), segs, cfis)


ELF_ARCHES = {"EM_X86_64": X86_64, "EM_AARCH64": ARM64}


def _build_id(elf: Any) -> str:
    for sec in elf.iter_sections():
        if sec["sh_type"] != "SHT_NOTE":
            continue
        for note in sec.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                return str(note["n_desc"])
    return ""
