"""report.rounds.places: how many side-band records go out before each sample, on
random deliveries (many samples sharing a flush and a time with side-band records),
against its definition: the records whose (flush, time, seq) sort before the sample's."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.formats import perf as K
from bpfsym.report.rounds import Outgoing, places


def _delivery(seed: int, nsamples: int, nsideband: int, span: int):
    rng = np.random.default_rng(seed)
    flushes = int(rng.integers(1, 6))
    times = rng.integers(0, 8, 12).astype(np.uint64) * np.uint64(span // 8)  # few: ties
    seqs = rng.permutation(nsamples + nsideband) + 1  # arrival order, unique
    sideband = sorted(
        Outgoing(
            int(rng.integers(0, flushes)), int(rng.choice(times)), int(seqs[nsamples + i]),
            K.RECORD_EXIT, (0,), 0,
        )
        for i in range(nsideband)
    )  # fmt: skip
    samples = {
        "k": rng.integers(0, flushes + 1, nsamples).astype(np.int64),
        "t": rng.choice(times, nsamples).astype(np.uint64),
        "seq": seqs[:nsamples].astype(np.int64),
    }
    return samples, sideband


def _by_definition(samples, sideband) -> list[int]:
    return [
        sum((x.flush, x.t, x.seq) < (int(k), int(t), int(q)) for x in sideband)
        for k, t, q in zip(samples["k"], samples["t"], samples["seq"], strict=True)
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 60),
    st.integers(0, 30),
    # the times' span: packed with the flush in 63 bits, or too wide for that
    st.sampled_from([8, 1 << 40, (1 << 63) + (1 << 62)]),
)
def test_places_are_the_records_sorting_before_each_sample(seed, nsamples, nsideband, span):
    samples, sideband = _delivery(seed, nsamples, nsideband, span)
    got = places(np, samples, sideband)
    assert got.dtype == np.int64
    assert got.tolist() == _by_definition(samples, sideband)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 80),
    st.integers(0, 12),
    st.sampled_from([8, 1000, 1 << 63]),
)
def test_a_sample_goes_out_at_the_first_flush_from_its_arrival_whose_limit_covers_it(
    seed, nsamples, closed, span
):
    # Rounds._samples_now against its definition: the first flush m >= j (the sample's
    # arrival) whose limit is at least the sample's time, the one at the end of the data
    # (closed) when none is; samples of any time, limits with ties, arrivals up to closed
    from bpfsym.report.rounds import Rounds

    rng = np.random.default_rng(seed)
    limits = [0, *sorted(int(x) for x in rng.integers(0, span, closed, dtype=np.uint64))]
    r = Rounds(np)
    r.limits, r.closed = limits, closed
    t = rng.integers(0, span, nsamples, dtype=np.uint64)
    if nsamples and closed:
        t[: nsamples // 3] = rng.choice(np.array(limits[:closed], dtype=np.uint64), nsamples // 3)
    j = np.sort(rng.integers(0, closed + 1, nsamples)).astype(np.int64)
    samples = {"t": t, "j": j, "seq": np.arange(1, nsamples + 1, dtype=np.int64)}
    r._samples_now(samples, True)
    want = [
        next((m for m in range(int(jj), closed) if limits[m] >= int(tt)), closed)
        for jj, tt in zip(j.tolist(), t.tolist(), strict=True)
    ]
    assert samples["k"].tolist() == want


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 200), st.integers(0, 5))
def test_a_sample_arrives_at_the_flush_after_the_rounds_before_it(seed, nrecords, closed0):
    # Rounds.take's arrival (j) of each sample against its definition: the rounds seen in
    # earlier windows (closed0) and the FINISHED_ROUNDs before it in its window
    from bpfsym.report.rounds import Rounds
    from bpfsym.report.window import Window

    rng = np.random.default_rng(seed)
    is_round = rng.random(nrecords) < rng.choice([0.0, 0.05, 0.5, 1.0])
    rounds_at = np.flatnonzero(is_round).tolist()
    sample_at = np.flatnonzero(~is_round)
    times = np.sort(rng.integers(1, 1000, nrecords)).astype(np.uint64)
    samples = {"t": times[sample_at], "seq": sample_at + 1}
    r = Rounds(np)
    r.limits, r.closed = [0] * (closed0 + 1), closed0
    r.take(Window(nrecords, samples, sample_at, times, [], rounds_at, 0), True)
    want = [closed0 + sum(1 for q in rounds_at if q < i) for i in sample_at.tolist()]
    assert samples["j"].tolist() == want
