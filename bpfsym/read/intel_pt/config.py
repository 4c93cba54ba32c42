"""How a file's Intel PT trace was recorded: AUXTRACE_INFO and the intel_pt events' attrs.

Follows perf's tools/perf/util/intel-pt.c intel_pt_process_auxtrace_info (the priv[] words
of tools/perf/util/intel-pt.h, the later ones only when the file has them: intel_pt_has),
intel_pt_timeless_decoding and the helpers that read the PMU config (intel_pt_branch_enable,
intel_pt_mtc_period), and tools/perf/util/tsc.c for the conversion between perf time and
TSC ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bpfsym.read.intel_pt.packet import U64

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

# perf_event_attr.sample_type bits (uapi PERF_SAMPLE_TIME, PERF_SAMPLE_AUX)
SAMPLE_TIME = 1 << 2
SAMPLE_AUX = 1 << 20


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
