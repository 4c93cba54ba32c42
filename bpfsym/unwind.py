"""User stacks of `perf record --call-graph dwarf` samples, unwound with DWARF CFI.

Such samples carry the user registers (PERF_SAMPLE_REGS_USER) and a copy of the top of
the user stack (PERF_SAMPLE_STACK_USER) instead of a user call chain; perf record sets
attr.exclude_callchain_user, so PERF_SAMPLE_CALLCHAIN holds only the kernel part. perf
report unwinds them with libunwind or libdw; this module does the same with the call
frame information of the mapped binaries (.eh_frame, else .debug_frame, read with
pyelftools), the sampled registers and the sampled stack bytes only: never the live
process, never code bytes.

    unwinder = Unwinder()
    got = unwinder.unwind("x86_64", regs, stack, maps)   # maps(addr) -> mapped file or None
    got.ips     # leaf pc first, then each caller's return address - 1, as perf reports them
    got.reason  # None, or why unwinding stopped early (counted by the report)

Caller addresses are reported as perf does (tools/perf/util/unwind-libunwind-local.c,
get_entries; unwind-libdw.c, frame_callback): the return address minus one, so that the
address falls in the call instruction (a noreturn call may be the last instruction of a
function), except for the frame a signal interrupted (the one above a signal trampoline,
whose CIE has augmentation "S"): its pc is exact. The trampoline's own frame is reported
at its "return address" minus one too, which perf 6.1 shows as [unknown] (glibc's
__restore_rt FDE starts one byte before the symbol for this lookup). The frame limit is
perf's: 127 entries, the leaf included (kernel.perf_event_max_stack's default, which
perf report uses as its max_stack).

Where perf 6.1 (x86-64, libunwind) and this module differ, perf is wrong:
- perf cannot read the last word of the stack copy (access_mem's `addr + 8 >= end`), so
  where a return address sits there its chain is one frame shorter;
- where a stack read fails (a truncated copy) perf appends one bogus entry, 0 - 1,
  shown as [unknown]; here the chain stops with the reason TRUNCATED;
- perf's libunwind reads no .debug_frame on x86-64: code with CFI only there stops at
  its leaf; here .debug_frame is read after .eh_frame.

Speed: each binary's FDEs are found through .eh_frame_hdr and decoded when first used;
the rule of each address is kept per maps object, and so is a memo of whole walks keyed
by (pc, sp) and checked against only the stack words the result depended on (saved
registers that decide nothing are not compared), so a sample whose stack repeats an
earlier one's call path costs one struct.unpack.

The sampled fields are read from a raw PERF_RECORD_SAMPLE with ``UserSampleLayout``; the
record layout is include/uapi/linux/perf_event.h's (PERF_RECORD_SAMPLE).
"""

from __future__ import annotations

import bisect
import functools
import io
import os
import struct
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

# ---- register sets ---------------------------------------------------------------

X86_64 = "x86_64"
ARM64 = "arm64"
# perf.data HEADER_ARCH (uname -m of the recording machine) to the register set
ARCH_NAMES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": ARM64, "arm64": ARM64}

# enum perf_sample_regs_abi (include/uapi/linux/perf_event.h)
REGS_ABI_NONE = 0
REGS_ABI_32 = 1
REGS_ABI_64 = 2

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

# perf report's max_stack default: kernel.perf_event_max_stack (PERF_MAX_STACK_DEPTH, 127);
# unwind-libunwind-local.c counts the leaf among them
MAX_FRAMES = 127
# DWARF expressions are run for at most this many operations (DW_OP_skip/bra can loop)
MAX_EXPR_STEPS = 256

# why unwinding stopped early: the report counts samples by these (the detail says more)
NO_REGS = "no user registers in the sample"
ABI_32 = "32-bit user registers (not unwound)"
NO_STACK = "no user stack copy in the sample"
NO_MAP = "address outside every memory map"
NO_BINARY = "binary missing"
NO_CFI = "no CFI for the address"
BAD_CFI = "CFI unreadable"
TRUNCATED = "stack copy truncated"
OUTSIDE = "read outside the stack copy"
NO_REGISTER = "register not recoverable"
NO_PROGRESS = "unwinding does not progress"
FRAME_LIMIT = "frame limit"
UNSUPPORTED = "unsupported CFI rule"


class UnwindError(Exception):
    """A caller's mistake (unknown architecture, malformed sample); bad stack data never
    raises: it ends the unwinding with a reason."""


class MappedFile(Protocol):
    """What ``maps`` gives for an address (bpfsym.symbolize.MapEntry has these)."""

    start: int
    end: int
    pgoff: int
    filename: str
    build_id: str


MapLookup = Callable[[int], "MappedFile | None"]


class Unwound(NamedTuple):
    """One unwound user stack: perf's callchain entries, leaf first, and why it stopped."""

    ips: tuple[int, ...]
    reason: str | None = None  # None: unwound to the outermost frame
    detail: str = ""  # the address, file or size behind the reason


class _Stop(Exception):
    """Ends one unwinding: reason (a constant above) and detail."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


# ---- sample fields -----------------------------------------------------------------

# sample_type bits (include/uapi/linux/perf_event.h, enum perf_event_sample_format)
_S_IP = 1 << 0
_S_TID = 1 << 1
_S_TIME = 1 << 2
_S_ADDR = 1 << 3
_S_READ = 1 << 4
_S_CALLCHAIN = 1 << 5
_S_ID = 1 << 6
_S_CPU = 1 << 7
_S_PERIOD = 1 << 8
_S_STREAM_ID = 1 << 9
_S_RAW = 1 << 10
_S_BRANCH_STACK = 1 << 11
_S_REGS_USER = 1 << 12
_S_STACK_USER = 1 << 13
_S_IDENTIFIER = 1 << 16
# the fixed-size u64 words before SAMPLE_READ, in ABI order (TID and CPU are two u32 each)
_PREFIX_BITS = (
    _S_IDENTIFIER,
    _S_IP,
    _S_TID,
    _S_TIME,
    _S_ADDR,
    _S_ID,
    _S_STREAM_ID,
    _S_CPU,
    _S_PERIOD,
)
# read_format bits
_F_TOTAL_TIME_ENABLED = 1 << 0
_F_TOTAL_TIME_RUNNING = 1 << 1
_F_ID = 1 << 2
_F_GROUP = 1 << 3
_F_LOST = 1 << 4
# branch_sample_type bits that change the branch stack's size
_B_HW_INDEX = 1 << 17
_B_COUNTERS = 1 << 19


@dataclass
class UserStack:
    """PERF_SAMPLE_REGS_USER and PERF_SAMPLE_STACK_USER of one sample."""

    abi: int  # REGS_ABI_*: NONE when the task had no user state (kernel thread)
    regs: dict[int, int]  # perf register number -> value
    stack: bytes  # the dyn_size bytes the kernel copied, from regs[SP] up
    size: int  # bytes reserved in the record (attr.sample_stack_user, rounded)


class UserSampleLayout:
    """Where REGS_USER and STACK_USER sit in an event's samples.

    Made from the event's attr fields; ``extract`` reads one raw record. The fields
    before them (READ, CALLCHAIN, RAW, BRANCH_STACK) are skipped by their sizes, in
    the order of include/uapi/linux/perf_event.h (PERF_RECORD_SAMPLE).
    """

    def __init__(
        self,
        sample_type: int,
        read_format: int = 0,
        branch_sample_type: int = 0,
        regs_user: int = 0,
        little: bool = True,
    ) -> None:
        self.sample_type = sample_type
        self.read_format = read_format
        self.branch_sample_type = branch_sample_type
        self.mask = regs_user
        self.little = little
        e = "<" if little else ">"
        self.u64 = struct.Struct(e + "Q")
        self.u32 = struct.Struct(e + "I")
        self.prefix = 8 * sum(1 for b in _PREFIX_BITS if sample_type & b)
        self.regnums = tuple(i for i in range(64) if regs_user >> i & 1)
        self.regs_struct = struct.Struct(f"{e}{len(self.regnums)}Q")
        rf = read_format
        self.read_times = (rf & _F_TOTAL_TIME_ENABLED != 0) + (rf & _F_TOTAL_TIME_RUNNING != 0)
        self.read_per_value = 1 + (rf & _F_ID != 0) + (rf & _F_LOST != 0)
        self.wanted = bool(sample_type & _S_REGS_USER and sample_type & _S_STACK_USER)

    @classmethod
    def of(cls, ev: Any, little: bool) -> UserSampleLayout:
        """From a bpfsym.perfdata.EventAttr (its sample_type, read_format and attr)."""
        a = ev.attr
        return cls(
            int(ev.sample_type),
            int(ev.read_format),
            int(a.branch_sample_type),
            int(a.sample_regs_user),
            little,
        )

    def extract(self, buf: Any, start: int, size: int) -> UserStack | None:
        """The user registers and stack of the sample at buf[start:start+size] (header
        included), or None when the event samples neither. Raises UnwindError when the
        record is shorter than its fields say."""
        if not self.wanted:
            return None
        st = self.sample_type
        end = start + size
        pos = start + 8 + self.prefix
        u64 = self.u64.unpack_from
        short = "sample of %d bytes ends inside its fields"
        try:
            if st & _S_READ:
                if self.read_format & _F_GROUP:
                    nr = u64(buf, pos)[0]
                    pos += 8 * (1 + self.read_times + self.read_per_value * nr)
                else:
                    pos += 8 * (self.read_times + self.read_per_value)
            if st & _S_CALLCHAIN:
                pos += 8 + 8 * u64(buf, pos)[0]
            if st & _S_RAW:
                pos += 4 + self.u32.unpack_from(buf, pos)[0]
            if st & _S_BRANCH_STACK:
                nr = u64(buf, pos)[0]
                pos += 8 + (8 if self.branch_sample_type & _B_HW_INDEX else 0) + 24 * nr
                if self.branch_sample_type & _B_COUNTERS:
                    pos += 8 * nr
            if pos + 8 > end:
                raise UnwindError(short % size)
            abi = u64(buf, pos)[0]
            pos += 8
            regs: dict[int, int] = {}
            if abi != REGS_ABI_NONE:
                n = self.regs_struct.size
                if pos + n + 8 > end:
                    raise UnwindError(short % size)
                regs = dict(zip(self.regnums, self.regs_struct.unpack_from(buf, pos), strict=True))
                pos += n
            if pos + 8 > end:
                raise UnwindError(short % size)
            reserved = u64(buf, pos)[0]
            pos += 8
            stack = b""
            if reserved:
                if pos + reserved + 8 > end:
                    raise UnwindError(f"user stack of {reserved} bytes runs past the sample")
                dyn = u64(buf, pos + reserved)[0]
                stack = bytes(buf[pos : pos + min(dyn, reserved)])
        except struct.error:  # an offset past the buffer: sizes that make no sense
            raise UnwindError(short % size) from None
        return UserStack(abi, regs, stack, reserved)


def regs_from_words(words: Sequence[int], mask: int) -> dict[int, int]:
    """perf register number -> value, for the words of a sample's regs in mask order."""
    nums = [i for i in range(64) if mask >> i & 1]
    if len(nums) != len(words):
        raise UnwindError(f"{len(words)} register words for a mask of {len(nums)} registers")
    return dict(zip(nums, words, strict=True))


# ---- binaries and their CFI --------------------------------------------------------

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


def _eh_frame_hdr(data: bytes, hdr_addr: int, eh_addr: int, little: bool) -> list | None:
    """The binary search table of .eh_frame_hdr as (initial location, .eh_frame offset),
    or None when it is absent or encoded in a way other than the linkers' usual
    (version 1, table DW_EH_PE_datarel|sdata4: LSB gABI, "Exception Frame Header")."""
    if len(data) < 12 or data[0] != 1 or data[3] != 0x3B:
        return None
    e = "<" if little else ">"
    ptr_enc, count_enc = data[1], data[2]
    pos = 4
    # eh_frame_ptr: skip it (we know the section); count: udata4 as ld and lld write it
    sizes = {0x03: 4, 0x0B: 4, 0x1B: 4, 0x04: 8, 0x0C: 8, 0x1C: 8}
    if ptr_enc not in sizes or count_enc != 0x03:
        return None
    pos += sizes[ptr_enc]
    if pos + 4 > len(data):
        return None
    (count,) = struct.unpack_from(e + "I", data, pos)
    pos += 4
    if pos + 8 * count > len(data):
        return None
    vals = struct.unpack_from(f"{e}{2 * count}i", data, pos)
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


DEBUG_ROOT = "/usr/lib/debug/.build-id"


def build_id_cache_path(build_id: str, root: str | None = None) -> str | None:
    """perf's copy of the ELF file with build_id ($PERF_BUILDID_DIR, else ~/.debug):
    .build-id/xx/rest links to the directory holding `elf` (or `vdso`, `debug`)."""
    if len(build_id) < 3:
        return None
    if root is None:
        root = os.environ.get("PERF_BUILDID_DIR") or os.path.join(os.path.expanduser("~"), ".debug")
    d = os.path.join(root, ".build-id", build_id[:2], build_id[2:])
    for name in ("elf", "vdso", "debug"):
        f = os.path.join(d, name)
        if os.path.isfile(f):
            return f
    return None


# ---- DWARF expressions -------------------------------------------------------------

_MASK = (1 << 64) - 1


def _uleb(b: bytes, pos: int) -> tuple[int, int]:
    val = shift = 0
    while True:
        if pos >= len(b):
            raise _Stop(UNSUPPORTED, "LEB128 runs past the expression")
        c = b[pos]
        pos += 1
        val |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return val, pos
        if shift > 70:
            raise _Stop(UNSUPPORTED, "LEB128 too long")


def _sleb(b: bytes, pos: int) -> tuple[int, int]:
    start = pos
    val, pos = _uleb(b, pos)
    bits = 7 * (pos - start)
    if b[pos - 1] & 0x40:
        val -= 1 << bits
    return val, pos


_CONST = {0x08: (1, "B"), 0x09: (1, "b"), 0x0A: (2, "H"), 0x0B: (2, "h"), 0x0C: (4, "I"),
          0x0D: (4, "i"), 0x0E: (8, "Q"), 0x0F: (8, "q")}  # fmt: skip


def _signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


# where a register's value comes from, for the memo of whole unwindings (Unwinder.unwind):
# an offset into the stack copy (>= 0), or
SRC_SAMPLE = -1  # the sample's own register: a walk that uses it is not memoized
SRC_KNOWN = -2  # fixed by the memo's key (pc, sp) and the stack words it compares


class _Frame:
    """The state of one unwinding: registers, the stack copy, and what the walk used of
    them (the stack words and registers its result depends on)."""

    __slots__ = ("regs", "src", "needed", "pure", "stack", "base", "end", "u64", "little")

    def __init__(
        self, regs: list[int | None], src: list[int], stack: bytes, base: int, little: bool
    ) -> None:
        self.regs = regs
        self.src = src  # per register: SRC_* or the stack offset its value was read from
        self.needed: set[int] = set()  # offsets of the stack words the result depends on
        self.pure = True  # the result depends on no sampled register but pc and sp
        self.stack = stack
        self.base = base
        self.end = base + len(stack)
        self.u64 = struct.Struct("<Q" if little else ">Q").unpack_from
        self.little = little

    def use(self, n: int) -> None:
        """Register n's value decides the result."""
        s = self.src[n]
        if s >= 0:
            self.needed.add(s)
        elif s == SRC_SAMPLE:
            self.pure = False

    def read(self, addr: int, size: int = 8) -> int:
        off = addr - self.base
        if 0 <= off and off + size <= len(self.stack):
            if size == 8:
                self.needed.add(off)
                return int(self.u64(self.stack, off)[0])
            self.pure = False
            return int.from_bytes(self.stack[off : off + size], "little" if self.little else "big")
        if off >= 0 and addr - self.end < (1 << 20):
            # a frame above the copy: the sample's stack size (--call-graph dwarf,SIZE) ended it
            raise _Stop(TRUNCATED, f"{len(self.stack)} bytes copied, {addr:#x} wanted")
        raise _Stop(OUTSIDE, f"{addr:#x} is outside the copy at {self.base:#x}")

    def reg(self, n: int) -> int:
        v = self.regs[n] if 0 <= n < len(self.regs) else None
        if v is None:
            raise _Stop(NO_REGISTER, f"DWARF register {n}")
        self.use(n)
        return v

    def expr(self, code: bytes, stack: list[int]) -> int:
        """Run a DWARF expression (DWARF 5 section 2.5) and give the top of its stack."""
        pos = 0
        n = len(code)
        steps = 0
        while pos < n:
            steps += 1
            if steps > MAX_EXPR_STEPS or len(stack) > 64:
                raise _Stop(UNSUPPORTED, "DWARF expression does not end")
            op = code[pos]
            pos += 1
            if 0x30 <= op <= 0x4F:  # DW_OP_lit0..31
                stack.append(op - 0x30)
            elif 0x70 <= op <= 0x8F:  # DW_OP_breg0..31
                off, pos = _sleb(code, pos)
                stack.append((self.reg(op - 0x70) + off) & _MASK)
            elif op == 0x92:  # DW_OP_bregx
                r, pos = _uleb(code, pos)
                off, pos = _sleb(code, pos)
                stack.append((self.reg(r) + off) & _MASK)
            elif op in _CONST:
                size, fmt = _CONST[op]
                if pos + size > n:
                    raise _Stop(UNSUPPORTED, "constant runs past the expression")
                e = "<" if self.little else ">"
                stack.append(struct.unpack_from(e + fmt, code, pos)[0] & _MASK)
                pos += size
            elif op == 0x10:  # DW_OP_constu
                v, pos = _uleb(code, pos)
                stack.append(v & _MASK)
            elif op == 0x11:  # DW_OP_consts
                v, pos = _sleb(code, pos)
                stack.append(v & _MASK)
            elif op == 0x23:  # DW_OP_plus_uconst
                v, pos = _uleb(code, pos)
                stack.append((self._pop(stack) + v) & _MASK)
            elif op == 0x06:  # DW_OP_deref
                stack.append(self.read(self._pop(stack)))
            elif op == 0x94:  # DW_OP_deref_size
                if pos >= n:
                    raise _Stop(UNSUPPORTED, "deref_size without a size")
                size = code[pos]
                pos += 1
                if not 1 <= size <= 8:
                    raise _Stop(UNSUPPORTED, f"deref_size {size}")
                stack.append(self.read(self._pop(stack), size))
            elif op == 0x12:  # DW_OP_dup
                stack.append(self._pick(stack, 0))
            elif op == 0x13:  # DW_OP_drop
                self._pop(stack)
            elif op == 0x14:  # DW_OP_over
                stack.append(self._pick(stack, 1))
            elif op == 0x15:  # DW_OP_pick
                if pos >= n:
                    raise _Stop(UNSUPPORTED, "pick without an index")
                stack.append(self._pick(stack, code[pos]))
                pos += 1
            elif op == 0x16:  # DW_OP_swap
                a, b = self._pop(stack), self._pop(stack)
                stack += [a, b]
            elif op == 0x17:  # DW_OP_rot
                a, b, c = self._pop(stack), self._pop(stack), self._pop(stack)
                stack += [a, c, b]
            elif op == 0x2F:  # DW_OP_skip
                if pos + 2 > n:
                    raise _Stop(UNSUPPORTED, "skip runs past the expression")
                pos += 2 + struct.unpack_from("<h" if self.little else ">h", code, pos)[0]
                if not 0 <= pos <= n:
                    raise _Stop(UNSUPPORTED, "skip out of the expression")
            elif op == 0x28:  # DW_OP_bra
                if pos + 2 > n:
                    raise _Stop(UNSUPPORTED, "bra runs past the expression")
                delta = struct.unpack_from("<h" if self.little else ">h", code, pos)[0]
                pos += 2
                if self._pop(stack):
                    pos += delta
                    if not 0 <= pos <= n:
                        raise _Stop(UNSUPPORTED, "bra out of the expression")
            elif op == 0x96:  # DW_OP_nop
                pass
            elif op in _UNARY:
                stack.append(_UNARY[op](self._pop(stack)) & _MASK)
            elif op in _BINARY:
                b, a = self._pop(stack), self._pop(stack)
                stack.append(_BINARY[op](a, b) & _MASK)
            else:
                raise _Stop(UNSUPPORTED, f"DWARF expression op {op:#x}")
        if not stack:
            raise _Stop(UNSUPPORTED, "DWARF expression leaves no value")
        return stack[-1]

    @staticmethod
    def _pop(stack: list[int]) -> int:
        if not stack:
            raise _Stop(UNSUPPORTED, "DWARF expression stack underflow")
        return stack.pop()

    @staticmethod
    def _pick(stack: list[int], i: int) -> int:
        if i >= len(stack):
            raise _Stop(UNSUPPORTED, "DWARF expression stack underflow")
        return stack[-1 - i]


def _div(a: int, b: int) -> int:
    if b == 0:
        raise _Stop(UNSUPPORTED, "division by zero in a DWARF expression")
    q = abs(_signed(a)) // abs(_signed(b))
    return q if (_signed(a) < 0) == (_signed(b) < 0) else -q


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise _Stop(UNSUPPORTED, "division by zero in a DWARF expression")
    return a % b


_UNARY: dict[int, Callable[[int], int]] = {
    0x19: lambda a: abs(_signed(a)),  # abs
    0x1F: lambda a: -a,  # neg
    0x20: lambda a: ~a,  # not
}
_BINARY: dict[int, Callable[[int, int], int]] = {
    0x1A: lambda a, b: a & b,  # and
    0x1B: _div,  # div (signed)
    0x1C: lambda a, b: a - b,  # minus
    0x1D: _mod,  # mod
    0x1E: lambda a, b: a * b,  # mul
    0x21: lambda a, b: a | b,  # or
    0x22: lambda a, b: a + b,  # plus
    0x24: lambda a, b: a << b if b < 64 else 0,  # shl
    0x25: lambda a, b: a >> b if b < 64 else 0,  # shr
    0x26: lambda a, b: _signed(a) >> min(b, 63),  # shra
    0x27: lambda a, b: a ^ b,  # xor
    0x29: lambda a, b: int(a == b),  # eq
    0x2A: lambda a, b: int(_signed(a) >= _signed(b)),  # ge
    0x2B: lambda a, b: int(_signed(a) > _signed(b)),  # gt
    0x2C: lambda a, b: int(_signed(a) <= _signed(b)),  # le
    0x2D: lambda a, b: int(_signed(a) < _signed(b)),  # lt
    0x2E: lambda a, b: int(a != b),  # ne
}


# ---- the unwinder ------------------------------------------------------------------

# the memo of whole unwindings: at most this many per maps object, and this many stack
# layouts per (pc, sp) (a function called from several places at the same depth)
MEMO_ENTRIES = 200_000
MEMO_WAYS = 8


class _Rows(dict):
    """Lookup address -> its Row or (reason, detail), for one maps object."""

    def __init__(self, maps: MapLookup) -> None:
        super().__init__()
        self.maps = maps


class _MapsState:
    """What an Unwinder keeps per maps object (valid while the maps do not change)."""

    def __init__(self, maps: MapLookup) -> None:
        self.maps = maps
        self.rows: dict[str, _Rows] = {}  # by register set
        # (pc, sp, stack length, arch) -> [(struct of the words compared, their values,
        # the result)]: a walk whose result depends only on those is not done again
        self.memo: dict[tuple, list[tuple[struct.Struct, tuple, Unwound]]] = {}
        self.entries = 0


class Unwinder:
    """Unwinds sampled user stacks; keeps every binary's CFI and decoded rows it used.

    root is prepended to mapped file names (perf's --symfs); buildid_dir is perf's
    build-id cache ($PERF_BUILDID_DIR, else ~/.debug), where perf record keeps a copy of
    every binary with samples; binaries whose file is gone, replaced (another build id)
    or never a file ([vdso]) are looked up there, then in debug_dirs (separate debug
    files, which may hold .debug_frame).
    """

    def __init__(
        self,
        max_frames: int = MAX_FRAMES,
        root: str = "",
        buildid_dir: str | None = None,
        debug_dirs: Sequence[str] = (DEBUG_ROOT,),
        little: bool = True,
    ) -> None:
        if max_frames < 1:
            raise UnwindError(f"frame limit {max_frames} < 1")
        self.max_frames = max_frames
        self.root = root
        self.buildid_dir = buildid_dir
        self.debug_dirs = tuple(debug_dirs)
        self.little = little
        self.binaries: dict[tuple[str, str], Binary | tuple[str, str]] = {}
        # per maps object: the rule of each address, and the memo of unwindings
        self._by_maps: weakref.WeakKeyDictionary[Any, _MapsState]
        self._by_maps = weakref.WeakKeyDictionary()

    def binary(self, filename: str, build_id: str) -> Binary | tuple[str, str]:
        """The CFI of a mapped file (cached), or (reason, detail)."""
        key = (filename, build_id)
        got = self.binaries.get(key)
        if got is None:
            got = self.binaries[key] = self._find(filename, build_id)
        return got

    def _find(self, filename: str, build_id: str) -> Binary | tuple[str, str]:
        first: Binary | tuple[str, str] | None = None
        if not filename.startswith("["):
            first = load_binary(self.root + filename, build_id)
            if isinstance(first, Binary):
                return first
        cands = []
        if build_id:
            cached = build_id_cache_path(build_id, self.buildid_dir)
            if cached is not None:
                cands.append(cached)
            for d in self.debug_dirs:
                cands.append(os.path.join(d, build_id[:2], build_id[2:] + ".debug"))
        for c in cands:
            if os.path.isfile(c):
                got = load_binary(c, build_id)
                if isinstance(got, Binary):
                    return got
                if first is None:
                    first = got
        if first is None:
            first = (NO_BINARY, f"{filename} (build id {build_id or 'unknown'})")
        return first

    def unwind(
        self,
        arch: str,
        regs: Mapping[int, int],
        stack: bytes,
        maps: MapLookup,
        sp: int | None = None,
        abi: int = REGS_ABI_64,
    ) -> Unwound:
        """Unwind one sample: regs by perf register number, stack the bytes copied from
        sp (default regs[SP]) up, maps the address -> mapped file lookup of the process
        at the sample's time. Never raises for bad data: it stops with a reason.

        The rule found for each address is kept per maps object (a MapList, or any
        callable that can be weakly referenced): give the same one for every sample of
        a process while its maps do not change."""
        rs = REGSETS.get(ARCH_NAMES.get(arch, arch))
        if rs is None:
            raise UnwindError(f"no DWARF unwinding for architecture {arch!r}")
        if abi == REGS_ABI_NONE or not regs:
            return Unwound((), NO_REGS)
        pc = regs.get(rs.perf_ip)
        if pc is None:
            return Unwound((), NO_REGS, "no instruction pointer among the registers")
        if abi == REGS_ABI_32:
            return Unwound((pc,), ABI_32)
        if not stack:
            return Unwound((pc,), NO_STACK)
        base = sp if sp is not None else regs.get(rs.perf_sp)
        if base is None:
            return Unwound((pc,), NO_REGS, "no stack pointer among the registers")
        state = self._state_for(maps)
        key = (pc, base, len(stack), rs.name)
        seen = state.memo.get(key)
        if seen is not None:
            for words, values, result in seen:
                if words.unpack_from(stack, 0) == values:
                    return result
        get = regs.get
        dregs = [get(p) for p in rs.perf_of_dwarf]
        src = [SRC_SAMPLE] * rs.nregs
        src[rs.sp] = SRC_KNOWN  # sp and pc are the memo's key
        if rs.ip >= 0:
            src[rs.ip] = SRC_KNOWN
        fr = _Frame(dregs, src, stack, base, self.little)
        ips = [pc]
        try:
            rows = state.rows.get(rs.name)
            if rows is None:
                rows = state.rows[rs.name] = _Rows(maps)
            self._walk(rs, fr, pc, ips, rows)
            result = Unwound(tuple(ips), None)
        except _Stop as s:
            result = Unwound(tuple(ips), s.reason, s.detail)
        if fr.pure and state.entries < MEMO_ENTRIES and (seen is None or len(seen) < MEMO_WAYS):
            # the same pc and sp with these stack words unwind the same way
            offs = sorted(fr.needed)
            fmt = ["<" if self.little else ">"]
            at = 0
            for o in offs:
                fmt.append(f"{o - at}xQ" if o > at else "Q")
                at = o + 8
            words = struct.Struct("".join(fmt))
            state.memo.setdefault(key, []).append((words, words.unpack_from(stack, 0), result))
            state.entries += 1
        return result

    def _state_for(self, maps: MapLookup) -> _MapsState:
        try:
            got = self._by_maps.get(maps)
            if got is None:
                got = self._by_maps[maps] = _MapsState(maps)
            return got
        except TypeError:  # not weakly referable: nothing kept across samples
            return _MapsState(maps)

    def _resolve(self, rs: RegSet, maps: MapLookup, addr: int) -> Row | tuple[str, str]:
        m = maps(addr)
        if m is None or not m.start <= addr < m.end:
            return (NO_MAP, f"{addr:#x}")
        b = self.binary(m.filename, m.build_id)
        if not isinstance(b, Binary):
            return b
        if b.arch != rs.name:
            return (UNSUPPORTED, f"{os.path.basename(b.path)} is for {b.arch}, not {rs.name}")
        return b.row(addr - m.start + m.pgoff)

    def _walk(self, rs: RegSet, fr: _Frame, pc: int, ips: list[int], rows: _Rows) -> None:
        exact = True  # pc is exact (the leaf, or a frame a signal interrupted)
        cfa_prev = -1
        limit = self.max_frames
        regs = fr.regs
        src = fr.src
        needed = fr.needed
        stack = fr.stack
        base = fr.base
        last = len(stack) - 8  # the last offset a u64 can be read at
        unpack = fr.u64
        ip_col = rs.ip
        sp_col = rs.sp
        mask = rs.addr_mask
        while True:
            look = pc if exact else pc - 1
            row = rows.get(look)
            if row is None:
                row = rows[look] = self._resolve(rs, rows.maps, look)
            if row.__class__ is not Row:
                raise _Stop(*row)  # type: ignore[misc]
            assert isinstance(row, Row)
            if ip_col >= 0:
                regs[ip_col] = pc
            cr = row.cfa_reg
            if cr >= 0:
                v = regs[cr]
                if v is None:
                    raise _Stop(NO_REGISTER, f"DWARF register {cr} for the CFA")
                if src[cr] != SRC_KNOWN:
                    fr.use(cr)
                cfa = (v + row.cfa_off) & _MASK
            else:
                cfa = fr.expr(row.cfa_expr, [])
            new = regs.copy()
            nsrc = src.copy()
            for r, off in row.saved:
                o = cfa + off - base
                if 0 <= o <= last:
                    new[r] = unpack(stack, o)[0]
                    nsrc[r] = o
                else:
                    fr.read((cfa + off) & _MASK)  # raises: says why it cannot
            if row.other:
                self._other(fr, row, regs, new, nsrc, cfa)
            if row.ra_undefined:
                return  # the outermost frame
            ra_col = row.ra
            ra = new[ra_col]
            if ra is None:
                raise _Stop(NO_REGISTER, f"return address column {ra_col}")
            s = nsrc[ra_col]
            if s >= 0:
                needed.add(s)
            elif s == SRC_SAMPLE:
                fr.pure = False
            if not row.sp_rule:
                new[sp_col] = cfa  # the caller's stack pointer is the CFA
                nsrc[sp_col] = SRC_KNOWN
            ra &= mask
            if ra == 0:
                return  # a zero return address ends the chain, as in libunwind
            if cfa == cfa_prev and ra == pc:
                raise _Stop(NO_PROGRESS, f"{pc:#x}, CFA {cfa:#x}")
            if len(ips) >= limit:
                raise _Stop(FRAME_LIMIT, f"{limit} frames")
            cfa_prev = cfa
            # after a signal frame the pc is where the signal interrupted: exact, not a
            # return address (libdw's "activation" frames, dwfl_frame_pc)
            exact = row.signal
            regs[:] = new
            src[:] = nsrc
            pc = ra
            ips.append(ra if exact else ra - 1)

    @staticmethod
    def _other(
        fr: _Frame, row: Row, regs: list[int | None], new: list, nsrc: list[int], cfa: int
    ) -> None:
        for r, kind, arg in row.other:
            if kind == R_REGISTER:
                new[r] = regs[arg]
                nsrc[r] = fr.src[arg]
                continue
            if kind == R_VAL_OFFSET:
                new[r] = (cfa + arg) & _MASK
            elif kind == R_UNDEFINED:
                new[r] = None
            elif kind == R_EXPRESSION:
                new[r] = fr.read(fr.expr(arg, [cfa]))  # the word read is in fr.needed
            elif kind == R_VAL_EXPRESSION:
                new[r] = fr.expr(arg, [cfa])
            else:
                raise _Stop(UNSUPPORTED, f"register rule {kind}")
            nsrc[r] = SRC_KNOWN


# ---- maps ----------------------------------------------------------------------------


@dataclass
class FileMap:
    """A mapped file (for callers without their own map type, and the tests)."""

    start: int
    end: int
    pgoff: int
    filename: str
    build_id: str = ""


class MapList:
    """A process's maps sorted by start, looked up by address (a ``maps`` for unwind)."""

    def __init__(self, maps: Sequence[MappedFile]) -> None:
        self.maps = sorted(maps, key=lambda m: m.start)
        self.starts = [m.start for m in self.maps]

    def __call__(self, addr: int) -> MappedFile | None:
        return find_map(self.maps, self.starts, addr)


def overlay(maps: Sequence[FileMap], new: FileMap) -> list[FileMap]:
    """maps with new mapped over them: what it overlaps is cut away, the rest of a map
    kept with its file offset moved along (perf's maps__fixup_overlappings)."""
    out = []
    for m in maps:
        if m.end <= new.start or m.start >= new.end:
            out.append(m)
            continue
        if m.start < new.start:
            out.append(FileMap(m.start, new.start, m.pgoff, m.filename, m.build_id))
        if m.end > new.end:
            moved = m.pgoff + (new.end - m.start)
            out.append(FileMap(new.end, m.end, moved, m.filename, m.build_id))
    out.append(new)
    out.sort(key=lambda m: m.start)
    return out


def find_map(maps: Sequence[MappedFile], starts: Sequence[int], addr: int) -> MappedFile | None:
    """The map holding addr in maps sorted by start (starts: their starts), or None."""
    i = bisect.bisect_right(starts, addr) - 1
    if i < 0:
        return None
    m = maps[i]
    return m if addr < m.end else None


# ---- a standalone pass over a perf.data --------------------------------------------


@dataclass
class UnwoundSample:
    """One sample of a file read by ``unwind_samples``."""

    pid: int
    tid: int
    time: int
    period: int
    cpumode: int  # header.misc & 7 (1 kernel, 2 user)
    ip: int
    kernel: tuple[int, ...]  # PERF_SAMPLE_CALLCHAIN without its context markers
    user: Unwound | None  # None: the event samples no user stack
    maps: MapList  # the process's maps at the sample


def unwind_samples(path: str, unwinder: Unwinder | None = None, arch: str = "") -> Any:
    """Yield an UnwoundSample for every sample of a perf.data file, in file order.

    A reference pass for tests and bench/, until bpfsym report's aggregator unwinds in
    its own (time-ordered) pass: maps are those of MMAP/MMAP2 records seen so far (in
    file order: perf writes a process's maps before its samples), build ids from the
    header's HEADER_BUILD_ID (or the MMAP2 record), the architecture from HEADER_ARCH
    unless given.
    """
    from .formats import perf as K
    from .formats import perfdata as F
    from .perfdata import PerfData

    with PerfData(path) as pd:
        if unwinder is None:
            unwinder = Unwinder(little=pd.little)
        arch = arch or pd.header.arch or X86_64
        bids = {b.filename: b.build_id for b in pd.header.build_ids}
        maps: dict[int, list[FileMap]] = {}
        lists: dict[int, MapList] = {}
        layouts: dict[int, UserSampleLayout] = {}
        at: dict[int, tuple[int, ...]] = {}  # per event: where pid, tid, time, period, ip are
        e = "<" if pd.little else ">"
        head = struct.Struct(e + "IIQQQ")  # pid, tid, addr, len, pgoff
        for rtype, misc, buf, start, size, _off in pd.records():
            if rtype in (K.RECORD_MMAP, K.RECORD_MMAP2):
                pid, _tid, addr, length, pgoff = head.unpack_from(buf, start + 8)
                name_at = start + 8 + head.size + (32 if rtype == K.RECORD_MMAP2 else 0)
                raw = bytes(buf[name_at : start + size])
                filename = raw[: raw.find(b"\0")].decode("utf-8", "replace")
                bid = bids.get(filename, "")
                if rtype == K.RECORD_MMAP2 and misc & F.MISC_MMAP_BUILD_ID:
                    n = buf[start + 8 + head.size]
                    bid = bytes(
                        buf[start + 12 + head.size : start + 12 + head.size + min(n, 20)]
                    ).hex()
                lst = maps.setdefault(pid, [])
                lst[:] = overlay(lst, FileMap(addr, addr + length, pgoff, filename, bid))
                lists.pop(pid, None)
            elif rtype == K.RECORD_COMM and misc & F.MISC_COMM_EXEC:
                pid = struct.unpack_from(e + "I", buf, start + 8)[0]
                maps.pop(pid, None)
                lists.pop(pid, None)
            elif rtype == K.RECORD_FORK:
                pid, ppid = struct.unpack_from(e + "II", buf, start + 8)
                if pid != ppid and ppid in maps and pid not in maps:
                    maps[pid] = list(maps[ppid])
            elif rtype == K.RECORD_SAMPLE:
                ev = pd.attr_of_sample(buf, start, size)
                lay = layouts.get(ev.index)
                if lay is None:
                    lay = layouts[ev.index] = UserSampleLayout.of(ev, pd.little)
                    at[ev.index] = tuple(
                        ev.fields.index(f) if f in ev.fields else -1
                        for f in ("pid", "tid", "time", "period", "ip")
                    )
                pid_i, tid_i, t_i, per_i, ip_i = at[ev.index]
                v = ev.prefix.unpack_from(buf, start + 8)
                pid = v[pid_i] if pid_i >= 0 else -1
                ml = lists.get(pid)
                if ml is None:
                    ml = lists[pid] = MapList(maps.get(pid, []))
                chain: tuple[int, ...] = ()
                if ev.sample_type & K.SAMPLE_CALLCHAIN:
                    c = pd.callchain(ev, buf, start, size)
                    if c:
                        chain = tuple([x for x in c if x < F.CONTEXT_MAX])
                us = lay.extract(buf, start, size)
                got = None
                if us is not None:
                    got = unwinder.unwind(arch, us.regs, us.stack, ml, abi=us.abi)
                yield UnwoundSample(
                    pid,
                    v[tid_i] if tid_i >= 0 else -1,
                    v[t_i] if t_i >= 0 else 0,
                    v[per_i] if per_i >= 0 else 1,
                    misc & 7,
                    v[ip_i] if ip_i >= 0 else 0,
                    chain,
                    got,
                    ml,
                )
