"""The bulk pass's groupings: samples that must get the same answer from the Symbolizer,
because they agree on what it is asked and on the side-band state that answer depends on.

The Symbolizer's state only changes at side-band records, and only for some samples:
kernel symbols at KSYMBOL/BPF_EVENT, a process's memory maps at the MMAP/MMAP2/COMM/FORK
records of its pid, a thread's comm at the COMM/FORK records of its tid. A sample's
state is counted as how many of the records that matter to it went out before it (its
place among a delivery's side-band records: rounds.places); each group is then resolved
once, at the place of its earliest sample (resolve.GroupResolver).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.read.arrays import gather_rows, number_sorted, sort_packed, stable_argsort, unique
from bpfsym.read.bulk import NotBulk
from bpfsym.report.rounds import Outgoing
from bpfsym.report.window import Samples

MAP_RECORDS = (K.RECORD_MMAP, K.RECORD_MMAP2)

MAP_CHANGES = (*MAP_RECORDS, K.RECORD_COMM, K.RECORD_FORK)

KERNEL_CHANGES = (K.RECORD_KSYMBOL, K.RECORD_BPF_EVENT)

COMM_CHANGES = (K.RECORD_COMM, K.RECORD_FORK)

DENSE_TABLE = 1 << 22  # below this top value, dense() may number through a table, not a sort

DENSE_SPREAD = 8  # ... when the top value is also below this many times the values' count
# (a table of many fresh pages costs more than sorting few values spread wide over it:
# docs/python-speed.md)

BIG = (1 << 63) - 1  # int64 max: "none yet" for the minimums below


@dataclass(repr=False, eq=False)
class Groups:
    """A grouping of a delivery's samples (or of some of them)."""

    of: Any  # the group of each sample (int64, 0..count-1)
    count: int
    first: Any  # each group's first sample (an index into the delivery's samples)
    at: Any  # each group's place: the fewest side-band records any sample of it follows


@dataclass(repr=False, eq=False)
class UserStates:
    """The user-mode samples by (pid, its memory-map state): resolved after the walk, in
    bulk, against the maps each state had where its first sample went out."""

    samples: Any  # the user-mode samples (indexes into the delivery's samples)
    groups: Groups  # by state; .of is per entry of samples


def dense(np: Any, key: Any) -> tuple[Any, int]:
    """Number the distinct values of a non-negative integer array 0.. in value order."""
    if not len(key):
        return np.zeros(0, dtype=np.int64), 0
    top = int(key.max())
    if top < min(DENSE_TABLE, DENSE_SPREAD * len(key) + 4096):
        seen = np.zeros(top + 1, dtype=bool)
        seen[key] = True
        values = np.flatnonzero(seen)
        table = np.zeros(top + 1, dtype=np.int64)
        table[values] = np.arange(len(values), dtype=np.int64)
        return table[key], len(values)
    values, inv = unique(np, key)
    return inv, len(values)


def summarize(np: Any, of: Any, count: int, before: Any, index: Any = None) -> Groups:
    """Groups of the samples whose group is `of`, placed after `before` side-band records
    each; index: the samples' indexes (default 0..)."""
    if index is None:
        index = np.arange(len(of), dtype=np.int64)
    first = np.full(count, BIG, dtype=np.int64)
    np.minimum.at(first, of, index)
    at = np.full(count, BIG, dtype=np.int64)
    np.minimum.at(at, of, before)
    return Groups(of, count, first, at)


def kernel_map(x: Outgoing) -> bool:
    """Whether a side-band record maps kernel code (an MMAP or MMAP2 of the kernel's own
    map or a module's): it moves what a kernel address names."""
    return x.rtype in MAP_RECORDS and x.args[6] == F.MISC_KERNEL


def kernel_states(np: Any, sideband: list[Outgoing], before: Any, maps: bool = False) -> Any:
    """Per sample (or group, placed after `before` side-band records): how many kernel
    symbol changes (KSYMBOL, BPF_EVENT; with maps also the kernel's MMAP and MMAP2
    records, which move what a call-chain node names) precede it."""
    changes = np.array(
        [
            i for i, x in enumerate(sideband)
            if x.rtype in KERNEL_CHANGES
            or (maps and kernel_map(x))
        ],
        dtype=np.int64,
    )  # fmt: skip
    return np.searchsorted(changes, before, side="left")


def map_states(np: Any, sideband: list[Outgoing], pids: Any, before: Any) -> Any:
    """Per sample: its pid and how many of that pid's map changes precede it, as one key."""
    changes = sorted(
        (int(x.args[0]) << 32) | i for i, x in enumerate(sideband) if x.rtype in MAP_CHANGES
    )
    pid_place = np.array(changes, dtype=np.uint64)  # (pid, place) of each change
    pid = pids.astype(np.uint64)
    nth = np.searchsorted(pid_place, (pid << np.uint64(32)) | before.astype(np.uint64))
    return pid * np.uint64(len(pid_place) + 1) + nth.astype(np.uint64)


def address_groups(
    np: Any, samples: Samples, sideband: list[Outgoing], before: Any, mode: Any,
    chains: Groups | None = None,
) -> tuple[Groups, UserStates | None]:  # fmt: skip
    """Group samples by (mode, address, the side-band state their symbol depends on):
    kernel groups first, then user, then the other modes (which never resolve).

    chains: the samples' call chain groups, which these only merge (the samples of a
    chain group agree on mode, address and both states: chain_groups); the key is then
    made of one sample per chain group, not of every sample."""
    if chains is None:
        of, count, sel, state, nstates = _address_keys(
            np, samples["ip"], samples["pid"], sideband, before, mode
        )
        users = None
        if sel is not None:
            users = UserStates(sel, summarize(np, state, nstates, before[sel], sel))
        return summarize(np, of, count, before), users
    rep = chains.first
    of, count, sel, state, nstates = _address_keys(
        np, samples["ip"][rep], samples["pid"][rep], sideband, before[rep], mode[rep]
    )
    groups = Groups(of[chains.of], count, *_firsts(np, of, count, chains))
    users = None
    if sel is not None:
        cstate = np.zeros(chains.count, dtype=np.int64)
        cstate[sel] = state
        user_samples = np.flatnonzero(mode == F.MISC_USER)
        first, at = _firsts(np, state, nstates, chains, sel)
        users = UserStates(
            user_samples, Groups(cstate[chains.of[user_samples]], nstates, first, at)
        )
    return groups, users


def _firsts(np: Any, of: Any, count: int, chains: Groups, sel: Any = None) -> tuple[Any, Any]:
    """The first sample and the place of groups of chain groups (of: the group of each
    chain group, or of those in sel)."""
    first = np.full(count, BIG, dtype=np.int64)
    at = np.full(count, BIG, dtype=np.int64)
    np.minimum.at(first, of, chains.first if sel is None else chains.first[sel])
    np.minimum.at(at, of, chains.at if sel is None else chains.at[sel])
    return first, at


def _address_keys(
    np: Any, ip: Any, pid: Any, sideband: list[Outgoing], before: Any, mode: Any
) -> tuple[Any, int, Any, Any, int]:
    """address_groups' numbering of samples by (mode, address, state): each one's group
    and their count, and of the user-mode samples (sel, None without) their memory-map
    state and the states' count."""
    n = len(mode)
    of = np.empty(n, dtype=np.int64)
    base = 0
    sel_user, user_state, nstates = None, None, 0
    kernel = mode == F.MISC_KERNEL
    user = mode == F.MISC_USER
    for which, what in ((kernel, F.MISC_KERNEL), (user, F.MISC_USER), (~(kernel | user), 0)):
        sel = np.flatnonzero(which)
        if not len(sel):
            continue
        ips = ip[sel]
        if what == F.MISC_KERNEL:
            state = kernel_states(np, sideband, before[sel])
        elif what == F.MISC_USER:
            state, nstates = dense(np, map_states(np, sideband, pid[sel], before[sel]))
            sel_user, user_state = sel, state
        else:
            state = mode[sel]
        lo = int(ips.min())
        bits = (int(ips.max()) - lo).bit_length()
        if int(state.max()).bit_length() + bits <= 62:
            # (state, address) packed in one word: one sort
            key = (state.astype(np.uint64) << np.uint64(bits)) | (ips - np.uint64(lo))
            inv, ng = dense(np, key)
        else:
            ipu, ip_inv = unique(np, ips)
            if int(state.max()) * len(ipu) >= 1 << 62:
                raise NotBulk("too many address groups")
            inv, ng = dense(np, state * len(ipu) + ip_inv)
        of[sel] = inv + base
        base += ng
    return of, base, sel_user, user_state, nstates


def comm_groups(np: Any, samples: Samples, sideband: list[Outgoing], before: Any) -> Groups:
    """Group samples by (tid, the COMM/FORK records of that tid before them)."""
    changes = sorted(
        (int(x.args[1 if x.rtype == K.RECORD_COMM else 2]) << 32) | i  # COMM's tid, FORK's
        for i, x in enumerate(sideband)
        if x.rtype in COMM_CHANGES
    )
    # the tids numbered (contiguous int64: the strided view cost 3x): a group each when no
    # COMM or FORK is among the records (nearly always), else split by those before
    of, count = dense(np, samples["tid"].astype(np.int64))
    if changes:
        tid_place = np.array(changes, dtype=np.uint64)
        tid = samples["tid"].astype(np.uint64)
        nth = np.searchsorted(tid_place, (tid << np.uint64(32)) | before.astype(np.uint64))
        of, count = dense(np, of * (len(tid_place) + 1) + nth)
    return summarize(np, of, count, before)


def chain_groups(
    np: Any, words: Any, samples: Samples, sideband: list[Outgoing], before: Any, mode: Any
) -> Groups:
    """Group samples by (call chain, mode, address, their pid's maps, kernel symbols):
    those resolve their chain alike. words: the data section's u64 words.

    The groups are numbered in the order of those columns (a chain by its hash's value,
    the others by their own). A column alike within every chain orders nothing and is
    left out (mode and address nearly always are: the chain's first entry is the
    address; the states unless a side-band record falls among a chain's samples), and
    of the chains' own sort only the chains whose columns vary are sorted again."""
    chain, count, perm, first = chain_ids(np, words, samples)
    head = first[chain]  # each sample's chain's first sample
    cols, varies = [], None
    for col in (
        mode,
        samples["ip"],
        map_states(np, sideband, samples["pid"], before),
        kernel_states(np, sideband, before),
    ):
        differs = col != col[head]
        if len(col) and bool(differs.any()):
            cols.append(col)
            varies = differs if varies is None else varies | differs
    if varies is None:
        return summarize(np, chain, count, before)
    radixes = [int(col.max()) + 1 for col in cols]
    if count * math.prod(radixes) >= 1 << 62:  # as ranks, each its own sort
        cols = [dense(np, col)[0] for col in cols]
        radixes = [int(col.max()) + 1 for col in cols]
    if count * math.prod(radixes) < 1 << 62:  # one key of all columns: one numbering
        of = chain
        for col, radix in zip(cols, radixes, strict=True):
            of = of * radix + col.astype(np.int64)
        # sorted by chain, the samples of a chain whose columns vary sorted by the key
        # among themselves (those chains' places, in order, hold them in key order)
        again = np.zeros(count, dtype=bool)
        again[chain[varies]] = True
        key = of[perm]
        place = np.flatnonzero(again[chain[perm]])
        sub = np.argsort(key[place])
        order = perm.copy()
        order[place] = perm[place[sub]]
        key[place] = key[place[sub]]
        of, new = number_sorted(np, key, order)
        return summarize(np, of, int(new.sum()), before)
    of = chain
    for col, radix in zip(cols, radixes, strict=True):
        if count * radix >= 1 << 62:
            raise NotBulk("too many call chain groups")
        of, count = dense(np, of * radix + col)
    return summarize(np, of, count, before)


def chain_ids(np: Any, words: Any, samples: Samples) -> tuple[Any, int, Any, Any]:
    """A dense id per sample for its call chain's words (equal ids: equal words), in the
    order of the chains' hashes; the number of ids, a permutation of the samples that
    sorts them by id, and each id's first sample."""
    return sequence_ids(np, words, samples["nr"], samples["chain"] + 1)


def sequence_ids(np: Any, words: Any, nr: Any, first: Any) -> tuple[Any, int, Any, Any]:
    """chain_ids of the sequences words[first[i] : first[i] + nr[i]] (first: word index
    of each one's first entry): call chains, or any sequences of u64 words alike."""
    rows = chain_rows(np, words, nr, first)
    mult = chain_multipliers(np, int(nr.max()) if len(nr) else 0)
    h = np.zeros(len(nr), dtype=np.uint64)
    for idx, m in rows:
        h[idx] = m @ mult[: m.shape[1]]
    h ^= nr.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for full in (False, True):
        ids, nid, perm, rep = _number(np, h, full)
        # a hash is no proof: every chain must equal its group's first, word for word
        r = rep[ids]
        if not (nr[r] != nr).any() and not any(
            bool((gather_rows(np, words, m.shape[1], first[r[idx]]) != m).any()) for idx, m in rows
        ):
            return ids, nid, perm, rep
    raise NotBulk("call chain hash collision")


def chain_rows(np: Any, words: Any, nr: Any, first: Any) -> list[tuple[Any, Any]]:
    """The call chains of the samples, by length: (the samples whose chains have one
    length, a (samples, length) matrix of their words) for each length above 0; one
    gather of whole rows per length (arrays.gather_rows) instead of one index per word."""
    n = len(nr)
    if not n:
        return []
    order = stable_argsort(np, nr)
    s = nr[order]
    cuts = (np.flatnonzero(s[1:] != s[:-1]) + 1).tolist()
    rows = []
    for lo, hi in zip([0, *cuts], [*cuts, n], strict=True):
        length = int(s[lo])
        if length:
            idx = order[lo:hi]
            rows.append((idx, gather_rows(np, words, length, first[idx])))
    return rows


def _number(np: Any, h: Any, full: bool) -> tuple[Any, int, Any, Any]:
    """Number the hashes h 0.. in value order: (each one's number, how many, a
    permutation sorting them, each number's first index). Not full: by the hash's high
    bits, the low ones making room for the index (one sort of values, packed_argsort's
    way, which leaves each number's indexes in order); two hashes alike there are then
    one number, which the caller's proof finds."""
    n = len(h)
    bits = (n - 1).bit_length() if n > 1 else 1
    packed = not full and bits <= 32
    if packed:
        hs, perm = sort_packed(np, (h >> np.uint64(bits + 1)).view(np.int64), bits)
    else:
        perm = np.argsort(h)  # equal hashes in any order: the numbers do not depend on it
        hs = h[perm]
    ids, new = number_sorted(np, hs, perm)
    count = int(new.sum())
    if packed:  # a stable order: each number's first index starts its run
        return ids, count, perm, perm[new]
    first = np.full(count, n, dtype=np.int64)
    np.minimum.at(first, ids, np.arange(n, dtype=np.int64))
    return ids, count, perm, first


@functools.cache
def chain_multipliers(np: Any, n: int) -> Any:
    """Fixed odd 64-bit multipliers, one per call chain position (for hashing chains)."""
    x = (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0xBF58476D1CE4E5B9)) ^ np.uint64(
        0x94D049BB133111EB
    )
    x ^= x >> np.uint64(31)
    return x | np.uint64(1)


class Members:
    """The samples of each group, sorted out the first time one is asked for."""

    def __init__(self, np: Any, of: Any, count: int) -> None:
        self.np = np
        self.of = of
        self.count = count
        self.perm: Any = None
        self.starts: Any = None

    def __call__(self, g: int) -> Any:
        np = self.np
        if self.perm is None:
            self.perm = stable_argsort(np, self.of)
            counts = np.bincount(self.of, minlength=self.count)
            self.starts = np.concatenate(([0], np.cumsum(counts)))
        return self.perm[self.starts[g] : self.starts[g + 1]]
