"""Samples per native address inside BPF programs: perf.data samples placed by
(address, time) on the program timeline of a side file.

JIT addresses are recycled, so an address alone does not name a program: the
sample counts for the program whose function covered the address *at the
sample's time*.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable

from bpfsym.model import Capture
from bpfsym.read.perfdata import PerfData

RECORD_SAMPLE = 9


class BpfRanges:
    """Every captured function as (start, end, load, unload, prog id), searchable by address."""

    def __init__(self, capture: Capture) -> None:
        spans = []
        for p in capture.programs:
            for f in p.functions:
                if f.size:
                    spans.append((f.addr, f.addr + f.size, p.load_time, p.unload_time, p.id))
        spans.sort()
        self.spans = spans
        self.starts = [s[0] for s in spans]
        self.widest = max((s[1] - s[0] for s in spans), default=0)
        self.lo = min(self.starts, default=0)
        self.hi = max((s[1] for s in spans), default=0)

    def program_at(self, ip: int, t: int | None) -> int | None:
        """The id of the program whose function holds ip at time t (None: none)."""
        if not self.lo <= ip < self.hi:
            return None
        i = bisect.bisect_right(self.starts, ip) - 1
        while i >= 0 and self.starts[i] > ip - self.widest - 1:
            start, end, load, unload, prog_id = self.spans[i]
            if (
                start <= ip < end
                and (t is None or load is None or load <= t)
                and (t is None or unload is None or t < unload)
            ):
                return prog_id
            i -= 1
        return None


def bpf_sample_counts(
    path: str, capture: Capture, progress: Callable[[int], None] | None = None
) -> dict[int, dict[int, int]]:
    """prog id -> native address -> samples, for every sample that fell in BPF code."""
    ranges = BpfRanges(capture)
    out: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    with PerfData(path) as pd:
        where: dict[int, tuple[int, int]] = {}
        for rtype, _misc, buf, start, size, off in pd.records():
            if rtype != RECORD_SAMPLE:
                continue
            ev = pd.attr_of_sample(buf, start, size)
            pos = where.get(ev.index)
            if pos is None:
                f = ev.fields
                pos = where[ev.index] = (
                    f.index("ip") if "ip" in f else -1,
                    f.index("time") if "time" in f else -1,
                )
            if pos[0] < 0 or ev.prefix.size + 8 > size:
                continue
            v = ev.prefix.unpack_from(buf, start + 8)
            ip = v[pos[0]]
            if not ranges.lo <= ip < ranges.hi:
                continue
            prog_id = ranges.program_at(ip, v[pos[1]] if pos[1] >= 0 else None)
            if prog_id is not None:
                out[prog_id][ip] += 1
            if progress is not None:
                progress(off)
    return {k: dict(v) for k, v in out.items()}
