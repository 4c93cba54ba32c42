"""What a pass over the samples adds up, the same for the record-by-record and the bulk
pass: per event its samples, period, rows and call-graph stacks, and the file's totals."""

from __future__ import annotations

from dataclasses import dataclass, field

from bpfsym.read.perfdata import EventAttr


@dataclass(repr=False, eq=False)
class EventStats:
    attr: EventAttr
    samples: int = 0
    period: int = 0
    rows: dict[tuple, list[int]] = field(default_factory=dict)  # key -> [period, samples]
    stacks: dict[tuple, list[int]] = field(default_factory=dict)  # (head, syms) -> [p, n]


@dataclass(repr=False, eq=False)
class Aggregates:
    """A pass's sums. events is keyed by event index in the order each event's first
    sample was delivered (the report lists events in that order)."""

    events: dict[int, EventStats] = field(default_factory=dict)
    total: int = 0  # samples delivered
    lost: int = 0  # samples the kernel or perf lost (LOST, LOST_SAMPLES records)
    records: int = 0  # records in the data section
    # --call-graph dwarf: samples with a user stack to unwind, and why those that did not
    # unwind to their outermost frame stopped (report.dwarf)
    unwind_samples: int = 0
    unwind_stops: dict[str, int] = field(default_factory=dict)

    def event(self, attr: EventAttr) -> EventStats:
        """The stats of attr's event, made on its first sample."""
        st = self.events.get(attr.index)
        if st is None:
            st = self.events[attr.index] = EventStats(attr)
        return st


def add_to(totals: dict[tuple, list[int]], key: tuple, period: int, samples: int) -> None:
    """Add period and samples to totals[key] ([period, samples])."""
    r = totals.get(key)
    if r is None:
        totals[key] = [period, samples]
    else:
        r[0] += period
        r[1] += samples
