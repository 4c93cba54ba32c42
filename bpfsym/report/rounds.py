"""When each record goes out in the bulk pass: the same order as the record-by-record
pass (report.ordered), worked out for a window of records at once.

perf record writes a FINISHED_ROUND after each pass over its ring buffers; perf report
then delivers the queued records up to the newest time seen before the previous round
ended, sorted by time (tools/perf/util/ordered-events.c, process_finished_round in
tools/perf/util/session.c). So a record goes out at the first flush after its arrival
whose limit covers its time, and within a flush by (time, arrival): its place is
(flush, time, seq). Records whose flush has not happened by the end of a window wait
for the next one.
"""

from __future__ import annotations

import bisect
from typing import Any, NamedTuple

from bpfsym.read.arrays import unique
from bpfsym.read.bulk import NotBulk
from bpfsym.report.window import Samples, Window


class Waiting(NamedTuple):
    """A side-band record not yet delivered."""

    t: int
    seq: int
    rtype: int
    args: tuple  # as Sideband.decode made them
    misc: int
    arrival: int  # the first flush it can go out in


class Outgoing(NamedTuple):
    """A side-band record going out; a list of them sorts into delivery order."""

    flush: int
    t: int
    seq: int  # unique: the fields after it are never compared
    rtype: int
    args: tuple
    misc: int


class Rounds:
    """The round flushes seen so far and the records waiting for theirs.

    Flush m happens at the m-th FINISHED_ROUND (from 0) and delivers up to limits[m];
    flush `closed` is the one at the end of the data.
    """

    def __init__(self, np: Any) -> None:
        self.np = np
        self.limits: list[int] = [0]
        self.newest = 0  # the newest time seen
        self.closed = 0  # FINISHED_ROUND records seen
        self.waiting: Samples | None = None
        self.waiting_sideband: list[Waiting] = []

    def take(self, w: Window, last: bool) -> tuple[Samples | None, list[Outgoing]]:
        """Add a window's records; the samples and side-band records whose flush has come
        (all of them when last: the data ends), those in delivery order."""
        np = self.np
        closed0 = self.closed
        rounds_at = w.rounds_at
        if rounds_at:
            # flush j delivers up to the newest time seen before round j-1 ended
            running = np.maximum.accumulate(w.times)
            for i in rounds_at:
                seen = int(running[i - 1]) if i > 0 else 0
                self.newest = max(self.newest, seen)
                self.limits.append(self.newest)
            self.closed += len(rounds_at)
        if w.count:
            self.newest = max(self.newest, int(w.times.max()))
        samples = w.samples
        if samples is not None:
            # the rounds cut the window's samples into runs, run r arriving at flush
            # closed0 + r (a search of the few rounds per sample took 1.5 ms a window)
            cuts = np.searchsorted(w.sample_at, np.array(rounds_at, dtype=np.int64))
            runs = np.diff(cuts, prepend=0, append=len(w.sample_at))
            j = np.repeat(np.arange(closed0, closed0 + len(runs), dtype=np.int64), runs)
            if w.carried:  # the waiting samples, read again ahead of the window's own
                assert self.waiting is not None and len(self.waiting["j"]) == w.carried
                j = np.concatenate((self.waiting["j"], j))
                self.waiting = None
            samples["j"] = j
        arrived = [
            Waiting(t, seq, rtype, args, misc, closed0 + bisect.bisect_left(rounds_at, i))
            for t, seq, rtype, args, misc, i in w.sideband
        ]
        # with what waits from earlier windows, pick what goes out now
        if self.waiting is not None:
            samples = self.waiting if samples is None else _concat(np, self.waiting, samples)
        now = self._samples_now(samples, last)
        return now, self._sideband_now(self.waiting_sideband + arrived, last)

    def _samples_now(self, samples: Samples | None, last: bool) -> Samples | None:
        if samples is None:
            return None
        np = self.np
        # the first flush from j on whose limit covers t (the flush at the end of the
        # data covers all): nearly always j + 1, so that is tried before a search
        closed = self.closed
        limits = np.empty(closed + 2, dtype=np.uint64)
        limits[:closed] = self.limits[:closed]
        limits[closed:] = np.iinfo(np.uint64).max
        j, t = samples["j"], samples["t"]
        flush = j + (limits[j] < t)
        late = np.flatnonzero(limits[flush] < t)
        if len(late):
            flush[late] = np.searchsorted(limits[: closed + 1], t[late], side="left")
        samples["k"] = flush
        if last:
            go = np.ones(len(flush), dtype=bool)
        else:
            go = flush < self.closed  # the flush at the end of the data waits for it
        cut = int(np.argmin(go)) if len(go) else 0  # the first that waits
        if bool(go.all()):
            self.waiting = None
            return samples
        if not bool(go[cut:].any()):
            # the usual case: those that wait all come last, so slices (no copies)
            self.waiting = {name: v[cut:] for name, v in samples.items()}
            return {name: v[:cut] for name, v in samples.items()}
        self.waiting = {name: v[~go] for name, v in samples.items()}
        return {name: v[go] for name, v in samples.items()}

    def _sideband_now(self, records: list[Waiting], last: bool) -> list[Outgoing]:
        now: list[Outgoing] = []
        self.waiting_sideband = []
        for x in records:
            flush = max(x.arrival, bisect.bisect_left(self.limits, x.t, 0, self.closed))
            if last or flush < self.closed:
                now.append(Outgoing(flush, x.t, x.seq, x.rtype, x.args, x.misc))
            else:
                self.waiting_sideband.append(x)
        now.sort()
        return now


def places(np: Any, samples: Samples, sideband: list[Outgoing]) -> Any:
    """How many of the side-band records (in delivery order) go out before each sample:
    one search of (flush, time) packed in one int64, for the records (in delivery order,
    so sorted by it) and the samples; records of a sample's own flush and time then go
    before it by arrival (seq). Times are packed as they are, or by rank among all of
    them where their span leaves the flush no room."""
    flush = samples["k"]
    n = len(flush)
    if not sideband or not n:
        return np.zeros(n, dtype=np.int64)
    sb_flush = np.array([x.flush for x in sideband], dtype=np.int64)
    sb_t = np.array([x.t for x in sideband], dtype=np.uint64)
    t, seq = samples["t"], samples["seq"]
    fbits = max(int(flush.max()), int(sb_flush[-1])).bit_length()
    lo = min(int(t.min()), int(sb_t.min()))
    tbits = (max(int(t.max()), int(sb_t.max())) - lo).bit_length()
    if fbits + tbits <= 63:
        sb_time, time = sb_t - np.uint64(lo), t - np.uint64(lo)
    else:  # by rank: equal times keep equal ranks, order is all the search needs
        values, rank = unique(np, np.concatenate((sb_t, t)))
        tbits = max(len(values) - 1, 1).bit_length()
        if fbits + tbits > 63:
            raise NotBulk("too many round flushes")
        rank = rank.astype(np.uint64)
        sb_time, time = rank[: len(sb_t)], rank[len(sb_t) :]
    shift = np.uint64(tbits)
    sb_key = (sb_flush.astype(np.uint64) << shift) | sb_time
    key = (flush.astype(np.uint64) << shift) | time
    before = np.searchsorted(sb_key.view(np.int64), key.view(np.int64), side="left")
    ties = np.flatnonzero(sb_key[np.minimum(before, len(sb_key) - 1)] == key)
    for q in ties.tolist():  # equal flush and time: arrival order decides
        j = int(before[q])
        while j < len(sideband) and sb_key[j] == key[q] and sideband[j].seq < int(seq[q]):
            j += 1
        before[q] = j
    return before.astype(np.int64)


def _concat(np: Any, a: Samples, b: Samples) -> Samples:
    return {k: np.concatenate([a[k], b[k]]) for k in b}
