"""The Intel PT decoder's time keeping: TSC, TMA, MTC, CYC and CBR packets to a timestamp.

Follows perf's tools/perf/util/intel-pt-decoder/intel-pt-decoder.c:
intel_pt_calc_tsc_timestamp (the 56-bit TSC against the buffer's reference, wraps and
slips), intel_pt_calc_tma, intel_pt_calc_mtc_timestamp and intel_pt_fixup_last_mtc (CTC
time from MTCs), intel_pt_calc_cbr and intel_pt_calc_cyc_timestamp (cycle-accurate time
from the core-to-bus ratio, or from the TSC ticks per cycle the lookahead of
intel_pt_calc_cyc_to_tsc / intel_pt_calc_cyc_cb measures), and intel_pt_next_period (how
far the time is from the next instruction sample).
"""

from __future__ import annotations

from dataclasses import dataclass

from bpfsym.read.intel_pt.packet import (
    BBP,
    BEP,
    BEP_IP,
    BIP,
    CBR,
    CFE,
    CFE_IP,
    CYC,
    EVD,
    FUP,
    MNT,
    MODE_EXEC,
    MODE_TSX,
    MTC,
    PAD,
    PIP,
    PSB,
    PSBEND,
    PTWRITE,
    PTWRITE_IP,
    TIP,
    TIP_PGE,
    TMA,
    TNT,
    TSC,
    U64,
    VMCS,
)
from bpfsym.read.intel_pt.reader import PacketReader
from bpfsym.read.intel_pt.state import DecoderParams

# the packets a timing packet is taken in on (Timing.take)
TIMING_KINDS = frozenset((MTC, TSC, TMA, CYC, CBR))

# packets the CYC-to-TSC lookahead steps over (intel_pt_calc_cyc_cb)
_CYC_IGNORED = frozenset(
    (TNT, TIP_PGE, TIP, FUP, PSB, PIP, MODE_EXEC, MODE_TSX, PSBEND, PAD, VMCS, MNT,
     PTWRITE, PTWRITE_IP, BBP, BIP, BEP, BEP_IP, CFE, CFE_IP, EVD)
)  # fmt: skip


def _multdiv(t: int, n: int, d: int) -> int:
    if not d:
        return 0
    return ((t // d) * n + ((t % d) * n) // d) & U64


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


class Timing:
    """The timestamp of one queue's decoder, moved on by the timing packets the reader
    stands on (reader.kind, count, payload; the kind before; the packets after)."""

    def __init__(self, params: DecoderParams, reader: PacketReader) -> None:
        self.reader = reader
        self.mnt = params.max_non_turbo_ratio
        self.mtc_shift = params.mtc_period
        self.ctc_rem_mask = (1 << self.mtc_shift) - 1
        self.tsc_ctc_n = params.tsc_ctc_n
        self.tsc_ctc_d = params.tsc_ctc_d if params.tsc_ctc_n else 0
        self.tsc_ctc_mult = 0
        if self.tsc_ctc_d and not self.tsc_ctc_n % self.tsc_ctc_d:
            self.tsc_ctc_mult = self.tsc_ctc_n // self.tsc_ctc_d
        self.tsc_slip = 0x10000  # how far a TSC may slip back past MTCs
        # instruction sampling (intel_pt_next_period)
        if params.period_ticks:
            p = 1 << (params.period_ticks.bit_length() - 1)
            self.period_ticks = p
            self.period_mask = ~(p - 1) & U64
        else:
            self.period_ticks = 0
            self.period_mask = 0
        self.continuous_period = False
        self.last_masked_timestamp = 0
        self.timestamp = 0
        self.tsc_timestamp = 0
        self.ref_timestamp = 0
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

    def restart(self, reference: int) -> None:
        """A buffer that does not continue the last: time starts again from its
        reference (intel_pt_get_data, the !consecutive case)."""
        self.timestamp = 0
        self.have_tma = False
        self.ref_timestamp = reference

    def take(self, kind: int) -> None:
        """Take in the timing packet (kind in TIMING_KINDS) the reader stands on."""
        if kind == MTC:
            self.mtc()
        elif kind == TSC:
            self.tsc()
        elif kind == TMA:
            self.tma()
        elif kind == CYC:
            self.cyc()
        else:
            self.cbr_packet()

    def tsc(self) -> None:
        rd = self.reader
        self.have_tma = False
        if self.ref_timestamp:
            ts = rd.payload | (self.ref_timestamp & (0xFF << 56))
            ref = self.ref_timestamp
            if ts < ref:
                if ref - ts > 1 << 55:
                    ts += 1 << 56
            elif ts - ref > 1 << 55:
                ts -= 1 << 56
            self.tsc_timestamp = self.timestamp = ts
            self.ref_timestamp = 0
        elif self.timestamp:
            ts = rd.payload | (self.timestamp & (0xFF << 56))
            self.tsc_timestamp = ts
            if ts < self.timestamp and self.timestamp - ts < self.tsc_slip:
                ts = self.timestamp  # a TSC slipped back past MTCs
            if ts < self.timestamp:
                if not rd.reference or ts + (1 << 56) < rd.reference:
                    ts += 1 << 56  # wrapped around
                    self.tsc_timestamp = ts
                else:
                    ts = self.timestamp  # a bad timestamp
            self.timestamp = ts
        if rd.last_packet_type == CYC:
            self.cyc_ref_timestamp = self.timestamp
            self.cycle_cnt = 0
            self.have_calc_cyc_to_tsc = False

    def tma(self) -> None:
        if not self.tsc_ctc_d:
            return
        ctc, fc = self.reader.payload, self.reader.count
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

    def mtc(self) -> None:
        if not self.have_tma:
            return
        mtc = self.reader.payload
        if self.mtc_shift > 8 and self.fixup_last_mtc:
            self.fixup_last_mtc = False
            self.last_mtc = self._fixup_last_mtc(mtc, self.last_mtc)
        delta = mtc - self.last_mtc if mtc > self.last_mtc else mtc + 256 - self.last_mtc
        self.ctc_delta += (delta << self.mtc_shift) & 0xFFFFFFFF
        ts = self._ctc_ts(self.ctc_timestamp, self.ctc_delta)
        if ts >= self.timestamp:
            self.timestamp = ts
        self.last_mtc = mtc
        if self.reader.last_packet_type == CYC:
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
            if d.cbr and ratio > base and (not base or ratio / base > 1.25):
                return True  # "too big (c.f. CBR-based value)"
            self.calc_cyc_to_tsc = ratio
            self.have_calc_cyc_to_tsc = True
            return True

        self.reader.lookahead(cb)

    def cbr_packet(self) -> None:
        payload = self.reader.payload
        cbr = payload & 0xFF
        self.cbr_payload = payload
        if self.cbr == cbr:
            return
        self.cbr = cbr
        self.cbr_cyc_to_tsc = self.mnt / cbr if cbr else float("inf")
        self.cyc_ref_timestamp = self.timestamp
        self.cycle_cnt = 0

    def cyc(self) -> None:
        self.cycle_cnt += self.reader.payload
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

    def next_period(self) -> int:
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
