"""The bulk (numpy) pass of a report: the same delivery as the record-by-record pass
(report.ordered), with numpy doing the per-sample work.

Records are located and sample heads decoded a window of the data section at a time
(report.window); each record goes out at the round flush the record-by-record pass
would deliver it in (report.rounds); the samples of a delivery are grouped by the
side-band state that matters to them (report.groups) and each group is resolved once
(report.resolve) before the samples are added up (report.accumulate). Large files are
shared between two processes (report.split).
"""

from __future__ import annotations

from typing import Any

from bpfsym.read.bulk import BulkData, NotBulk
from bpfsym.read.perfdata import PerfData
from bpfsym.report.accumulate import Accumulator, Interned
from bpfsym.report.aggregates import Aggregates
from bpfsym.report.filters import SampleFilter
from bpfsym.report.progress import Progress
from bpfsym.report.query import ReportQuery
from bpfsym.report.resolve import BulkDelivery
from bpfsym.report.rounds import Rounds
from bpfsym.report.sideband import Sideband
from bpfsym.report.split import (
    FIRST_SHARE,
    FIRST_SHARE_CHAINS,
    SINGLE,
    Share,
    StartsHandoff,
    run_split,
    shares,
)
from bpfsym.report.window import WindowReader, bulk_refusal


class BulkPass:
    """One bulk pass over a mapped perf.data file (NotBulk: the file needs the
    record-by-record pass after all)."""

    def __init__(self, pd: PerfData, query: ReportQuery, cap: Any, np: Any, data: BulkData) -> None:
        why = bulk_refusal(pd)
        if why is not None:
            raise NotBulk(why)
        self.pd = pd
        self.query = query
        self.np = np
        self.data = data
        self.sideband = Sideband(pd, cap, query.kallsyms, np, query.host, query.symfs)
        self.sideband.set_header()  # a file's header: before any side-band record
        self.agg = Aggregates()
        self.reader = WindowReader(pd, data, np, self.sideband)
        self.rounds = Rounds(np)
        ids = Interned(self.sideband.sym)
        self.delivery = BulkDelivery(
            np, data, self.sideband, ids, Accumulator(np, pd, query, self.agg, ids),
            query.callchains, query.layout.thread,
        )  # fmt: skip
        self.filter = SampleFilter.of(query.filters, pd.header, pd.attrs)
        self.delivery.filter = self.filter
        self.seq = 0  # records read
        self.located: StartsHandoff | None = None  # the other reading process's (split)

    def run(self) -> None:
        first = FIRST_SHARE_CHAINS if self.query.callchains else FIRST_SHARE
        halves = shares(self.data.nwords * 8, self.query.parallel, first)
        if halves is None:
            self.read(SINGLE)
        else:
            run_split(self, *halves)
        if not self.sideband.ready:
            self.sideband.prepare()

    def read(self, share: Share) -> None:
        """Read the records window by window and deliver the samples of the share.

        Every share applies all side-band records in the same order as a single pass
        would, so each sample it keeps meets the state it would have met there; the
        first share stops once its last samples have gone out."""
        progress = Progress(self.pd, share.size())
        progress.on = progress.on and not share.second  # one bar: the first share's
        located = self.located
        given = located.take if located is not None and not share.second else None
        if given is not None and not self.sideband.ready and self.sideband.relocation_free():
            # the first process makes the kernel symbols for both before its first window,
            # while the second locates that window's records for it too (report.split)
            self.sideband.prepare()
        windows = self.reader.windows(share.windows, given)
        index = 0
        while True:
            if share.done(index) and self.rounds.waiting is None:
                progress.done()
                return  # the rest of the file only concerns the other share
            got = next(windows, None)
            if got is None:
                break
            starts, last = got
            mine = share.mine(index)
            if located is not None and share.second and index < (share.split_at or 0):
                located.give(index, starts)  # the first process's windows, for it
            self._window(starts, last, mine)
            if mine:
                progress.tick(8 * int(starts[-1]))
            index += 1
        if self.rounds.waiting is not None or self.rounds.waiting_sideband:
            self._window(self.np.zeros(0, dtype=self.np.int64), True, True)
        self.agg.records = self.seq
        progress.done()

    def _window(self, starts: Any, last: bool, mine: bool) -> None:
        """Read a window (its samples decoded when mine) and deliver what goes out now."""
        w = self.reader.read(starts, self.seq, mine, self.rounds.waiting)
        self.seq += w.count
        if mine:  # losses go with the share that has the samples
            self.agg.lost += w.lost
        samples, sideband = self.rounds.take(w, last)
        if samples is not None and self.filter is not None and self.filter.drops_any:
            samples = self.filter.keep(self.np, samples)  # --cpu, --time: before any total
        has_samples = samples is not None and len(samples["t"]) > 0
        if has_samples or sideband:
            if has_samples and not self.sideband.ready:
                self.sideband.prepare()  # kernel symbols: side-band records do without them
            self.delivery.deliver(samples, sideband)
