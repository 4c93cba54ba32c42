"""Intel PT (AUX-area) traces in a perf.data, decoded the way perf report decodes them when
it cannot read the traced code, and the samples perf synthesizes from them.

perf report decodes an AUX-area trace by default (auxtrace.c itrace_synth_opts__set_default)
and lists the events it synthesizes after the file's own (intel-pt.c intel_pt_synth_events).
Without the traced binaries (``--symfs`` an empty directory, or a file read on another
machine) every attempt to walk the code fails, and what comes out is driven by the packets
alone: a ``psb`` sample at each Packet Stream Boundary the decoder syncs on and a ``cbr``
sample where the core-to-bus ratio changes. That is what this module reproduces:

- ``packets``/``parse_packet``: the packet layer (Intel SDM vol. 3 ch. 33 "Trace packets";
  the lengths, the absorbed trailing PAD bytes and the names of perf's
  intel-pt-pkt-decoder.c, so a dump can be compared with ``perf report -D``);
- ``_Decoder``: the synchronisation and timing state machine of perf's
  intel-pt-decoder.c (PSB+/PSBEND, FUP/TIP/TIP.PGE/TIP.PGD with IP compression, TNT,
  MODE, PIP, OVF, TSC/TMA/MTC/CYC/CBR timestamps) with an instruction walker that never
  has the code: a walk at an address fails as perf's fails there (an error, or silently
  once the address's binary has failed twice: intel-pt.c intel_pt_walk_next_insn and
  dso.c's data status), and perf's decoder then scans for the next full IP;
- ``IntelPT``: perf's per-queue bookkeeping (intel-pt.c intel_pt_run_decoder,
  intel_pt_process_queues, intel_pt_set_pid_tid_cpu, context switches and ITRACE_START):
  given the report pass's records in delivery order it returns, before each record, the
  samples perf delivers before it, with perf's ip, cpumode, pid, tid, cpu and time.

Not reproduced, and said so (``IntelPT.skip_reason``): traces perf decodes differently
(snapshot or sampling mode, whose buffers overlap; TNT disabled, which forces perf's
"hop" mode; sched_switch tracepoints as the only switch information). Samples of the
other synthesized events (ptwrite, power events, transactions) are counted, not made
(``IntelPT.unsynthesized``): no corpus file has them to check them against.
Bad trace data is decoded as perf decodes it (as "bad packet" errors), never raised.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, NamedTuple

from bpfsym.errors import FormatError

U64 = (1 << 64) - 1

# ---- packets -------------------------------------------------------------

# packet kinds, in the order of perf's enum intel_pt_pkt_type
(
    BAD, PAD, TNT, TIP_PGD, TIP_PGE, TSC, TMA, MODE_EXEC, MODE_TSX, MTC, TIP, FUP, CYC,
    VMCS, PSB, PSBEND, CBR, TRACESTOP, PIP, OVF, MNT, PTWRITE, PTWRITE_IP, EXSTOP,
    EXSTOP_IP, MWAIT, PWRE, PWRX, BBP, BIP, BEP, BEP_IP, CFE, CFE_IP, EVD,
) = range(35)  # fmt: skip

# the names perf prints for them (perf report -D)
PACKET_NAMES = (
    "Bad Packet!", "PAD", "TNT", "TIP.PGD", "TIP.PGE", "TSC", "TMA", "MODE.Exec",
    "MODE.TSX", "MTC", "TIP", "FUP", "CYC", "VMCS", "PSB", "PSBEND", "CBR", "TraceSTOP",
    "PIP", "OVF", "MNT", "PTWRITE", "PTWRITE", "EXSTOP", "EXSTOP", "MWAIT", "PWRE",
    "PWRX", "BBP", "BIP", "BEP", "BEP", "CFE", "CFE", "EVD",
)  # fmt: skip

PSB_BYTES = b"\x02\x82" * 8
NEED_MORE = -1  # the packet runs past the end of the data
BAD_PACKET = -2

# block-item contexts: a BIP packet's header byte is a one-byte TNT's outside a block
NO_CTX, BLK_4_CTX, BLK_8_CTX = 0, 1, 2

# IP bytes of a TIP/FUP/TIP.PGE/TIP.PGD packet by its IPBytes field (count); None: reserved
_IP_LEN: tuple[int | None, ...] = (0, 2, 4, 6, 6, None, 8, None)

# packets after which a block item can no longer follow (perf's intel_pt_upd_pkt_ctx)
_ENDS_BLOCK = frozenset(
    (TNT, TIP, TIP_PGD, TIP_PGE, MODE_EXEC, MODE_TSX, PIP, OVF, VMCS, TRACESTOP, PSB,
     PSBEND, PTWRITE, PTWRITE_IP, MWAIT, BEP, BEP_IP, CFE, CFE_IP, EVD)
)  # fmt: skip


def _le(buf: bytes, start: int, n: int) -> int:
    return int.from_bytes(buf[start : start + n], "little")


def _ext(buf: bytes, i: int, n: int) -> tuple[int, int, int, int]:
    """An extended packet (first byte 0x02) at buf[i]: (kind, count, payload, length)."""
    if n - i < 2:
        return BAD, 0, 0, NEED_MORE
    b1 = buf[i + 1]
    left = n - i
    if b1 & 0x1F == 0x12:  # PTWRITE: payload of 4 or 8 bytes, IP bit 7
        kind = PTWRITE_IP if b1 & 0x80 else PTWRITE
        size = (b1 >> 5) & 3
        if size > 1:
            return BAD, 0, 0, BAD_PACKET
        length = 6 if size == 0 else 10
        if left < length:
            return BAD, 0, 0, NEED_MORE
        return kind, size, _le(buf, i + 2, length - 2), length
    fixed = _EXT_FIXED.get(b1)
    if fixed is not None:
        kind, length = fixed
        if left < length:
            return BAD, 0, 0, NEED_MORE
        if kind == TNT:  # long TNT: 47 bits below a stop bit in bytes 2..7
            bits = _le(buf, i + 2, 6)
            count = bits.bit_length() - 1 if bits else 0
            return TNT, count, (bits << (64 - count)) & U64 if count else 0, 8
        if kind == PIP:
            return PIP, 0, _le(buf, i + 2, 6), 8
        if kind == CBR or kind == PWRE:
            return kind, 0, _le(buf, i + 2, 2), 4
        if kind == VMCS or kind == PWRX:
            return kind, 0, _le(buf, i + 2, 5), 7
        if kind == TMA:  # CTC[15:0] in bytes 2-3, FastCounter in byte 5 and bit 0 of 6
            return TMA, buf[i + 5] | (buf[i + 6] & 1) << 8, buf[i + 2] | buf[i + 3] << 8, 7
        if kind == MWAIT:
            return MWAIT, 0, _le(buf, i + 2, 8), 10
        if kind == BBP:
            b2 = buf[i + 2]
            return BBP, b2 >> 7, b2 & 0x1F, 3
        if kind == CFE:
            b2 = buf[i + 2]
            return CFE_IP if b2 & 0x80 else CFE, b2 & 0x1F, buf[i + 3], 4
        if kind == EVD:
            return EVD, buf[i + 2] & 0x3F, _le(buf, i + 3, 8), 11
        return kind, 0, 0, length  # PSB is checked by the caller
    if b1 == 0xC3:  # 3-byte header: MNT
        if left < 3:
            return BAD, 0, 0, NEED_MORE
        if buf[i + 2] != 0x88:
            return BAD, 0, 0, BAD_PACKET
        if left < 11:
            return BAD, 0, 0, NEED_MORE
        return MNT, 0, _le(buf, i + 3, 8), 11
    return BAD, 0, 0, BAD_PACKET


# second byte of an extended packet -> (kind, length)
_EXT_FIXED = {
    0xA3: (TNT, 8), 0x43: (PIP, 8), 0x83: (TRACESTOP, 2), 0x03: (CBR, 4), 0xC8: (VMCS, 7),
    0xF3: (OVF, 2), 0x82: (PSB, 16), 0x23: (PSBEND, 2), 0x73: (TMA, 7), 0x62: (EXSTOP, 2),
    0xE2: (EXSTOP_IP, 2), 0xC2: (MWAIT, 10), 0x22: (PWRE, 4), 0xA2: (PWRX, 7),
    0x63: (BBP, 3), 0x33: (BEP, 2), 0xB3: (BEP_IP, 2), 0x13: (CFE, 4), 0x53: (EVD, 11),
}  # fmt: skip

_IP_KINDS = {0x0D: TIP, 0x11: TIP_PGE, 0x01: TIP_PGD, 0x1D: FUP}
_MODE_EXEC_BITS = (16, 64, 32, None)


def _packet(buf: bytes, i: int, n: int, ctx: int) -> tuple[int, int, int, int]:
    """The packet at buf[i] (data up to n): (kind, count, payload, length or NEED_MORE/BAD)."""
    if i >= n:
        return BAD, 0, 0, NEED_MORE
    b = buf[i]
    if ctx and b & 7 == 4:  # BIP inside a block (BBP .. BEP)
        length = 5 if ctx == BLK_4_CTX else 9
        if n - i < length:
            return BAD, 0, 0, NEED_MORE
        return BIP, b >> 3, _le(buf, i + 1, length - 1), length
    if not b & 1:
        if b == 0:
            return PAD, 0, 0, 1
        if b == 2:
            kind, count, payload, length = _ext(buf, i, n)
            if kind == PSB and buf[i : i + 16] != PSB_BYTES:
                return BAD, 0, 0, BAD_PACKET
            return kind, count, payload, length
        count = b.bit_length() - 2  # short TNT: up to 6 bits below a stop bit
        bits = (b >> 1) & ((1 << count) - 1)
        return TNT, count, (bits << (64 - count)) & U64 if count else 0, 1
    if b & 2:  # CYC: 5 bits, then 7 bits a byte while bit 0 says more follow
        payload = b >> 3
        length = 1
        more = b & 4
        shift = 5
        while more:
            if length > 9:
                return BAD, 0, 0, BAD_PACKET
            if i + length >= n:
                return BAD, 0, 0, NEED_MORE
            c = buf[i + length]
            length += 1
            payload |= (c >> 1) << shift
            shift += 7
            more = c & 1
        return CYC, 0, payload, length
    ip_kind = _IP_KINDS.get(b & 0x1F)
    if ip_kind is not None:
        count = b >> 5
        iplen = _IP_LEN[count]
        if iplen is None:
            return BAD, 0, 0, BAD_PACKET
        if n - i < iplen + 1:
            return BAD, 0, 0, NEED_MORE
        return ip_kind, count, _le(buf, i + 1, iplen) if iplen else 0, iplen + 1
    if b == 0x19:
        if n - i < 8:
            return BAD, 0, 0, NEED_MORE
        return TSC, 0, _le(buf, i + 1, 7), 8
    if b == 0x59:
        if n - i < 2:
            return BAD, 0, 0, NEED_MORE
        return MTC, 0, buf[i + 1], 2
    if b == 0x99:
        if n - i < 2:
            return BAD, 0, 0, NEED_MORE
        b1 = buf[i + 1]
        if b1 >> 5 == 0:
            width = _MODE_EXEC_BITS[b1 & 3]
            if width is None:
                return BAD, 0, 0, BAD_PACKET
            return MODE_EXEC, b1, width, 2
        if b1 >> 5 == 1 and b1 & 3 != 3:
            return MODE_TSX, 0, b1 & 3, 2
        return BAD, 0, 0, BAD_PACKET
    return BAD, 0, 0, BAD_PACKET


def parse_packet(buf: bytes, i: int, n: int, ctx: int) -> tuple[int, int, int, int, int]:
    """The packet at buf[i]: (kind, count, payload, length, ctx after it).

    length is NEED_MORE or BAD_PACKET when there is no whole valid packet. Like perf, a
    packet takes in the zero (PAD) bytes after it up to 8 bytes in all."""
    kind, count, payload, length = _packet(buf, i, n, ctx)
    if length > 0:
        while length < 8 and i + length < n and not buf[i + length]:
            length += 1
        if kind in _ENDS_BLOCK:
            ctx = NO_CTX
        elif kind == BBP:
            ctx = BLK_4_CTX if count else BLK_8_CTX
    return kind, count, payload, length, ctx


class Packet(NamedTuple):
    offset: int
    length: int
    kind: int
    cnt: int  # perf's packet.count: IPBytes, TNT bits, MODE.Exec byte, TMA's FC ...
    payload: int

    @property
    def name(self) -> str:
        return PACKET_NAMES[self.kind]


def packets(data: bytes) -> Iterator[Packet]:
    """Every packet of a trace buffer in order, as perf's dump reads it (perf report -D):
    a byte that starts no valid packet is a one-byte BAD packet."""
    i = 0
    n = len(data)
    ctx = NO_CTX
    while i < n:
        kind, count, payload, length, ctx = parse_packet(data, i, n, ctx)
        if length <= 0:
            yield Packet(i, 1, BAD, 0, 0)
            i += 1
            continue
        yield Packet(i, length, kind, count, payload)
        i += length


# ---- configuration ---------------------------------------------------------

# tools/perf/util/intel-pt.h: the order of AUXTRACE_INFO's priv[] for Intel PT
(
    PMU_TYPE, TIME_SHIFT, TIME_MULT, TIME_ZERO, CAP_USER_TIME_ZERO, TSC_BIT, NORETCOMP_BIT,
    HAVE_SCHED_SWITCH, SNAPSHOT_MODE, PER_CPU_MMAPS, MTC_BIT, MTC_FREQ_BITS, TSC_CTC_N,
    TSC_CTC_D, CYC_BIT, MAX_NONTURBO_RATIO, FILTER_STR_LEN,
) = range(17)  # fmt: skip

# intel_pt PMU config bits (arch/x86/events/intel/pt.h RTIT_CTL_*, as perf names them)
CFG_PASS_THRU = 1 << 0
CFG_BRANCH_EN = 1 << 13
CFG_TNT_DIS = 1 << 55

SAMPLE_TIME = 1 << 2
SAMPLE_AUX = 1 << 20

KERNEL_START = 1 << 63  # x86_64: perf keeps 2^63 (machine.c machine__get_kernel_start)
MISC_KERNEL, MISC_USER, MISC_GUEST_KERNEL, MISC_GUEST_USER = 1, 2, 4, 5
ITRACE_PERIOD_NS = 100_000  # perf report's default --itrace: instructions every 100 us


@dataclass
class PtConfig:
    """What perf takes from AUXTRACE_INFO and the intel_pt events' attrs."""

    pmu_type: int
    time_shift: int
    time_mult: int
    time_zero: int
    cap_user_time_zero: bool
    tsc_bit: int
    have_sched_switch: int
    snapshot_mode: bool
    per_cpu_mmaps: bool
    mtc_freq_bits: int = 0
    tsc_ctc_n: int = 0
    tsc_ctc_d: int = 0
    max_non_turbo_ratio: int = 0
    configs: list[int] = field(default_factory=list)  # the intel_pt events' attr.config
    timeless: bool = False
    sampling_mode: bool = False

    @classmethod
    def of(cls, priv: tuple[int, ...], attrs: list[Any]) -> PtConfig:
        if len(priv) <= PER_CPU_MMAPS:
            raise ValueError(f"Intel PT AUXTRACE_INFO with {len(priv)} words")
        c = cls(
            pmu_type=priv[PMU_TYPE],
            time_shift=priv[TIME_SHIFT],
            time_mult=priv[TIME_MULT],
            time_zero=priv[TIME_ZERO],
            cap_user_time_zero=bool(priv[CAP_USER_TIME_ZERO]),
            tsc_bit=priv[TSC_BIT],
            have_sched_switch=priv[HAVE_SCHED_SWITCH],
            snapshot_mode=bool(priv[SNAPSHOT_MODE]),
            per_cpu_mmaps=bool(priv[PER_CPU_MMAPS]),
        )
        if len(priv) > CYC_BIT:  # intel-pt.c intel_pt_has(): these came in later perfs
            c.mtc_freq_bits = priv[MTC_FREQ_BITS]
            c.tsc_ctc_n = priv[TSC_CTC_N]
            c.tsc_ctc_d = priv[TSC_CTC_D]
        if len(priv) > MAX_NONTURBO_RATIO:
            c.max_non_turbo_ratio = priv[MAX_NONTURBO_RATIO]
        pt = [a for a in attrs if int(a.attr.type) == c.pmu_type]
        c.configs = [int(a.attr.config) for a in pt]
        # intel_pt_timeless_decoding: no TSC, no time conversion, or an event without time
        c.timeless = (
            not c.tsc_bit
            or not c.cap_user_time_zero
            or any(not a.sample_type & SAMPLE_TIME for a in attrs)
            or any(not cfg & c.tsc_bit for cfg in c.configs)
        )
        if c.timeless and not c.time_mult:
            c.time_mult = 1
        if not c.time_mult:
            raise ValueError("AUXTRACE_INFO time multiplier 0")
        c.sampling_mode = any(
            a.sample_type & SAMPLE_AUX and int(a.attr.aux_sample_size) for a in attrs
        )
        if c.time_mult and not c.max_non_turbo_ratio:
            # "Maximum non-turbo ratio is TSC freq / 100 MHz" (intel-pt.c)
            c.max_non_turbo_ratio = (c.ns_to_ticks(1_000_000_000) + 50_000_000) // 100_000_000
        return c

    @property
    def ctl(self) -> int:
        return self.configs[0] if self.configs else 0

    @property
    def branch_enable(self) -> bool:
        return not any(cfg & CFG_PASS_THRU and not cfg & CFG_BRANCH_EN for cfg in self.configs)

    @property
    def mtc_period(self) -> int:
        bits = self.mtc_freq_bits
        if not bits or not self.configs:
            return 0
        shift = (bits & -bits).bit_length() - 1
        return (self.configs[0] & bits) >> shift

    def ns_to_ticks(self, ns: int) -> int:
        quot, rem = divmod(ns, self.time_mult)
        return (quot << self.time_shift) + (rem << self.time_shift) // self.time_mult

    def perf_time_to_tsc(self, ns: int) -> int:
        """tsc.c perf_time_to_tsc, in u64 arithmetic."""
        t = (ns - self.time_zero) & U64
        quot, rem = divmod(t, self.time_mult)
        return (
            (quot << self.time_shift) + ((rem << self.time_shift) & U64) // self.time_mult
        ) & U64

    def tsc_to_perf_time(self, cyc: int) -> int:
        """tsc.c tsc_to_perf_time, in u64 arithmetic."""
        quot = cyc >> self.time_shift
        rem = cyc & ((1 << self.time_shift) - 1)
        return (
            self.time_zero + quot * self.time_mult + ((rem * self.time_mult) >> self.time_shift)
        ) & U64


# ---- the decoder -----------------------------------------------------------

# decoder states (perf's enum intel_pt_pkt_state)
(NO_PSB, NO_IP, ERR_RESYNC, IN_SYNC, TNT_CONT, S_TNT, S_TIP, S_TIP_PGD, S_FUP, FUP_NO_TIP,
 FUP_IN_PSB) = range(11)  # fmt: skip

# states whose decode updates the sample time (intel_pt_sample_time)
_SAMPLE_TIME_STATES = frozenset((NO_PSB, NO_IP, ERR_RESYNC, IN_SYNC, TNT_CONT))

# sample types of a decoder state (enum intel_pt_sample_type)
T_BRANCH, T_INSTRUCTION, T_TRANSACTION, T_PTW = 1, 2, 4, 8
T_MWAIT, T_PWR_ENTRY, T_EX_STOP, T_PWR_EXIT = 16, 32, 64, 128
T_CBR_CHG, T_TRACE_BEGIN, T_TRACE_END, T_BLK_ITEMS = 256, 512, 1024, 2048
T_PSB_EVT, T_EVT, T_IFLAG_CHG = 4096, 8192, 16384
# the state types of events this module counts but does not synthesize
UNSYNTHESIZED = {
    T_TRANSACTION: "transactions", T_PTW: "ptwrite", T_MWAIT: "mwait", T_PWR_ENTRY: "pwre",
    T_EX_STOP: "exstop", T_PWR_EXIT: "pwrx", T_EVT: "evt",
}  # fmt: skip

IN_TX, ABORT_TX, ASYNC, FUP_IP = 1, 2, 4, 8
IFLAG = 4  # MODE.Exec's IF bit

# internal results (errno values perf's decoder uses)
OK = 0
EAGAIN = -11
ENOLINK = -67
EILSEQ = -84  # the instruction could not be got
ENOENT = -2  # the trace does not match
EOVERFLOW = -75
EBADMSG = -74
ENODATA = -61
ENOSYS = -38

# INTEL_PT_ERR_* codes (perf script prints them as "code N")
ERR_CODES = {ENOSYS: 2, EBADMSG: 3, ENODATA: 4, EILSEQ: 5, ENOENT: 6, EOVERFLOW: 7}
ERR_NODATA = 4
ERR_UNKNOWN = 9
MAX_EVDS = 64


@dataclass
class _CycToTsc:
    """What the CYC-to-TSC lookahead carries from packet to packet."""

    last_mtc: int
    ctc_delta: int
    timestamp: int
    fixup: bool
    cycle_cnt: int = 0
    cbr: int = 0
    cbr_cyc_to_tsc: float = 0.0


class State:
    """One decoder state handed to the queue (perf's struct intel_pt_state)."""

    __slots__ = (
        "type", "flags", "err", "from_ip", "to_ip", "from_nr", "to_nr", "timestamp",
        "est_timestamp", "cbr", "cbr_payload", "psb_offset",
    )  # fmt: skip

    def __init__(self) -> None:
        self.type = 0
        self.flags = 0
        self.err = 0
        self.from_ip = 0
        self.to_ip = 0
        self.from_nr = False
        self.to_nr = False
        self.timestamp = 0
        self.est_timestamp = 0
        self.cbr = 0
        self.cbr_payload = 0
        self.psb_offset = 0


class Buffer(NamedTuple):
    data: bytes
    reference: int  # the AUXTRACE record's reference: the TSC when perf record read it


@dataclass
class DecoderParams:
    branch_enable: bool = True
    max_non_turbo_ratio: int = 0
    mtc_period: int = 0
    tsc_ctc_n: int = 0
    tsc_ctc_d: int = 0
    period_ticks: int = 0  # instruction sampling period in TSC ticks (0: none)


def _multdiv(t: int, n: int, d: int) -> int:
    if not d:
        return 0
    return ((t // d) * n + ((t % d) * n) // d) & U64


def _calc_ip(count: int, payload: int, last_ip: int) -> int:
    """The IP of a TIP/FUP packet given the last one (IP compression)."""
    if count == 1:
        return (last_ip & 0xFFFFFFFFFFFF0000) | payload
    if count == 2:
        return (last_ip & 0xFFFFFFFF00000000) | payload
    if count == 3:
        return payload | 0xFFFF000000000000 if payload & 0x800000000000 else payload
    if count == 4:
        return (last_ip & 0xFFFF000000000000) | payload
    if count == 6:
        return payload
    return 0


class _Decoder:
    """perf's packet-driven decoder for one queue, with a code walker that has no code.

    walk_fails(ip) says how a walk starting at ip fails: True an error perf reports,
    False the silent retry perf makes once the binary there has failed before."""

    def __init__(
        self, params: DecoderParams, buffers: Callable[[], Buffer | None],
        walk_fails: Callable[[int], bool],
    ) -> None:  # fmt: skip
        self.next_buffer = buffers
        self.walk_fails = walk_fails
        self.branch_enable = params.branch_enable
        self.mnt = params.max_non_turbo_ratio
        self.mtc_shift = params.mtc_period
        self.ctc_rem_mask = (1 << self.mtc_shift) - 1
        self.tsc_ctc_n = params.tsc_ctc_n
        self.tsc_ctc_d = params.tsc_ctc_d if params.tsc_ctc_n else 0
        self.tsc_ctc_mult = 0
        if self.tsc_ctc_d and not self.tsc_ctc_n % self.tsc_ctc_d:
            self.tsc_ctc_mult = self.tsc_ctc_n // self.tsc_ctc_d
        self.tsc_slip = 0x10000  # how far a TSC may slip back past MTCs
        if params.period_ticks:
            p = 1 << (params.period_ticks.bit_length() - 1)
            self.period_ticks = p
            self.period_mask = ~(p - 1) & U64
        else:
            self.period_ticks = 0
            self.period_mask = 0
        self.continuous_period = False
        self.last_masked_timestamp = 0
        self.state = State()
        # the data: buf[at:end] is what is left of the current buffer
        self.buf = b""
        self.at = 0
        self.end = 0
        self.pending: tuple[bytes, int, int] | None = None  # next_buf of a split PSB
        self.started = False
        self.pos = 0
        self.step = 0
        self.ctx = NO_CTX
        self.kind = PAD
        self.count = 0
        self.payload = 0
        self.last_packet_type = PAD
        self.pkt_state = NO_PSB
        self.ip = 0
        self.last_ip = 0
        self.have_last_ip = False
        self.psb_ip = 0
        self.pge = False
        self.in_psb = False
        self.pip_payload = 0
        self.nr = False
        self.next_nr = False
        self.iflag = False
        self.next_iflag = False
        self.tx_flags = 0
        self.overflow = False
        self.fup_tx_flags = 0
        self.set_fup_tx_flags = False
        self.set_fup_ptw = False
        self.set_fup_mwait = False
        self.set_fup_pwre = False
        self.set_fup_exstop = False
        self.set_fup_bep = False
        self.set_fup_cfe_ip = False
        self.set_fup_cfe = False
        self.set_fup_mode_exec = False
        self.evd_cnt = 0
        self.tnt_count = 0
        # timing
        self.timestamp = 0
        self.tsc_timestamp = 0
        self.ref_timestamp = 0
        self.buf_timestamp = 0
        self.sample_timestamp = 0
        self.ctc_timestamp = 0
        self.ctc_delta = 0
        self.last_mtc = 0
        self.last_ctc = 0
        self.have_tma = False
        self.fixup_last_mtc = False
        self.cycle_cnt = 0
        self.cyc_ref_timestamp = 0
        self.have_calc_cyc_to_tsc = False
        self.calc_cyc_to_tsc = 0.0
        self.cbr = 0
        self.cbr_seen = 0
        self.cbr_payload = 0
        self.cbr_cyc_to_tsc = 0.0

    # -- data and packets --

    def _get_data(self) -> int:
        """The next buffer (intel_pt_get_data): ENOLINK when it does not continue the last."""
        self.step = 0
        if self.pending is not None:
            self.buf, self.at, self.end = self.pending
            self.pending = None
            return OK
        b = self.next_buffer()
        if b is None or not b.data:
            return ENODATA
        self.buf, self.at, self.end = b.data, 0, len(b.data)
        self.buf_timestamp = b.reference
        if not self.started:  # only the first buffer is not consecutive (no snapshots)
            self.started = True
            self.ip = 0
            self.pkt_state = NO_PSB
            self.timestamp = 0
            self.have_tma = False
            self.ref_timestamp = b.reference
            return ENOLINK
        return OK

    def _next_packet(self) -> int:
        """Move to the next packet that is not PAD (intel_pt_get_next_packet)."""
        self.last_packet_type = self.kind
        while True:
            self.pos += self.step
            self.at += self.step
            if self.at >= self.end:
                err = self._get_data()
                if err:
                    return err
            kind, count, payload, length, self.ctx = parse_packet(
                self.buf, self.at, self.end, self.ctx
            )
            if length <= 0:  # also a packet cut by the end of a buffer (64-bit perf)
                self.tx_flags = 0
                self.have_tma = False
                self.kind, self.count, self.payload = BAD, 0, 0
                self.step = 1
                return EBADMSG  # the state stays (non-strict perf)
            self.kind, self.count, self.payload = kind, count, payload
            self.step = length
            if kind != PAD:
                return OK

    def _lookahead(self, cb: Callable[[int, int, int, int], bool]) -> None:
        """Show cb (kind, count, payload, last kind) the packets after this one in the
        current buffer until it returns True (intel_pt_pkt_lookahead)."""
        buf, i, n, ctx = self.buf, self.at + self.step, self.end, self.ctx
        last = self.last_packet_type
        while i < n:
            kind, count, payload, length, ctx = parse_packet(buf, i, n, ctx)
            if length <= 0:
                return
            i += length
            if kind == PAD:
                continue
            if cb(kind, count, payload, last):
                return
            last = kind

    def _scan_for_psb(self) -> int:
        while True:
            if self.at >= self.end:
                err = self._get_data()
                if err:
                    return err
            j = self.buf.find(PSB_BYTES, self.at, self.end)
            if j < 0:
                part = self._part_psb()
                if part:
                    err = self._split_psb(part)
                    if err:
                        return err
                else:
                    self.pos += self.end - self.at
                    self.at = self.end
                continue
            self.step = j - self.at
            return self._next_packet()

    def _part_psb(self) -> int:
        """How many bytes at the end of the buffer start a PSB."""
        left = self.end - self.at
        for k in range(len(PSB_BYTES) - 1, 0, -1):
            if k <= left and self.buf[self.end - k : self.end] == PSB_BYTES[:k]:
                return k
        return 0

    def _split_psb(self, part: int) -> int:
        """A PSB split between two buffers, made whole (intel_pt_get_split_psb)."""
        self.pos += self.end - self.at
        self.at = self.end
        err = self._get_data()
        if err:
            return err
        rest = len(PSB_BYTES) - part
        if self.end - self.at < rest or self.buf[self.at : self.at + rest] != PSB_BYTES[part:]:
            return OK
        self.pos -= part
        self.pending = (self.buf, self.at + rest, self.end)
        self.buf, self.at, self.end = PSB_BYTES, 0, len(PSB_BYTES)
        return OK

    # -- IPs, flags --

    def _set_last_ip(self) -> None:
        self.last_ip = _calc_ip(self.count, self.payload, self.last_ip)
        self.have_last_ip = True

    def _set_ip(self) -> None:
        self._set_last_ip()
        self.ip = self.last_ip

    def _have_ip(self) -> bool:
        c = self.count
        return bool(c) and (self.have_last_ip or c == 3 or c == 6)

    def _set_pip(self) -> None:
        self.pip_payload = self.payload
        self.nr = bool(self.pip_payload & 1)
        self.next_nr = self.nr

    def _set_nr(self) -> None:
        self.nr = bool(self.pip_payload & 1)
        self.next_nr = self.nr

    def _update_nr(self) -> None:
        self.next_nr = bool(self.pip_payload & 1)

    def _mode_exec_status(self) -> None:
        iflag = bool(self.count & IFLAG)
        self.iflag = self.next_iflag = iflag

    def _sample_iflag(self) -> None:
        self.state.type |= T_IFLAG_CHG
        self.iflag = self.next_iflag

    def _sample_iflag_chg(self) -> None:
        if self.iflag != self.next_iflag:
            self._sample_iflag()

    def _clear_fup_event(self) -> None:
        self.set_fup_tx_flags = self.set_fup_ptw = self.set_fup_mwait = False
        self.set_fup_pwre = self.set_fup_exstop = self.set_fup_bep = False
        self.set_fup_cfe_ip = self.set_fup_cfe = self.set_fup_mode_exec = False
        self.evd_cnt = 0
        self.iflag = self.next_iflag

    # -- timing --

    def _tsc(self) -> None:
        self.have_tma = False
        if self.ref_timestamp:
            ts = self.payload | (self.ref_timestamp & (0xFF << 56))
            ref = self.ref_timestamp
            if ts < ref:
                if ref - ts > 1 << 55:
                    ts += 1 << 56
            elif ts - ref > 1 << 55:
                ts -= 1 << 56
            self.tsc_timestamp = self.timestamp = ts
            self.ref_timestamp = 0
        elif self.timestamp:
            ts = self.payload | (self.timestamp & (0xFF << 56))
            self.tsc_timestamp = ts
            if ts < self.timestamp and self.timestamp - ts < self.tsc_slip:
                ts = self.timestamp  # a TSC slipped back past MTCs
            if ts < self.timestamp:
                if not self.buf_timestamp or ts + (1 << 56) < self.buf_timestamp:
                    ts += 1 << 56  # wrapped around
                    self.tsc_timestamp = ts
                else:
                    ts = self.timestamp  # a bad timestamp
            self.timestamp = ts
        if self.last_packet_type == CYC:
            self.cyc_ref_timestamp = self.timestamp
            self.cycle_cnt = 0
            self.have_calc_cyc_to_tsc = False

    def _tma(self) -> None:
        if not self.tsc_ctc_d:
            return
        ctc, fc = self.payload, self.count
        rem = ctc & self.ctc_rem_mask
        self.last_mtc = (ctc >> self.mtc_shift) & 0xFF
        self.last_ctc = ctc - rem
        ts = self.tsc_timestamp - fc
        if self.tsc_ctc_mult:
            ts -= rem * self.tsc_ctc_mult
        else:
            ts -= _multdiv(rem, self.tsc_ctc_n, self.tsc_ctc_d)
        self.ctc_timestamp = ts & U64
        self.ctc_delta = 0
        self.have_tma = True
        self.fixup_last_mtc = True

    def _ctc_ts(self, ctc_timestamp: int, ctc_delta: int) -> int:
        if self.tsc_ctc_mult:
            return (ctc_timestamp + ctc_delta * self.tsc_ctc_mult) & U64
        return (ctc_timestamp + _multdiv(ctc_delta, self.tsc_ctc_n, self.tsc_ctc_d)) & U64

    def _fixup_last_mtc(self, mtc: int, last_mtc: int) -> int:
        """TMA gives CTC bits 15:0 only: the MTC bits above them, taken from this MTC."""
        first_missing = 1 << (16 - self.mtc_shift)
        last_mtc |= mtc & ~(first_missing - 1) & 0xFFFFFFFF
        if last_mtc >= mtc:
            last_mtc = (last_mtc - first_missing) & 0xFF
        return last_mtc

    def _mtc(self) -> None:
        if not self.have_tma:
            return
        mtc = self.payload
        if self.mtc_shift > 8 and self.fixup_last_mtc:
            self.fixup_last_mtc = False
            self.last_mtc = self._fixup_last_mtc(mtc, self.last_mtc)
        delta = mtc - self.last_mtc if mtc > self.last_mtc else mtc + 256 - self.last_mtc
        self.ctc_delta += (delta << self.mtc_shift) & 0xFFFFFFFF
        ts = self._ctc_ts(self.ctc_timestamp, self.ctc_delta)
        if ts >= self.timestamp:
            self.timestamp = ts
        self.last_mtc = mtc
        if self.last_packet_type == CYC:
            self.cyc_ref_timestamp = self.timestamp
            self.cycle_cnt = 0
            self.have_calc_cyc_to_tsc = False
            self._calc_cyc_to_tsc()

    def _calc_cyc_to_tsc(self) -> None:
        """TSC ticks per CPU cycle from the CYCs up to the next MTC (intel_pt_calc_cyc_cb)."""
        d = _CycToTsc(self.last_mtc, self.ctc_delta, self.timestamp, self.fixup_last_mtc)

        def cb(kind: int, count: int, payload: int, last: int) -> bool:
            if kind in _CYC_IGNORED:
                return False
            if kind == CYC:
                d.cycle_cnt += payload
                return False
            if kind == CBR:
                if d.cbr and d.cbr != payload:
                    return True
                d.cbr = payload
                d.cbr_cyc_to_tsc = self.mnt / payload if payload else float("inf")
                return False
            if kind != MTC:
                return True
            if not self.have_tma:
                return False
            if self.mtc_shift > 8 and d.fixup:
                d.fixup = False
                d.last_mtc = self._fixup_last_mtc(payload, d.last_mtc)
            lm = d.last_mtc
            delta = payload - lm if payload > lm else payload + 256 - lm
            d.ctc_delta += (delta << self.mtc_shift) & 0xFFFFFFFF
            d.last_mtc = payload
            ts = self._ctc_ts(self.ctc_timestamp, d.ctc_delta)
            if ts < d.timestamp:
                return True
            if last != CYC:
                d.timestamp = ts
                return False
            if not d.cbr and self.cbr:
                d.cbr = self.cbr
                d.cbr_cyc_to_tsc = self.cbr_cyc_to_tsc
            if not d.cycle_cnt:
                return True
            ratio = ((ts - self.timestamp) & U64) / d.cycle_cnt
            base = d.cbr_cyc_to_tsc
            if d.cbr and ratio > base and ratio / base > 1.25:
                return True  # "too big (c.f. CBR-based value)"
            self.calc_cyc_to_tsc = ratio
            self.have_calc_cyc_to_tsc = True
            return True

        self._lookahead(cb)

    def _cbr(self) -> None:
        cbr = self.payload & 0xFF
        self.cbr_payload = self.payload
        if self.cbr == cbr:
            return
        self.cbr = cbr
        self.cbr_cyc_to_tsc = self.mnt / cbr if cbr else float("inf")
        self.cyc_ref_timestamp = self.timestamp
        self.cycle_cnt = 0

    def _cyc(self) -> None:
        self.cycle_cnt += self.payload
        if not self.cyc_ref_timestamp:
            return
        if self.have_calc_cyc_to_tsc:
            ts = int(self.cyc_ref_timestamp + self.cycle_cnt * self.calc_cyc_to_tsc)
        elif self.cbr:
            ts = int(self.cyc_ref_timestamp + self.cycle_cnt * self.cbr_cyc_to_tsc)
        else:
            return
        if ts >= self.timestamp:
            self.timestamp = ts & U64

    def _timing(self, kind: int) -> bool:
        """Take in a timing packet; False when kind is none."""
        if kind == MTC:
            self._mtc()
        elif kind == TSC:
            self._tsc()
        elif kind == TMA:
            self._tma()
        elif kind == CYC:
            self._cyc()
        elif kind == CBR:
            self._cbr()
        else:
            return False
        return True

    def _next_period(self) -> int:
        """Instructions left to the next instruction sample (intel_pt_next_period)."""
        ts = self.timestamp
        masked = ts & self.period_mask
        if self.continuous_period:
            if masked > self.last_masked_timestamp:
                return 1
        else:
            ts += 1
            masked = ts & self.period_mask
            if masked > self.last_masked_timestamp:
                self.last_masked_timestamp = masked
                self.continuous_period = True
        if masked < self.last_masked_timestamp:
            return self.period_ticks
        return self.period_ticks - (ts - masked)

    # -- the walker that has no code --

    def _walk(self, to_ip: int) -> int:
        """intel_pt_walk_insn with nothing to read: at to_ip already, or a failure."""
        if self.period_ticks:
            self._next_period()
        if to_ip and self.ip == to_ip:
            return EAGAIN
        self.pkt_state = NO_IP
        return EILSEQ if self.walk_fails(self.ip) else ENOLINK

    # -- the walks of perf's decoder --

    def _overflow(self) -> int:
        self.tx_flags = 0
        self._set_nr()
        self.pkt_state = IN_SYNC
        self.state.from_ip = self.ip
        self.ip = 0
        self.pge = False
        self._clear_fup_event()
        self.overflow = True
        return EOVERFLOW

    def _fup_event(self, no_tip: bool) -> bool:
        s = self.state
        saved = s.type
        ret = False
        s.type &= ~T_BRANCH
        if self.set_fup_cfe_ip or self.set_fup_cfe:
            ip = self.set_fup_cfe_ip
            self.set_fup_cfe_ip = self.set_fup_cfe = False
            s.type |= T_EVT
            if not ip and self.pge:
                s.type |= T_BRANCH
            self.evd_cnt = 0
            if ip or self.pge:
                s.flags |= FUP_IP
            ret = True
        sample_fup_insn = False
        if self.set_fup_mode_exec:
            self.set_fup_mode_exec = False
            self._sample_iflag()
            sample_fup_insn = no_tip
            ret = True
        if self.set_fup_tx_flags:
            self.set_fup_tx_flags = False
            self.tx_flags = self.fup_tx_flags
            s.type |= T_TRANSACTION
            if self.fup_tx_flags & ABORT_TX:
                s.type |= T_BRANCH
            s.flags = self.fup_tx_flags
            ret = True
        if self.set_fup_ptw:
            self.set_fup_ptw = False
            s.type |= T_PTW
            s.flags |= FUP_IP
            ret = True
        if self.set_fup_mwait:
            self.set_fup_mwait = False
            s.type |= T_MWAIT
            ret = True
        if self.set_fup_pwre:
            self.set_fup_pwre = False
            s.type |= T_PWR_ENTRY
            ret = True
        if self.set_fup_exstop:
            self.set_fup_exstop = False
            s.type |= T_EX_STOP
            s.flags |= FUP_IP
            ret = True
        if self.set_fup_bep:
            self.set_fup_bep = False
            s.type |= T_BLK_ITEMS
            ret = True
        if self.overflow:
            self.overflow = False
            if not ret and not self.pge:
                self.pge = True
                s.type |= T_BRANCH | T_TRACE_BEGIN
                s.from_ip = 0
                s.to_ip = self.ip
                return True
        if ret:
            s.from_ip = self.ip
            s.to_ip = 0
            if sample_fup_insn:
                self._sample_fup_insn()
        else:
            s.type = saved
        return ret

    def _sample_fup_insn(self) -> None:
        """intel_pt_sample_fup_insn: one instruction walked for an instruction sample. It
        fails without the code (the error is ignored), but the binary's failure counts."""
        if not self.branch_enable or not self.pge or self.ip != self.last_ip:
            return
        if not self.period_ticks or self._next_period() != 1:
            return
        self.walk_fails(self.ip)

    def _walk_fup(self) -> int:
        err = self._walk(self.last_ip)
        if err == EAGAIN:
            no_tip = self.pkt_state != S_FUP
            self.pkt_state = IN_SYNC
            if self._fup_event(no_tip) and no_tip:
                return OK
            return EAGAIN
        self.set_fup_tx_flags = False
        return err

    def _walk_fup_tip(self) -> int:
        s = self.state
        if self.tx_flags & ABORT_TX:
            self.tx_flags = 0
            s.flags = (s.flags & ~IN_TX) | ABORT_TX
        else:
            s.flags |= ASYNC
        while True:
            err = self._next_packet()
            if err:
                return err
            k = self.kind
            if k == CBR:
                self._cbr()
            elif k == OVF:
                return self._overflow()
            elif k == TIP_PGD or k == TIP:
                s.from_ip = self.ip
                if self.count == 0:
                    s.to_ip = 0
                else:
                    self._set_ip()
                    s.to_ip = self.ip
                if k == TIP_PGD:
                    self.pge = False
                    self.continuous_period = False
                    s.type |= T_TRACE_END
                    self._update_nr()
                else:
                    self._update_nr()
                    self._sample_iflag_chg()
                return OK
            elif k == TIP_PGE:
                self.pge = True
                s.from_ip = 0
                if self.count == 0:
                    s.to_ip = 0
                else:
                    self._set_ip()
                    s.to_ip = self.ip
                s.type |= T_TRACE_BEGIN
                self._set_nr()
                return OK
            elif k == PIP:
                self.pip_payload = self.payload
            elif k == MTC:
                self._mtc()
            elif k == CYC:
                self._cyc()
            elif k == MODE_EXEC:
                self.next_iflag = bool(self.count & IFLAG)
            elif k in (VMCS, MNT, PAD):
                pass
            else:  # "Missing TIP after FUP": read this packet again in sync
                self.pkt_state = ERR_RESYNC
                self.step = 0
                return ENOENT

    def _walk_psbend(self) -> int:
        """The packets of a PSB+ when in sync, to PSBEND (intel_pt_walk_psbend)."""
        self.in_psb = True
        try:
            while True:
                err = self._next_packet()
                if err:
                    return err
                k = self.kind
                if k == PSBEND:
                    return OK
                if k in _UNEXPECTED_IN_PSB:
                    self.have_tma = False
                    return EAGAIN
                if k == OVF:
                    return self._overflow()
                if self._timing(k):
                    continue
                if k == MODE_EXEC:
                    self._mode_exec_status()
                elif k == PIP:
                    self._set_pip()
                elif k == FUP:
                    self.pge = True
                    if self.count:
                        self._set_last_ip()
                        self.psb_ip = self.last_ip
                elif k == MODE_TSX:
                    self.tx_flags = self.payload & IN_TX
        finally:
            self.in_psb = False

    def _psb(self) -> int:
        self.last_ip = 0
        self.psb_ip = 0
        self.have_last_ip = True
        err = self._walk_psbend()
        if err:
            return err
        s = self.state
        s.type = T_PSB_EVT
        s.from_ip = self.psb_ip
        s.to_ip = 0
        return OK

    def _fup_in_psb(self) -> int:
        if self.ip != self.last_ip:
            err = self._walk_fup()
            if err != EAGAIN:
                return err
        self.pkt_state = IN_SYNC
        if self._psb():
            self.pkt_state = ERR_RESYNC
            return ENOENT
        return OK

    def _psb_with_fup(self) -> int | None:
        """A PSB+ with a FUP (and no TIP.PGE after it): its FUP first (intel_pt_psb_with_fup)."""
        if not self.branch_enable:
            return None
        found: list[tuple[int, int]] = []
        after = [0]

        def cb(kind: int, count: int, payload: int, last: int) -> bool:
            if kind in _PSB_PLAIN:
                if after[0]:
                    after[0] -= 1
                    return not after[0]
                return False
            if kind == FUP:
                if after[0] or found or count == 0:
                    return True
                found.append((count, payload))
                return False
            if kind == PSBEND:
                if not found:
                    return True
                after[0] = 6  # keep going to see a TIP.PGE
                return False
            if kind == TIP_PGE:
                if after[0]:
                    found.clear()  # a FUP in PSB+ followed by TIP.PGE is ignored
                return True
            if kind in _PSB_EVENTS and after[0]:
                after[0] -= 1
                return not after[0]
            return True

        self._lookahead(cb)
        if not found:
            return None
        self.kind = FUP
        self.count, self.payload = found[0]
        self._set_last_ip()
        self.pkt_state = FUP_IN_PSB
        return self._fup_in_psb()

    def _walk_trace(self) -> int:
        no_tip = False
        fetch = True
        s = self.state
        while True:
            if fetch:
                err = self._next_packet()
                if err:
                    return err
            fetch = True
            k = self.kind
            if k == TNT:
                if not self.count:
                    continue
                self.tnt_count = self.count
                self.pkt_state = S_TNT
                return self._walk(0)
            if k == TIP_PGD:
                if self.count:
                    self._set_last_ip()
                self.pkt_state = S_TIP_PGD
                return self._walk(0)
            if k == TIP_PGE:
                self.pge = True
                self.overflow = False
                self._set_nr()
                if self.count == 0:
                    continue
                self._sample_iflag_chg()
                self._set_ip()
                s.from_ip = 0
                s.to_ip = self.ip
                s.type |= T_TRACE_BEGIN
                return OK
            if k == OVF:
                return self._overflow()
            if k == TIP:
                if self.count:
                    self._set_last_ip()
                self.pkt_state = S_TIP
                return self._walk(0)
            if k == FUP:
                if self.count == 0:
                    no_tip = False
                    continue
                self._set_last_ip()
                if not self.branch_enable or not self.pge:
                    self.ip = self.last_ip
                    if self._fup_event(no_tip):
                        return OK
                    no_tip = False
                    continue
                if self.set_fup_mwait:
                    no_tip = True
                self.pkt_state = FUP_NO_TIP if no_tip else S_FUP
                err = self._walk_fup()
                if err != EAGAIN:
                    return err
                if no_tip:
                    no_tip = False
                    continue
                return self._walk_fup_tip()
            if k == TRACESTOP:
                self.pge = False
                self.continuous_period = False
                self.tx_flags = 0
                self.have_tma = False
                continue
            if k == PSB:
                s.psb_offset = self.pos
                self.psb_ip = 0
                with_fup = self._psb_with_fup()
                if with_fup is not None:
                    return with_fup
                err = self._psb()
                if err == EAGAIN:
                    fetch = False
                    continue
                return err
            if k == PIP:
                self.pip_payload = self.payload
                continue
            if k == CBR:
                self._cbr()
                if self.cbr != self.cbr_seen:
                    s.type = 0
                    return OK
                continue
            if self._timing(k):
                continue
            if k == MODE_EXEC:
                self.next_iflag = bool(self.count & IFLAG)
                err = self._next_packet()
                if err:
                    return err
                if self.kind == FUP:
                    self.set_fup_mode_exec = True
                    no_tip = True
                fetch = False
                continue
            if k == MODE_TSX:
                if not self.pge or self.in_psb:
                    self.tx_flags = self.payload & IN_TX
                    continue
                flags = self.payload & (IN_TX | ABORT_TX)
                err = self._next_packet()
                if err:
                    return err
                if self.kind == FUP:
                    self.fup_tx_flags = flags
                    self.set_fup_tx_flags = True
                    if not flags & ABORT_TX:
                        no_tip = True
                else:  # "Missing FUP after MODE.TSX": perf takes IN_TX of this packet
                    self.tx_flags = self.payload & IN_TX
                fetch = False
                continue
            if k == BAD:
                self.pkt_state = NO_PSB
                return ENOSYS
            if k in (PSBEND, VMCS, MNT, PAD, BBP, BIP):
                continue
            if k in (PTWRITE_IP, EXSTOP_IP, BEP_IP, CFE_IP):
                err = self._next_packet()
                if err:
                    return err
                if self.kind == FUP:
                    if k == PTWRITE_IP:
                        self.set_fup_ptw = True
                    elif k == EXSTOP_IP:
                        self.set_fup_exstop = True
                    elif k == BEP_IP:
                        self.set_fup_bep = True
                    else:
                        self.set_fup_cfe_ip = True
                    no_tip = True
                fetch = False
                continue
            if k in (PTWRITE, EXSTOP, PWRX, BEP):
                s.type = {PTWRITE: T_PTW, EXSTOP: T_EX_STOP, PWRX: T_PWR_EXIT, BEP: T_BLK_ITEMS}[k]
                s.from_ip = self.ip
                s.to_ip = 0
                return OK
            if k == MWAIT:
                self.set_fup_mwait = True
                continue
            if k == PWRE:
                if self.set_fup_mwait:
                    self.set_fup_pwre = True
                    continue
                s.type = T_PWR_ENTRY
                s.from_ip = self.ip
                s.to_ip = 0
                return OK
            if k == CFE:
                self.set_fup_cfe = True
                if not self.pge:
                    self._fup_event(True)
                    return OK
                continue
            if k == EVD:
                if self.evd_cnt >= MAX_EVDS:
                    return ENOSYS
                self.evd_cnt += 1
                continue
            self.pkt_state = NO_PSB
            return ENOSYS

    def _walk_psb(self) -> int:
        """The packets of a PSB+ to get in sync (intel_pt_walk_psb)."""
        self.in_psb = True
        try:
            while True:
                err = self._next_packet()
                if err:
                    return err
                k = self.kind
                if k == TIP_PGD:
                    self.continuous_period = False
                if k in _UNEXPECTED_SYNCING:
                    return ENOENT
                if k == FUP:
                    self.pge = True
                    if self._have_ip():
                        self._set_ip()
                        self.psb_ip = self.ip
                    continue
                if self._timing(k):
                    continue
                if k == PIP:
                    self._set_pip()
                elif k == MODE_EXEC:
                    self._mode_exec_status()
                elif k == MODE_TSX:
                    self.tx_flags = self.payload & IN_TX
                elif k == TRACESTOP or k == TNT:
                    if k == TRACESTOP:
                        self.pge = False
                        self.continuous_period = False
                        self.tx_flags = 0
                    self.have_tma = False
                    self.pkt_state = IN_SYNC if self.ip else ERR_RESYNC
                    return ENOENT
                elif k == BAD:
                    self.pkt_state = NO_PSB
                    return ENOSYS
                elif k == OVF:
                    return self._overflow()
                elif k == PSBEND:
                    return OK
        finally:
            self.in_psb = False

    def _walk_to_ip(self) -> int:
        """Packets up to one that gives a full IP (intel_pt_walk_to_ip)."""
        s = self.state
        while True:
            err = self._next_packet()
            if err:
                return err
            k = self.kind
            if k == TIP_PGD:
                self.continuous_period = False
                self.pge = False
                if self._have_ip():
                    self._set_ip()
                if not self.ip:
                    continue
                s.type |= T_TRACE_END
                return OK
            if k == TIP_PGE or k == TIP:
                self.pge = True
                if self._have_ip():
                    self._set_ip()
                if not self.ip:
                    continue
                if k == TIP_PGE:
                    s.type |= T_TRACE_BEGIN
                return OK
            if k == FUP:
                if self._have_ip():
                    self._set_ip()
                if self.ip:
                    return OK
                continue
            if self._timing(k):
                continue
            if k == PIP:
                self._set_pip()
            elif k == MODE_EXEC:
                self._mode_exec_status()
            elif k == MODE_TSX:
                self.tx_flags = self.payload & IN_TX
            elif k == OVF:
                return self._overflow()
            elif k == BAD:
                self.pkt_state = NO_PSB
                return ENOSYS
            elif k == TRACESTOP:
                self.pge = False
                self.continuous_period = False
                self.tx_flags = 0
                self.have_tma = False
            elif k == PSB:
                s.psb_offset = self.pos
                self.psb_ip = 0
                self.last_ip = 0
                self.have_last_ip = True
                err = self._walk_psb()
                if err:
                    return err
                s.type = T_PSB_EVT
                s.from_ip = self.psb_ip
                s.to_ip = 0
                return OK

    def _sync_ip(self) -> int:
        self._clear_fup_event()
        self.overflow = False
        s = self.state
        if not self.branch_enable:
            self.pkt_state = IN_SYNC
            s.type = 0
            return OK
        err = self._walk_to_ip()
        if err or (s.type & T_PSB_EVT and not self.ip):
            return err
        self.pkt_state = IN_SYNC
        s.from_ip = 0
        s.to_ip = self.ip
        return OK

    def _sync(self) -> int:
        self.pge = False
        self.continuous_period = False
        self.have_last_ip = False
        self.last_ip = 0
        self.psb_ip = 0
        self.ip = 0
        err = self._scan_for_psb()
        if err:
            return err
        self.have_last_ip = True
        self.pkt_state = IN_SYNC
        err = self._walk_psb()
        if err:
            return err
        s = self.state
        s.type = T_PSB_EVT
        s.from_ip = self.psb_ip
        s.to_ip = 0
        return OK

    def decode(self) -> State:
        """The next state (intel_pt_decode); state.err set on an error."""
        s = self.state
        while True:
            s.type = T_BRANCH
            s.flags = 0
            ps = self.pkt_state
            if ps == NO_PSB:
                err = self._sync()
            elif ps == NO_IP or ps == ERR_RESYNC:
                if ps == NO_IP:
                    self.have_last_ip = False
                    self.last_ip = 0
                    self.ip = 0
                err = self._sync_ip()
            elif ps == IN_SYNC:
                err = self._walk_trace()
            elif ps == S_TNT or ps == TNT_CONT or ps == S_TIP or ps == S_TIP_PGD:
                err = self._walk(0)
            elif ps == S_FUP:
                err = self._walk_fup()
                if err == EAGAIN:
                    err = self._walk_fup_tip()
            elif ps == FUP_NO_TIP:
                err = self._walk_fup()
                if err == EAGAIN:
                    err = self._walk_trace()
            else:  # FUP_IN_PSB
                err = self._fup_in_psb()
            if err != ENOLINK:
                break
        if err:
            s.err = ERR_CODES.get(err, ERR_UNKNOWN)
            if err != EOVERFLOW:
                s.from_ip = self.ip
            self.sample_timestamp = self.timestamp
            self._set_nr()
        else:
            s.err = 0
            if self.cbr != self.cbr_seen:
                self.cbr_seen = self.cbr
                if not s.type:
                    s.from_ip = self.ip
                    s.to_ip = 0
                s.type |= T_CBR_CHG
                s.cbr_payload = self.cbr_payload
                s.cbr = self.cbr
            if self.pkt_state in _SAMPLE_TIME_STATES:
                self.sample_timestamp = self.timestamp
        if s.type & T_PSB_EVT and self.tsc_timestamp:
            self.sample_timestamp = self.tsc_timestamp  # a PSB event has its TSC's time
        s.from_nr = self.nr
        s.to_nr = self.next_nr
        self.nr = self.next_nr
        s.timestamp = self.sample_timestamp
        # perf adds 2 TSC ticks per instruction walked since the timestamp: none here
        s.est_timestamp = self.sample_timestamp
        return s


_CYC_IGNORED = frozenset(
    (TNT, TIP_PGE, TIP, FUP, PSB, PIP, MODE_EXEC, MODE_TSX, PSBEND, PAD, VMCS, MNT,
     PTWRITE, PTWRITE_IP, BBP, BIP, BEP, BEP_IP, CFE, CFE_IP, EVD)
)  # fmt: skip
_UNEXPECTED_IN_PSB = frozenset(
    (TIP_PGD, TIP_PGE, TIP, TNT, TRACESTOP, BAD, PSB, PTWRITE, PTWRITE_IP, EXSTOP,
     EXSTOP_IP, MWAIT, PWRE, PWRX, BBP, BIP, BEP, BEP_IP, CFE, CFE_IP, EVD)
)  # fmt: skip
_UNEXPECTED_SYNCING = frozenset(
    (TIP_PGD, TIP_PGE, TIP, PTWRITE, PTWRITE_IP, EXSTOP, EXSTOP_IP, MWAIT, PWRE, PWRX,
     BBP, BIP, BEP, BEP_IP, CFE, CFE_IP, EVD)
)  # fmt: skip
_PSB_PLAIN = frozenset((PAD, MNT, TSC, TMA, MODE_EXEC, MODE_TSX, MTC, CYC, VMCS, CBR, PIP))
_PSB_EVENTS = frozenset(
    (PTWRITE, PTWRITE_IP, EXSTOP, EXSTOP_IP, MWAIT, PWRE, PWRX, BBP, BIP, BEP, BEP_IP,
     CFE, CFE_IP, EVD)
)  # fmt: skip


# ---- queues and samples ----------------------------------------------------


class SynthSample(NamedTuple):
    """A sample perf synthesizes from the trace."""

    event: int  # index into IntelPT.EVENTS
    ip: int
    addr: int
    cpumode: int
    pid: int
    tid: int
    cpu: int
    time: int  # perf time (ns); 0 when the trace has no timestamps
    period: int


class Error(NamedTuple):
    """A decoding error perf reports ("instruction trace error")."""

    code: int
    ip: int
    pid: int
    tid: int
    cpu: int
    time: int


# where the code at an address lives: (cpumode, pid, ip) -> the binary's identity, None: no map
CodeAt = Callable[[int, int, int], Hashable | None]


class _Queue:
    """One AUX-area buffer queue (per CPU with per-cpu mmaps) and its decoder."""

    def __init__(self, nr: int, cpu: int, tid: int) -> None:
        self.nr = nr
        self.queue_cpu = cpu
        self.queue_tid = tid
        self.buffers: list[Any] = []
        self.next = 0  # index of the next buffer to decode
        self.decoder: _Decoder | None = None
        self.state: State | None = None
        self.on_heap = False
        self.have_sample = False
        self.timestamp = 0
        self.pid = -1
        self.tid = -1
        self.cpu = cpu
        self.cbr_seen = 0xFFFFFFFF


class IntelPT:
    """The Intel PT decoding of one perf.data, driven by the report pass's records.

    Feed it buffers (add_buffer), the records perf's decoding listens to (switch,
    itrace_start) and, before each record delivered, process(time): it returns the samples
    perf delivers before that record. flush() at the end returns the rest.
    """

    EVENTS = ("cbr", "psb")  # the events it synthesizes, in perf's order
    CBR, PSB_EVENT = 0, 1
    SYNTH_CONFIGS = (5, 6)  # PERF_SYNTH_INTEL_CBR, PERF_SYNTH_INTEL_PSB (util/event.h)

    def __init__(self, config: PtConfig, code_at: CodeAt | None = None) -> None:
        self.config = config
        self.code_at = code_at
        self.queues: dict[int, _Queue] = {}
        self.heap: list[tuple[int, int]] = []
        self.new_data = False
        self.current_tid: dict[int, int] = {}  # cpu -> tid (machine__set_current_tid)
        self.threads: dict[int, list[int]] = {}  # tid -> [pid, cpu]
        self.dso_status: dict[Hashable, bool] = {}  # failed once: seen again since?
        self.errors: list[Error] = []
        self.unsynthesized: dict[str, int] = {}
        self._file: IO[bytes] | None = None
        self.params = DecoderParams(
            branch_enable=config.branch_enable,
            max_non_turbo_ratio=config.max_non_turbo_ratio,
            mtc_period=config.mtc_period,
            tsc_ctc_n=config.tsc_ctc_n,
            tsc_ctc_d=config.tsc_ctc_d,
            period_ticks=config.ns_to_ticks(ITRACE_PERIOD_NS) if config.time_mult else 0,
        )
        self.skip_reason = self._skip_reason()

    def _skip_reason(self) -> str | None:
        c = self.config
        if not c.configs:
            return "no intel_pt event in the file"
        if c.snapshot_mode or c.sampling_mode:
            return "snapshot or sampling mode (overlapping buffers) is not decoded"
        if any(cfg & CFG_TNT_DIS for cfg in c.configs):
            return "TNT packets disabled (perf's 'quick' mode) is not decoded"
        if c.have_sched_switch == 1:
            return "context switches from sched:sched_switch tracepoints are not decoded"
        return None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- input --

    def add_buffer(
        self, idx: int, cpu: int, tid: int, reference: int, data: bytes | None = None,
        path: str | None = None, offset: int = 0, size: int = 0,
    ) -> None:  # fmt: skip
        """Queue one AUXTRACE record's trace: its bytes, or where they are in the file."""
        q = self.queues.get(idx)
        if q is None:
            q = self.queues[idx] = _Queue(idx, _s32(cpu), _s32(tid))
        q.buffers.append((data, path, offset, size, reference))
        self.new_data = True

    def _read(self, path: str, offset: int, size: int) -> bytes:
        if self._file is None:
            try:
                self._file = open(path, "rb")  # noqa: SIM115
            except OSError as e:
                raise FormatError(path, offset, f"AUX trace unreadable: {e}") from None
        self._file.seek(offset)
        data = self._file.read(size)
        if len(data) < size:
            raise FormatError(path, offset, "AUX trace runs past the end of the file")
        return data

    def _buffers(self, q: _Queue) -> Callable[[], Buffer | None]:
        def next_buffer() -> Buffer | None:
            while q.next < len(q.buffers):
                data, path, offset, size, ref = q.buffers[q.next]
                q.buffers[q.next] = None  # decoded buffers are not kept
                q.next += 1
                if data is None and path is not None:
                    data = self._read(path, offset, size)
                if data:
                    return Buffer(data, ref)
            return None

        return next_buffer

    def thread(self, pid: int, tid: int) -> None:
        """A task seen in a record (COMM, FORK): perf's machine knows its pid."""
        self._thread(pid, tid)

    def _thread(self, pid: int, tid: int, cpu: int | None = None) -> None:
        t = self.threads.get(tid)
        if t is None:
            t = self.threads[tid] = [pid, -1]
        elif t[0] == -1:
            t[0] = pid
        if cpu is not None:
            t[1] = cpu

    def _set_current_tid(self, cpu: int, pid: int, tid: int) -> None:
        if cpu < 0:
            return
        self.current_tid[cpu] = tid
        self._thread(pid, tid, cpu)

    def switch(self, wide: bool, out: bool, cpu: int, pid: int, tid: int, np_pid: int,
               np_tid: int) -> None:  # fmt: skip
        """A PERF_RECORD_SWITCH(_CPU_WIDE): intel-pt.c intel_pt_context_switch."""
        if self.config.have_sched_switch == 3:
            if not out:  # intel_pt_context_switch_in
                if self.current_tid.get(cpu, -1) != tid:
                    self._set_current_tid(cpu, pid, tid)
                return
            if not wide:
                return  # perf: "Expecting CPU-wide context switch event"
            self._set_current_tid(cpu, np_pid, np_tid)
            return
        if out:
            return
        self._set_current_tid(cpu, pid, tid)

    def binaries_failed(self, keys: Iterable[Hashable]) -> None:
        """Binaries perf tried to read before the decoder walks them: their first failed
        walk is the only one it reports (vdso.c machine__thread_dso_type reads every
        '/'-named binary of a task's maps when its [vdso] is mapped)."""
        for key in keys:
            self.dso_status.setdefault(key, False)

    def itrace_start(self, cpu: int, pid: int, tid: int) -> None:
        if self.config.per_cpu_mmaps:
            self._set_current_tid(cpu, pid, tid)

    # -- decoding --

    def _walk_fails(self, q: _Queue) -> Callable[[int], bool]:
        """How a walk at ip fails for q: an error (True), or perf's silent retry (False)
        once the binary there has failed twice (intel_pt_walk_next_insn: a DSO whose data
        failed, "seen" by the decoder before, gives -ENOENT)."""

        def fails(ip: int) -> bool:
            cpumode = MISC_KERNEL if ip >= KERNEL_START else MISC_USER
            if cpumode != MISC_KERNEL and q.tid == -1:
                return True  # "no thread"
            key = self.code_at(cpumode, q.pid, ip) if self.code_at is not None else None
            if key is None:
                return True  # no map there
            seen = self.dso_status.get(key)
            if seen is None:
                self.dso_status[key] = False  # its data failed now
                return True
            if not seen:
                self.dso_status[key] = True
                return True
            return False

        return fails

    def _setup_queues(self) -> None:
        """intel_pt_setup_queue: each queue with new data decoded to its first timestamp."""
        self.new_data = False
        for q in self.queues.values():
            if q.decoder is None:
                q.cpu = q.queue_cpu
                q.tid = q.queue_tid
                q.decoder = _Decoder(self.params, self._buffers(q), self._walk_fails(q))
            if q.on_heap or self.config.timeless:
                continue
            while True:
                state = q.decoder.decode()
                if state.err:
                    if state.err == ERR_NODATA:
                        break
                    continue
                if state.timestamp:
                    break
            if state.err:
                continue
            q.timestamp = state.timestamp
            q.state = state
            q.have_sample = True
            heapq.heappush(self.heap, (q.timestamp, q.nr))
            q.on_heap = True

    def _set_pid_tid_cpu(self, q: _Queue) -> None:
        if q.queue_tid == -1 or self.config.have_sched_switch:
            q.tid = self.current_tid.get(q.cpu, -1)
            if q.tid == -1:
                q.pid = -1
        t = self.threads.get(q.tid) if q.tid != -1 else None
        if t is not None:
            q.pid = t[0]
            if q.queue_cpu == -1:
                q.cpu = t[1]

    def _sample(self, q: _Queue, out: list[SynthSample]) -> None:
        """The samples of q's held state (intel_pt_sample: psb, then cbr)."""
        if not q.have_sample:
            return
        q.have_sample = False
        st = q.state
        assert st is not None
        time = 0 if self.config.timeless else self.config.tsc_to_perf_time(q.timestamp)
        if st.type & T_PSB_EVT:
            out.append(self._synth(q, st, self.PSB_EVENT, time))
        if st.cbr != q.cbr_seen:
            q.cbr_seen = st.cbr
            out.append(self._synth(q, st, self.CBR, time))
        for bit, name in UNSYNTHESIZED.items():
            if st.type & bit:
                self.unsynthesized[name] = self.unsynthesized.get(name, 0) + 1

    def _synth(self, q: _Queue, st: State, event: int, time: int) -> SynthSample:
        ip, addr = st.from_ip, st.to_ip
        # intel_pt_cpumode: the from ip's, or the to ip's when there is no from ip
        at, nr = (ip, st.from_nr) if ip else (addr, st.to_nr)
        if nr:
            mode = MISC_GUEST_KERNEL if at >= KERNEL_START else MISC_GUEST_USER
        else:
            mode = MISC_KERNEL if at >= KERNEL_START else MISC_USER
        return SynthSample(event, ip, addr, mode, q.pid, q.tid, q.cpu, time, 1)

    def _run(self, q: _Queue, limit: int, out: list[SynthSample]) -> bool:
        """intel_pt_run_decoder: decode q to a state at or past limit (held); False when
        q ran out of data."""
        assert q.decoder is not None
        while True:
            self._sample(q, out)
            st = q.decoder.decode()
            if st.err:
                if st.err == ERR_NODATA:
                    return False
                q.timestamp = st.est_timestamp
                t = 0 if self.config.timeless else self.config.tsc_to_perf_time(q.timestamp)
                self.errors.append(Error(st.err, st.from_ip, q.pid, q.tid, q.cpu, t))
                continue
            q.state = st
            q.have_sample = True
            if (
                not self.config.timeless
                and (st.from_ip >= KERNEL_START or not st.from_ip)
                and st.to_ip
                and st.to_ip < KERNEL_START
            ):
                q.timestamp = st.est_timestamp  # estimated TSC on return to user space
            elif st.timestamp > q.timestamp:
                q.timestamp = st.timestamp
            if not self.config.timeless and q.timestamp >= limit:
                return True

    def _process_queues(self, limit: int, out: list[SynthSample]) -> None:
        heap = self.heap
        while heap and heap[0][0] < limit:
            _, nr = heapq.heappop(heap)
            q = self.queues[nr]
            ts = min(heap[0][0] + 1, limit) if heap else limit
            self._set_pid_tid_cpu(q)
            if self._run(q, ts, out):
                heapq.heappush(heap, (q.timestamp, nr))
            else:
                q.on_heap = False

    def process(self, time: int) -> list[SynthSample]:
        """The samples perf delivers before a record of this perf time (0: none)."""
        out: list[SynthSample] = []
        if self.skip_reason is not None or not time or time == U64:
            return out
        if self.new_data:
            self._setup_queues()
        if not self.config.timeless:
            self._process_queues(self.config.perf_time_to_tsc(time), out)
        return out

    def flush(self) -> list[SynthSample]:
        """The samples left at the end of the data (intel_pt_flush)."""
        out: list[SynthSample] = []
        if self.skip_reason is not None:
            return out
        if self.new_data:
            self._setup_queues()
        if self.config.timeless:
            for q in self.queues.values():
                self._set_pid_tid_cpu(q)
                if q.decoder is not None:
                    self._run(q, U64, out)
        else:
            self._process_queues(1 << 64, out)
        return out


def _s32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


PERF_TYPE_SYNTH = 0x80000000  # util/event.h: INT_MAX + 1U
SYNTH_INDEX_BASE = 1 << 30  # event indexes after any of the file's own


def event_attrs(pd: Any, config: PtConfig) -> list[Any]:
    """The events perf adds for what it synthesizes (intel_pt_synth_events), as EventAttrs
    named as perf names them, after the file's own in the report's order."""
    from bpfsym.read.perfdata import EventAttr

    little = pd.little
    order = "<" if little else ">"
    pt = next((a for a in pd.attrs if int(a.attr.type) == config.pmu_type), None)
    base_type = pt.sample_type if pt is not None else 0
    # IP | TID | RAW, TIME unless timeless, CPU with per-cpu mmaps (PERIOD is dropped)
    sample_type = (base_type & ~(1 << 8)) | 1 | 2 | (1 << 10)
    sample_type = sample_type | 4 if not config.timeless else sample_type & ~4
    if not config.per_cpu_mmaps:
        sample_type &= ~(1 << 7)
    out = []
    for k, (name, cfg) in enumerate(zip(IntelPT.EVENTS, IntelPT.SYNTH_CONFIGS, strict=True)):
        raw = bytearray(136)
        struct.pack_into(order + "IIQQQ", raw, 0, PERF_TYPE_SYNTH, 136, cfg, 1, sample_type)
        attr = pd.L.kernel.attr.parse(bytes(raw))
        out.append(
            EventAttr(index=SYNTH_INDEX_BASE + k, attr=attr, ids=[], name=name,
                      sample_type=sample_type)
        )  # fmt: skip
    return out
