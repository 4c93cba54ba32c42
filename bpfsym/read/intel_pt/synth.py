"""What the Intel PT decoding gives the report: the samples and errors perf synthesizes,
and the events perf adds for them.

Follows perf's tools/perf/util/intel-pt.c: intel_pt_synth_events (the attrs of the events
it adds after the file's own, named as perf names them), intel_pt_synth_cbr_sample and
intel_pt_synth_psb_sample with intel_pt_cpumode (a sample's ip, addr and cpumode from a
decoder state), and intel_pt_synth_error (an "instruction trace error").
"""

from __future__ import annotations

from typing import Any, NamedTuple

from bpfsym.formats import struct_of
from bpfsym.read.intel_pt.config import PtConfig
from bpfsym.read.intel_pt.state import State

KERNEL_START = 1 << 63  # x86_64: perf keeps 2^63 (machine.c machine__get_kernel_start)
MISC_KERNEL, MISC_USER, MISC_GUEST_KERNEL, MISC_GUEST_USER = 1, 2, 4, 5

EVENTS = ("cbr", "psb")  # the events synthesized, in perf's order
CBR, PSB_EVENT = 0, 1
SYNTH_CONFIGS = (5, 6)  # PERF_SYNTH_INTEL_CBR, PERF_SYNTH_INTEL_PSB (util/event.h)
PERF_TYPE_SYNTH = 0x80000000  # util/event.h: INT_MAX + 1U
SYNTH_INDEX_BASE = 1 << 30  # event indexes after any of the file's own


class SynthSample(NamedTuple):
    """A sample perf synthesizes from the trace."""

    event: int  # index into EVENTS (IntelPT.EVENTS)
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


def sample(st: State, event: int, pid: int, tid: int, cpu: int, time: int) -> SynthSample:
    """The sample of event made from a decoder state, of a task at a time."""
    ip, addr = st.from_ip, st.to_ip
    # intel_pt_cpumode: the from ip's, or the to ip's when there is no from ip
    at, nr = (ip, st.from_nr) if ip else (addr, st.to_nr)
    if nr:
        mode = MISC_GUEST_KERNEL if at >= KERNEL_START else MISC_GUEST_USER
    else:
        mode = MISC_KERNEL if at >= KERNEL_START else MISC_USER
    return SynthSample(event, ip, addr, mode, pid, tid, cpu, time, 1)


def event_attrs(pd: Any, config: PtConfig) -> list[Any]:
    """The events perf adds for what it synthesizes (intel_pt_synth_events), as EventAttrs
    named as perf names them, after the file's own in the report's order."""
    from bpfsym.read.perfdata import EventAttr

    pt = next((a for a in pd.attrs if int(a.attr.type) == config.pmu_type), None)
    base_type = pt.sample_type if pt is not None else 0
    # IP | TID | RAW, TIME unless timeless, CPU with per-cpu mmaps (PERIOD is dropped)
    sample_type = (base_type & ~(1 << 8)) | 1 | 2 | (1 << 10)
    sample_type = sample_type | 4 if not config.timeless else sample_type & ~4
    if not config.per_cpu_mmaps:
        sample_type &= ~(1 << 7)
    rec, names = struct_of(pd.L.kernel.attr)  # perf_event_attr, all fields zero but these
    out = []
    for k, (name, cfg) in enumerate(zip(EVENTS, SYNTH_CONFIGS, strict=True)):
        given = {"type": PERF_TYPE_SYNTH, "size": rec.size, "config": cfg,
                 "sample_period": 1, "sample_type": sample_type}  # fmt: skip
        attr = pd.L.kernel.attr.parse(rec.pack(*(given.get(n, 0) for n in names)))
        out.append(
            EventAttr(index=SYNTH_INDEX_BASE + k, attr=attr, ids=[], name=name,
                      sample_type=sample_type)
        )  # fmt: skip
    return out
