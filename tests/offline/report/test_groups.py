"""The bulk pass's groupings (report.groups) and the sorts under them (read.arrays), on
random inputs: against numpy's own stable sort and np.unique, and against what a grouping
must be (samples together exactly when they agree on every column, groups numbered in
the order of the columns)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.read.arrays import gather_rows, stable_argsort, unique
from bpfsym.read.bulk import NotBulk
from bpfsym.report import groups
from bpfsym.report.groups import (
    address_groups,
    chain_groups,
    chain_ids,
    comm_groups,
    dense,
    kernel_states,
    map_states,
)
from bpfsym.report.rounds import Outgoing

DTYPES = [np.int64, np.uint64, np.int32, np.uint32, np.uint16]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(DTYPES),
    st.integers(0, 300),
    st.sampled_from([1, 3, 1000, 1 << 30, 1 << 62]),
    st.sampled_from([0, 7, 1 << 40, 0xFFFFFFFF80000000]),
    st.integers(0, 2**32 - 1),
)
def test_stable_argsort_is_numpys_stable_sort(dtype, n, span, base, seed):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    hi = min(base + span, int(info.max))
    lo = min(base, hi)
    if info.min < 0 and seed % 2:
        lo = max(-span, int(info.min))
    a = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64 if hi < 1 << 63 else np.uint64)
    a = a.astype(dtype)
    assert (stable_argsort(np, a) == np.argsort(a, kind="stable")).all()
    values, inverse = unique(np, a)
    want_values, want_inverse = np.unique(a, return_inverse=True)
    assert (values == want_values).all() and (inverse == want_inverse.ravel()).all()


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["<u8", ">u8", "<u4", ">u2"]),
    st.integers(1, 200),
    st.integers(1, 40),
    st.integers(0, 2**32 - 1),
)
def test_gathered_rows_are_the_slices_at_each_index(dtype, n, width, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1 << 16, n, dtype=np.uint64).astype(dtype)
    if width > n:
        assert gather_rows(np, a, width, np.zeros(0, dtype=np.int64)).shape == (0, width)
        with pytest.raises(IndexError):
            gather_rows(np, a, width, np.zeros(1, dtype=np.int64))
        return
    at = rng.integers(0, n - width + 1, 30)
    at[0] = n - width  # the last row
    got = gather_rows(np, a, width, at)
    assert got.dtype == a.dtype and got.shape == (len(at), width)
    assert got.tolist() == [a[i : i + width].tolist() for i in at.tolist()]
    with pytest.raises(IndexError):  # a row past the end is no row
        gather_rows(np, a, width, np.array([n - width + 1]))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 3000),
    st.sampled_from([1, 100, 1 << 14, 1 << 20, (1 << 22) + 5, 1 << 40]),
    st.integers(0, 2**32 - 1),
)
def test_dense_numbers_values_in_order_by_table_or_sort(n, top, seed):
    # top against n picks dense's way: a table of every value up to top, or a sort
    key = np.random.default_rng(seed).integers(0, top, n, endpoint=True, dtype=np.int64)
    got, count = dense(np, key)
    values, inverse = np.unique(key, return_inverse=True)
    assert count == len(values) and got.tolist() == inverse.ravel().tolist()


def _sideband(rng, n: int, pids: list[int]) -> list[Outgoing]:
    """n records: MMAP2s of the pids and KSYMBOLs (map and kernel symbol changes) and
    others that change neither, in delivery order."""
    out = []
    for i in range(n):
        kind = int(rng.integers(0, 3))
        if kind == 0:
            rtype = K.RECORD_MMAP2
            args: tuple = (int(rng.choice(pids)), 0, 0, 0, 0, "", F.MISC_USER)
        elif kind == 1:
            rtype, args = K.RECORD_KSYMBOL, (0, 0, 0, 0, "", 0)
        else:
            rtype, args = K.RECORD_EXIT, (0,)
        out.append(Outgoing(i, i, i, rtype, args, 0))
    return out


def _chain_delivery(n: int, distinct: int, nsideband: int, vary: bool, seed: int) -> tuple:
    """A random delivery of n samples of `distinct` call chains: (words, samples,
    side-band, each sample's place, mode, the chains, each sample's chain)."""
    rng = np.random.default_rng(seed)
    # `distinct` call chains (some empty), each sample one of them, laid out in a word array
    chains = [
        rng.integers(1, 50, int(rng.integers(0, 6))).astype(np.uint64) for _ in range(distinct)
    ]
    which = rng.integers(0, distinct, n)
    words, at = [np.uint64(0)], []
    for c in which.tolist():
        at.append(len(words))
        words.append(np.uint64(len(chains[c])))
        words.extend(chains[c].tolist())
    words_a = np.array(words, dtype=np.uint64)
    nr = np.array([len(chains[c]) for c in which.tolist()], dtype=np.int64)
    pids = [10, 11, 4000000]
    pid = np.array([pids[c % 3] for c in which.tolist()], dtype=np.uint32)
    # mode and address follow the chain, as in real files; with vary, not always
    kbase = 0xFFFFFFFF81000000  # kernel addresses: as a key's column, too wide unranked
    ip = np.array(
        [(kbase if c % 2 else 0) + (int(chains[c][0]) if len(chains[c]) else 7) for c in which],
        dtype=np.uint64,
    )
    mode = np.array([F.MISC_KERNEL if c % 2 else F.MISC_USER for c in which], dtype=np.int64)
    if vary:
        some = rng.integers(0, n, max(1, n // 10))
        ip[some] += np.uint64(8)
        mode[some[: len(some) // 2]] = F.MISC_HYPERVISOR
        pid[some[::3]] = 11
    sideband = _sideband(rng, nsideband, pids)
    before = np.sort(rng.integers(0, nsideband + 1, n)).astype(np.int64)
    samples = {"nr": nr, "chain": np.array(at, dtype=np.int64), "ip": ip, "pid": pid}

    return words_a, samples, sideband, before, mode, chains, which


@st.composite
def deliveries(draw: st.DrawFn) -> tuple:
    """_chain_delivery of drawn samples, distinct chains, side-band records, vary, seed."""
    return _chain_delivery(
        draw(st.integers(1, 400)), draw(st.integers(1, 12)), draw(st.integers(0, 6)),
        draw(st.booleans()), draw(st.integers(0, 2**32 - 1)),
    )  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(deliveries())
def test_chain_groups_are_the_samples_alike_in_every_column_in_order(delivery: tuple):
    words_a, samples, sideband, before, mode, chains, which = delivery
    ip, pid, n = samples["ip"], samples["pid"], len(mode)
    g = chain_groups(np, words_a, samples, sideband, before, mode)
    ids = chain_ids(np, words_a, samples)[0]
    mstate = map_states(np, sideband, pid, before)
    kstate = kernel_states(np, sideband, before)
    key = [
        (int(ids[i]), int(mode[i]), int(ip[i]), int(mstate[i]), int(kstate[i])) for i in range(n)
    ]
    # chain ids: equal exactly for equal chains (two of the random ones may be equal)
    words_of = [tuple(chains[c].tolist()) for c in which.tolist()]
    for i in range(n):
        for j in (0, n // 2, n - 1):
            assert (ids[i] == ids[j]) == (words_of[i] == words_of[j])
    # groups: equal exactly for equal keys, numbered in the keys' order
    order = sorted(set(key))
    assert g.count == len(order)
    number = {k: i for i, k in enumerate(order)}
    assert g.of.tolist() == [number[k] for k in key]
    assert g.first.tolist() == [key.index(k) for k in order]
    assert g.at.tolist() == [min(int(before[i]) for i in range(n) if key[i] == k) for k in order]


@settings(max_examples=200, deadline=None)
@given(deliveries())
def test_address_groups_of_chain_groups_are_those_of_every_sample(delivery: tuple):
    # with call chains, address groups are made of one sample per chain group (whose
    # samples agree on mode, address and both states): the same groups, the same users
    words, samples, sideband, before, mode, _, _ = delivery
    chains = chain_groups(np, words, samples, sideband, before, mode)
    want, want_users = address_groups(np, samples, sideband, before, mode)
    got, got_users = address_groups(np, samples, sideband, before, mode, chains)
    pairs = [(want, got)]
    assert (want_users is None) == (got_users is None)
    if want_users is not None:
        assert got_users.samples.tolist() == want_users.samples.tolist()
        pairs.append((want_users.groups, got_users.groups))
    for a, b in pairs:
        assert b.count == a.count
        for name in ("of", "first", "at"):
            assert getattr(b, name).tolist() == getattr(a, name).tolist(), name


def _chain_samples(chains: list[list[int]]) -> tuple[np.ndarray, dict]:
    words, at = [0], []
    for c in chains:
        at.append(len(words))
        words += [len(c), *c]
    samples = {
        "nr": np.array([len(c) for c in chains], dtype=np.int64),
        "chain": np.array(at, dtype=np.int64),
    }
    return np.array(words, dtype=np.uint64), samples


def test_chain_hashes_alike_in_their_high_bits_are_told_apart(monkeypatch):
    # with every multiplier 1, a one-entry chain's hash is its word (xor a constant):
    # 4 and 5 differ in the lowest bit only, which the first numbering leaves out
    monkeypatch.setattr(groups, "chain_multipliers", lambda np_, n: np.ones(n, dtype=np.uint64))
    words, samples = _chain_samples([[4], [5], [4], [5], [5]])
    ids, count, perm, first = chain_ids(np, words, samples)
    a, b = ids[0], ids[1]
    assert ids.tolist() == [a, b, a, b, b] and {a, b} == {0, 1} and count == 2
    assert first[a] == 0 and first[b] == 1
    assert ids[perm].tolist() == sorted(ids.tolist())


def test_chains_of_one_hash_are_no_group(monkeypatch):
    monkeypatch.setattr(groups, "chain_multipliers", lambda np_, n: np.ones(n, dtype=np.uint64))
    words, samples = _chain_samples([[1, 2], [2, 1]])  # sums alike: one full hash
    with pytest.raises(NotBulk):
        chain_ids(np, words, samples)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(0, 8),
    st.sampled_from([1, 3, 1 << 20, 1 << 31]),
    st.sampled_from(["<u4", ">u4"]),
    st.integers(0, 2**32 - 1),
)
def test_comm_groups_are_the_samples_of_one_tid_and_comm_state_in_order(
    n, nsideband, top, order, seed
):
    # a group per (tid, how many COMM or FORK records of that tid precede the sample),
    # numbered in that order; with no such record among the side-band, a group per tid
    rng = np.random.default_rng(seed)
    tids = rng.integers(0, top, 5, endpoint=True).tolist()
    tid = rng.choice(tids, n).astype(order)
    sideband = []
    for i in range(nsideband):
        kind, who = int(rng.integers(0, 3)), int(rng.choice(tids))
        if kind == 0:
            rtype, args = K.RECORD_COMM, (who + 1, who, "x")  # (pid, tid, comm)
        elif kind == 1:
            rtype, args = K.RECORD_FORK, (who + 1, who + 1, who, who, 0)  # FORK's tid third
        else:
            rtype, args = K.RECORD_EXIT, (who, who, who, who, 0)
        sideband.append(Outgoing(i, i, i, rtype, args, 0))
    before = np.sort(rng.integers(0, nsideband + 1, n)).astype(np.int64)
    g = comm_groups(np, {"tid": tid}, sideband, before)
    changes = [
        (i, x.args[1 if x.rtype == K.RECORD_COMM else 2])
        for i, x in enumerate(sideband)
        if x.rtype in (K.RECORD_COMM, K.RECORD_FORK)
    ]
    key = [
        (int(t), sum(1 for i, who in changes if who == t and i < b))
        for t, b in zip(tid.tolist(), before.tolist(), strict=True)
    ]
    number = {k: i for i, k in enumerate(sorted(set(key)))}
    assert g.count == len(number)
    assert g.of.tolist() == [number[k] for k in key]
    assert g.first.tolist() == [key.index(k) for k in sorted(number)]
