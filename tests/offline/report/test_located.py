"""report.split.StartsHandoff: the first reading process takes the record starts of its
windows that the second one located (which walks them first, for their side-band
records), across a real fork; what it takes reads as what it would locate itself, it
never waits, and a split report that takes them renders as one process's."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest

from bpfsym.read.bulk import BulkData
from bpfsym.read.perfdata import PerfData
from bpfsym.report import split
from bpfsym.report.analysis import analyze
from bpfsym.report.render import render_json, render_stdio
from bpfsym.report.split import StartsHandoff

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "perfdata")

EMPTY = os.devnull  # an empty kallsyms file: the same (no) kernel symbols on any host

WINDOW = 4096  # bytes: bpf.data (265 kB) in some 60 windows


def _scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The windows BulkData locates itself (their first word), from now on."""
    seen: list[int] = []
    chain = BulkData._chain

    def counted(self: BulkData, pos: int, hi: int) -> Any:
        seen.append(pos)
        return chain(self, pos, hi)

    monkeypatch.setattr(BulkData, "_chain", counted)
    return seen


def _give_in_child(hand: StartsHandoff, which: list[int], go: int | None = None) -> int:
    """Fork a second process that locates bpf.data's windows and gives those in which
    (after a byte on fd go, when given); its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            hand.second()
            if go is not None:
                os.read(go, 1)
            with PerfData(os.path.join(FIX, "bpf.data")) as pd:
                for j, starts in enumerate(pd.bulk(np).windows(WINDOW)):  # type: ignore[union-attr]
                    if j in which:
                        hand.give(j, starts)
            hand.done()
        finally:
            os._exit(0)
    hand.first(np)
    return pid


def test_the_first_process_reads_the_windows_the_second_located(monkeypatch) -> None:
    with PerfData(os.path.join(FIX, "bpf.data")) as pd:
        data = pd.bulk(np)
        assert data is not None
        want = [w.tolist() for w in data.windows(WINDOW)]
        assert len(want) > 20
        hand = StartsHandoff()
        pid = _give_in_child(hand, [1, 2, 3, 7])
        os.waitpid(pid, 0)  # all said: the take below finds every window given
        scans = _scans(monkeypatch)
        taken = []

        def take(j: int) -> Any:
            got = hand.take(j)
            if got is not None:
                taken.append(j)
            return got

        got = [w.tolist() for w in data.windows(WINDOW, take)]
        hand.done()
    assert got == want
    assert taken == [1, 2, 3, 7]
    firsts = [w[0] for w in want]
    assert scans == [p for j, p in enumerate(firsts) if j not in (1, 2, 3, 7)]


def test_starts_that_are_not_the_windows_are_located_again(monkeypatch) -> None:
    # given the starts of the window after each: not where the window begins
    with PerfData(os.path.join(FIX, "bpf.data")) as pd:
        data = pd.bulk(np)
        assert data is not None
        want = list(data.windows(WINDOW))
        scans = _scans(monkeypatch)
        got = list(data.windows(WINDOW, lambda j: want[j + 1] if j + 1 < len(want) else None))
    assert [w.tolist() for w in got] == [w.tolist() for w in want]
    assert len(scans) == len(want)


def test_the_first_process_never_waits_for_the_second() -> None:
    hand = StartsHandoff()
    go_r, go_w = os.pipe()
    pid = _give_in_child(hand, [1, 2], go_r)  # gives only once told to
    try:
        t = time.perf_counter()
        assert hand.take(1) is None and hand.take(2) is None
        assert time.perf_counter() - t < 0.5
    finally:
        os.write(go_w, b"x")
        os.waitpid(pid, 0)
        hand.done()
        os.close(go_r)
        os.close(go_w)


def _report(path: str, parallel: bool) -> str:
    an = analyze(path, None, ["pid", "cpu", "sym"], True, False, EMPTY, None, True, parallel)
    return render_stdio(an, None, 0.0) + render_json(an, None)


def test_a_split_report_that_takes_the_located_windows_is_one_process_report(
    monkeypatch,
) -> None:
    path = os.path.join(FIX, "bpf.data")
    alone = _report(path, False)
    monkeypatch.setattr(split, "WINDOW", WINDOW)  # a first share of many windows
    with PerfData(path) as pd:
        halves = split.shares(pd.data_size or 0, True, split.FIRST_SHARE_CHAINS)
    assert halves is not None
    k = halves[0].split_at or 0  # the first share's windows: 0 .. k-1 handed over
    assert k > 10
    r, w = os.pipe()
    take = StartsHandoff.take

    def waiting_take(self: StartsHandoff, j: int) -> Any:
        # the test waits for the second process's word (the product never does), so
        # that every window it locates is taken; the taken ones are told on a pipe
        deadline = time.monotonic() + 5
        got = take(self, j)
        while got is None and j < k and self.taking and time.monotonic() < deadline:
            time.sleep(0.001)
            got = take(self, j)
        if got is not None:
            os.write(w, b"t")
        return got

    monkeypatch.setattr(StartsHandoff, "take", waiting_take)
    try:
        assert _report(path, True) == alone
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as f:
        taken = len(f.read())
    assert taken == k
