"""The bulk pass's delivery: a batch of samples and the side-band records that go out
among them, in the order the record-by-record pass would deliver them.

Samples are grouped (report.groups) and every group is resolved once, where its first
sample goes out: one walk over the batch's side-band records applies them in order and,
before each, resolves the groups placed there. Kernel addresses no BPF function or
out-of-line code ever covered are named from kallsyms in one lookup beforehand; user
addresses in bulk afterwards, against the memory maps the walk saw (report.userspace);
BPF addresses are further split by the load/unload times of the functions that ever sat
there, since a sample's time picks among them (symbolize.timeline.BpfTimeline.pick).
"""

from __future__ import annotations

import struct
from typing import Any

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.read.arrays import unique
from bpfsym.read.bulk import BulkData
from bpfsym.report.accumulate import Accumulator, Interned
from bpfsym.report.groups import (
    BIG,
    Groups,
    Members,
    UserStates,
    address_groups,
    chain_groups,
    comm_groups,
)
from bpfsym.report.rounds import Outgoing, places
from bpfsym.report.sideband import Sideband
from bpfsym.report.userspace import user_group_syms
from bpfsym.report.window import Samples
from bpfsym.symbolize.symbolizer import Symbolizer


class BulkDelivery:
    """Delivers batches of samples and side-band records, adding the samples up."""

    def __init__(
        self,
        np: Any,
        data: BulkData,
        little: bool,
        sideband: Sideband,
        ids: Interned,
        acc: Accumulator,
        callchains: bool,
        thread: bool,
    ) -> None:
        self.np = np
        self.data = data
        self.little = little
        self.sideband = sideband
        self.ids = ids
        self.acc = acc
        self.callchains = callchains
        self.thread = thread  # rows keyed by comm

    def deliver(self, samples: Samples | None, sideband: list[Outgoing]) -> None:
        """Deliver the samples among the side-band records (in delivery order)."""
        np = self.np
        apply = self.sideband.apply
        if samples is None or not len(samples["t"]):
            for x in sideband:
                apply(x.rtype, x.args, x.misc)
            return
        before = places(np, samples, sideband)
        self.acc.new_events(samples)
        mode = (samples["misc"] & 7).astype(np.int64)  # PERF_RECORD_MISC_CPUMODE_MASK
        addr, users = address_groups(np, samples, sideband, before, mode)
        addresses = _Addresses(self, samples, addr, mode, users)
        plain = self._plain_kernel(sideband, addresses.mode, samples["ip"][addr.first])
        if plain is not None:
            addresses.resolved(plain[0])
        probes: list[_Probe] = [addresses]
        maps = None
        if users is not None:
            maps = _MapsSeen(self.sideband.sym, samples, users)
            probes.append(maps)
        comms = None
        if self.thread:
            comms = _Comms(np, self.ids, samples, comm_groups(np, samples, sideband, before))
            probes.append(comms)
        chains = None
        if self.callchains and "chain" in samples:
            groups = chain_groups(np, self.data.u64, samples, sideband, before, mode)
            chains = _Chains(self, samples, groups, mode)
            probes.append(chains)
        _walk(np, probes, sideband, apply)
        sym_of = addresses.sym_of(plain, maps)
        comm_of = comms.comm_of() if comms is not None else None
        self.acc.rows(samples, sym_of, addr.of, addr.count, comm_of)
        if chains is not None:
            self.acc.stacks(samples, sym_of, chains.chain_of(), comm_of)

    def _plain_kernel(
        self, sideband: list[Outgoing], group_mode: Any, group_ip: Any
    ) -> tuple[Any, Any] | None:
        """Kernel groups whose symbol is the kallsyms one whatever the side-band records
        of this delivery do (no BPF function or out-of-line code ever covers their
        address), resolved in one lookup: (group indexes, symbol ids)."""
        np, sym = self.np, self.sideband.sym
        ks = sym.kernel
        if ks is None or not len(ks):
            return None
        kern = np.flatnonzero(group_mode == F.MISC_KERNEL)
        if not len(kern):
            return None
        ips = group_ip[kern]
        lo, hi = sym.bpf_envelope()
        ool = [(a, a + max(n, 1)) for a, (n, _) in sym.ool.items()]
        for x in sideband:
            if x.rtype == K.RECORD_KSYMBOL:
                addr, length, ktype = x.args[0], x.args[1], x.args[2]
                if ktype == K.KSYMBOL_TYPE_BPF:
                    lo, hi = min(lo, addr), max(hi, addr + max(length, 1))
                else:
                    ool.append((addr, addr + max(length, 1)))
        slow = np.zeros(len(ips), dtype=bool)
        if hi > lo:
            slow |= (ips >= np.uint64(lo)) & (ips < np.uint64(hi))
        for a, e in ool:
            slow |= (ips >= np.uint64(a)) & (ips < np.uint64(min(e, (1 << 64) - 1)))
        idx = np.searchsorted(ks.addr_array(np), ips, side="right").astype(np.int64) - 1
        ok = np.flatnonzero(~slow & (idx >= 0))
        if not len(ok):
            return None
        u, inv = unique(np, idx[ok])
        sym_id = self.ids.sym_id
        ids = np.array([sym_id(sym.kernel_sym(i)) for i in u.tolist()], dtype=np.int64)
        return kern[ok], ids[inv]


class _Probe:
    """Groups of one kind resolved in the walk: each at its place."""

    at: Any  # each group's place (BIG: resolved elsewhere)

    def resolve(self, g: int) -> None:
        raise NotImplementedError


def _walk(np: Any, probes: list[_Probe], sideband: list[Outgoing], apply: Any) -> None:
    """Apply the side-band records in order, resolving before record c the groups placed
    at c (at equal places: in the order of probes, then of groups; ids are numbered so)."""
    at = np.concatenate([p.at for p in probes])
    kind = np.concatenate([np.full(len(p.at), k, dtype=np.int64) for k, p in enumerate(probes)])
    index = np.concatenate([np.arange(len(p.at)) for p in probes])
    order = np.argsort(at, kind="stable")
    at_l, kind_l, index_l = at[order].tolist(), kind[order].tolist(), index[order].tolist()
    resolvers = [p.resolve for p in probes]
    p = 0
    nprobe = len(at_l)
    for c in range(len(sideband) + 1):
        while p < nprobe and at_l[p] == c:
            resolvers[kind_l[p]](index_l[p])
            p += 1
        if c < len(sideband):
            x = sideband[c]
            apply(x.rtype, x.args, x.misc)


class _Addresses(_Probe):
    """Address groups: a symbol each (per time bucket at BPF addresses)."""

    def __init__(
        self, d: BulkDelivery, samples: Samples, groups: Groups, mode: Any, users: Any
    ) -> None:
        np = d.np
        self.np = np
        self.d = d
        self.sym = d.sideband.sym
        self.groups = groups
        self.users = users
        self.t = samples["t"]
        self.ip_all = samples["ip"]
        first = groups.first
        self.mode = mode[first]  # per group
        self.at = groups.at.copy()
        if users is not None:
            self.at[self.mode == F.MISC_USER] = BIG  # in bulk, after the walk
        self.ip = samples["ip"][first].tolist()
        self.pid = samples["pid"][first].tolist()
        self.mode_l = self.mode.tolist()
        self.t_first = self.t[first].tolist()
        self.sym_ids = [0] * groups.count
        self.timed: list[tuple[Any, Any]] = []  # (samples, their symbol ids): BPF, by time
        self.members = Members(np, groups.of, groups.count)

    def resolved(self, groups: Any) -> None:
        """These groups are resolved already: out of the walk."""
        self.at[groups] = BIG

    def resolve(self, g: int) -> None:
        sym = self.sym
        m, ip = self.mode_l[g], self.ip[g]
        if m == F.MISC_KERNEL:
            s = sym.resolve_kernel(ip, self.t_first[g])
            entry = sym.kcache.get(ip)
            if type(entry) is tuple:  # BPF candidates: which one depends on the time
                mem = self.members(g)
                self.timed.append((mem, self._by_time(entry, ip, self.t[mem])))
        else:
            s = sym.resolve(m, self.pid[g], ip, self.t_first[g])
        self.sym_ids[g] = self.d.ids.sym_id(s)

    def _by_time(self, entry: tuple, ip: int, ts: Any) -> Any:
        """Symbol ids for samples at a BPF address, by which function was alive when."""
        np = self.np
        side, perfc, _fallback = entry
        bps = sorted({x for f in (*side, *perfc) for x in (f.load, f.unload) if x is not None})
        bucket = np.searchsorted(np.array(bps, dtype=np.uint64), ts, side="right")
        ids = np.empty(len(ts), dtype=np.int64)
        for bk in unique(np, bucket)[0].tolist():
            sel = bucket == bk
            t0 = int(ts[np.flatnonzero(sel)[0]])
            ids[sel] = self.d.ids.sym_id(self.sym.resolve_kernel(ip, t0))
        return ids

    def sym_of(self, plain: tuple[Any, Any] | None, maps: _MapsSeen | None) -> Any:
        """Each sample's symbol id, once the walk is done."""
        np = self.np
        groups = self.groups
        group_sym = np.array(self.sym_ids, dtype=np.int64)
        if plain is not None:
            group_sym[plain[0]] = plain[1]
        if maps is not None:
            users: UserStates = self.users
            user_groups = np.flatnonzero(self.mode == F.MISC_USER)
            state_of = np.zeros(len(groups.of), dtype=np.int64)
            state_of[users.samples] = users.groups.of
            first = groups.first[user_groups]
            user_group_syms(
                np, self.sym, self.d.ids, group_sym, user_groups, state_of[first],
                self.ip_all[first], maps.maps,
            )  # fmt: skip
        sym_of = group_sym[groups.of]
        for mem, ids in self.timed:
            sym_of[mem] = ids
        return sym_of


class _MapsSeen(_Probe):
    """User-mode states: the memory maps of each, as its first sample meets them."""

    def __init__(self, sym: Symbolizer, samples: Samples, users: UserStates) -> None:
        self.sym = sym
        self.at = users.groups.at
        self.pid = samples["pid"][users.groups.first].tolist()
        self.maps: list[tuple] = [()] * users.groups.count

    def resolve(self, g: int) -> None:
        self.maps[g] = tuple(self.sym.maps.get(self.pid[g], ()))


class _Comms(_Probe):
    """Comm groups: the comm of each thread as its first sample meets it."""

    def __init__(self, np: Any, ids: Interned, samples: Samples, groups: Groups) -> None:
        self.np = np
        self.ids = ids
        self.groups = groups
        self.at = groups.at
        self.tid = samples["tid"][groups.first].tolist()
        self.comm_ids = [0] * groups.count

    def resolve(self, g: int) -> None:
        self.comm_ids[g] = self.ids.comm_id(self.tid[g])

    def comm_of(self) -> Any:
        """Each sample's comm id."""
        return self.np.array(self.comm_ids, dtype=self.np.int64)[self.groups.of]


class _Chains(_Probe):
    """Call chain groups: samples alike in call chain, address, mode and the side-band
    state those depend on resolve their chain once, where the first of them goes out."""

    def __init__(self, d: BulkDelivery, samples: Samples, groups: Groups, mode: Any) -> None:
        np = d.np
        self.np = np
        self.sym = d.sideband.sym
        self.ids = d.ids
        self.groups = groups
        self.at = groups.at
        self.t = samples["t"]
        first = groups.first
        self.chain_ids = [-1] * groups.count  # -1: by time, see timed
        self.timed: list[tuple[Any, list[int]]] = []
        self.members = Members(np, groups.of, groups.count)
        self.word_at = (d.data.base + 8 * (samples["chain"][first] + 1)).tolist()
        self.nr = samples["nr"][first].tolist()
        self.ip = samples["ip"][first].tolist()
        self.pid = samples["pid"][first].tolist()
        self.mode = mode[first].tolist()
        self.t_first = self.t[first].tolist()
        self.buf = d.data.buf
        self.order = "<" if d.little else ">"
        self.times_gen, self.times = -1, None  # BPF load/unload times, as of kgen

    def resolve(self, g: int) -> None:
        sym = self.sym
        a, nr = self.word_at[g], self.nr[g]
        words = struct.unpack(f"{self.order}{nr}Q", self.buf[a : a + 8 * nr])
        m, pid, ip = self.mode[g], self.pid[g], self.ip[g]
        res, timeless = sym.resolve_chain(m, pid, ip, words, self.t_first[g])
        if timeless:
            self.chain_ids[g] = self.ids.chain_id(res)
            return
        # through BPF code: alike between two load/unload times
        np = self.np
        mem = self.members(g)
        ts = self.t[mem]
        if self.times_gen != sym.kgen:
            self.times_gen, self.times = sym.kgen, np.array(_bpf_times(sym), dtype=np.uint64)
        bucket = np.searchsorted(self.times, ts, side="right")
        if len(mem) == 1 or bucket.min() == bucket.max():
            self.chain_ids[g] = self.ids.chain_id(res)  # all between the same two times
            return
        ids = [0] * len(mem)
        for bk in unique(np, bucket)[0].tolist():
            sel = np.flatnonzero(bucket == bk)
            res = sym.resolve_chain(m, pid, ip, words, int(ts[sel[0]]))[0]
            cid = self.ids.chain_id(res)
            for q in sel.tolist():
                ids[q] = cid
        self.timed.append((mem, ids))

    def chain_of(self) -> Any:
        """Each sample's chain id."""
        chain_of = self.np.array(self.chain_ids, dtype=self.np.int64)[self.groups.of]
        for mem, ids in self.timed:
            chain_of[mem] = ids
        return chain_of


def _bpf_times(sym: Symbolizer) -> list[int]:
    """Every load and unload time of the BPF functions known now, sorted."""
    funcs = (*sym.bpf_side.funcs, *sym.bpf_perf.funcs)
    return sorted({x for f in funcs for x in (f.load, f.unload) if x is not None})
