"""Samples per native address inside BPF programs: perf.data samples placed by
(address, time) on the program timeline of a side file.

JIT addresses are recycled, so an address alone does not name a program: the
sample counts for the program whose function covered the address *at the
sample's time* (symbolize.timeline, the report's own lookup).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from bpfsym.formats import perf as K
from bpfsym.model import Capture
from bpfsym.read.perfdata import PerfData
from bpfsym.symbolize.symbols import FROM_SIDE
from bpfsym.symbolize.timeline import BpfTimeline, capture_timeline


def bpf_sample_counts(
    path: str, capture: Capture, progress: Callable[[int], None] | None = None
) -> dict[int, dict[int, int]]:
    """prog id -> native address -> samples, for every sample that fell in BPF code."""
    timeline = capture_timeline(capture, FROM_SIDE)
    lo, hi = timeline.lo, timeline.hi
    out: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    with PerfData(path) as pd:
        where: dict[int, tuple[int, int]] = {}
        for rtype, _misc, buf, start, size, off in pd.records():
            if rtype != K.RECORD_SAMPLE:
                continue
            ev = pd.attr_of_sample(buf, start, size)
            pos = where.get(ev.index)
            if pos is None:
                pos = where[ev.index] = (ev.field_index("ip"), ev.field_index("time"))
            if pos[0] < 0 or ev.prefix.size + 8 > size:
                continue
            v = ev.prefix.unpack_from(buf, start + 8)
            ip = v[pos[0]]
            if not lo <= ip < hi:
                continue
            fn = BpfTimeline.pick(timeline.candidates(ip), v[pos[1]] if pos[1] >= 0 else None)
            if fn is not None and fn.prog is not None:
                out[fn.prog.id][ip] += 1
            if progress is not None:
                progress(off)
    return {k: dict(v) for k, v in out.items()}
