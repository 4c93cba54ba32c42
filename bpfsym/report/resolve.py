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

from typing import Any

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.read.arrays import unique
from bpfsym.read.bulk import BulkData
from bpfsym.report.accumulate import Accumulator, Interned
from bpfsym.report.filters import SampleFilter
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
from bpfsym.symbolize.symbolizer import KERNEL_MAP_DSO, Symbolizer

MAP_RECORDS = (K.RECORD_MMAP, K.RECORD_MMAP2)


class BulkDelivery:
    """Delivers batches of samples and side-band records, adding the samples up."""

    filter: SampleFilter | None = None  # --comms, --pid, --tid: samples without rows

    def __init__(
        self,
        np: Any,
        data: BulkData,
        sideband: Sideband,
        ids: Interned,
        acc: Accumulator,
        callchains: bool,
        thread: bool,
    ) -> None:
        self.np = np
        self.data = data
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
        first = int(before.min())
        if first:  # what goes out before every sample (the recording's initial kernel
            # and module maps): applied now, so that kernel addresses resolve in bulk
            for x in sideband[:first]:
                apply(x.rtype, x.args, x.misc)
            sideband = sideband[first:]
            before = before - first
        self.acc.new_events(samples)
        mode = (samples["misc"] & 7).astype(np.int64)  # PERF_RECORD_MISC_CPUMODE_MASK
        addr, users = address_groups(np, samples, sideband, before, mode)
        addresses = _Addresses(self, samples, addr, mode, users, sideband)
        probes: list[_Probe] = [addresses]
        maps = None
        if users is not None:
            maps = _MapsSeen(self.sideband.sym, samples, users)
            probes.append(maps)
        comms = None
        flt = self.filter if self.filter is not None and self.filter.hides_any else None
        if self.thread or (flt is not None and flt.comms is not None):
            comms = _Comms(np, self.ids, samples, comm_groups(np, samples, sideband, before))
            probes.append(comms)
        chains = None
        if self.callchains and "chain" in samples:
            groups = chain_groups(np, self.data.u64, samples, sideband, before, mode)
            chains = _Chains(self, samples, groups, mode)
            probes.append(chains)
        _walk(np, probes, sideband, apply)
        sym_of = addresses.sym_of(maps)
        comm_of = comms.comm_of() if comms is not None else None
        hidden = None
        if flt is not None:
            hidden = flt.hidden(np, samples, comm_of, self.ids.comm_names)
            if not self.thread:
                comm_of = None  # not a part of the rows' keys
        self.acc.rows(samples, sym_of, addr.of, addr.count, comm_of, hidden)
        if chains is not None:
            self.acc.stacks(samples, sym_of, chains.chain_of(), comm_of, hidden)


class _Probe:
    """Groups of one kind resolved in the walk: each at its place."""

    at: Any  # each group's place (BIG: resolved elsewhere)

    def resolve(self, g: int) -> None:
        raise NotImplementedError


def _walk(np: Any, probes: list[_Probe], sideband: list[Outgoing], apply: Any) -> None:
    """Apply the side-band records in order, resolving before record i the groups placed
    at i (at equal places: in the order of probes, then of groups: the order the ids are
    numbered in, which orders the rows)."""
    at = np.concatenate([p.at for p in probes])
    kind = np.concatenate([np.full(len(p.at), k, dtype=np.int64) for k, p in enumerate(probes)])
    index = np.concatenate([np.arange(len(p.at)) for p in probes])
    order = np.argsort(at, kind="stable")
    at_l, kind_l, index_l = at[order].tolist(), kind[order].tolist(), index[order].tolist()
    resolvers = [p.resolve for p in probes]
    p = 0
    nprobe = len(at_l)
    for place in range(len(sideband) + 1):
        while p < nprobe and at_l[p] == place:
            resolvers[kind_l[p]](index_l[p])
            p += 1
        if place < len(sideband):
            x = sideband[place]
            apply(x.rtype, x.args, x.misc)


class _Addresses(_Probe):
    """Address groups: a symbol each (per time bucket at BPF addresses)."""

    def __init__(
        self,
        d: BulkDelivery,
        samples: Samples,
        groups: Groups,
        mode: Any,
        users: UserStates | None,
        sideband: list[Outgoing],
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
        self.plain = self._plain_kernel(sideband, samples["ip"][first])
        if self.plain is not None:
            self.at[self.plain[0]] = BIG  # resolved already
        self.ip = samples["ip"][first].tolist()
        self.pid = samples["pid"][first].tolist()
        self.mode_l = self.mode.tolist()
        self.t_first = self.t[first].tolist()
        self.sym_ids = [0] * groups.count
        self.timed: list[tuple[Any, Any]] = []  # (samples, their symbol ids): BPF, by time
        self.members = Members(np, groups.of, groups.count)

    def _plain_kernel(self, sideband: list[Outgoing], group_ip: Any) -> tuple[Any, Any] | None:
        """Kernel groups whose symbol is the kallsyms one whatever the side-band records
        of this delivery do (no BPF function or out-of-line code ever covers their
        address), resolved in one lookup: (group indexes, symbol ids)."""
        np, sym = self.np, self.sym
        kallsyms = sym.kernel
        if kallsyms is None or not len(kallsyms):
            return None
        kernel_groups = np.flatnonzero(self.mode == F.MISC_KERNEL)
        if not len(kernel_groups):
            return None
        ips = group_ip[kernel_groups]
        lo, hi = sym.bpf_envelope()
        out_of_line = [(a, a + max(n, 1)) for a, (n, _) in sym.ool.items()]
        for x in sideband:
            if x.rtype == K.RECORD_KSYMBOL:
                addr, length, ktype = x.args[0], x.args[1], x.args[2]
                if ktype == K.KSYMBOL_TYPE_BPF:
                    lo, hi = min(lo, addr), max(hi, addr + max(length, 1))
                else:
                    out_of_line.append((addr, addr + max(length, 1)))
        covered = np.zeros(len(ips), dtype=bool)  # by code other than kallsyms', some time
        if hi > lo:
            covered |= (ips >= np.uint64(lo)) & (ips < np.uint64(hi))
        for a, e in out_of_line:
            covered |= (ips >= np.uint64(a)) & (ips < np.uint64(min(e, (1 << 64) - 1)))
        # kallsyms names only what lies in the kernel's own map (modules: their maps)
        vmlinux = sym.vmlinux_range()
        if vmlinux is None or any(x.rtype in MAP_RECORDS and x.args[6] == F.MISC_KERNEL
                                  for x in sideband):  # fmt: skip
            return None
        covered |= ips < np.uint64(vmlinux[0])
        if vmlinux[1] < 1 << 64:
            covered |= ips >= np.uint64(vmlinux[1])
        for a, e, dso in sym.kmaps:
            if dso != KERNEL_MAP_DSO:
                covered |= (ips >= np.uint64(a)) & (ips < np.uint64(min(e, (1 << 64) - 1)))
        index = np.searchsorted(kallsyms.addr_array(np), ips, side="right").astype(np.int64) - 1
        plain = np.flatnonzero(~covered & (index >= 0))
        if not len(plain):
            return None
        symbols, which = unique(np, index[plain])
        sym_id = self.d.ids.sym_id
        ids = np.array([sym_id(sym.kernel_sym(i)) for i in symbols.tolist()], dtype=np.int64)
        return kernel_groups[plain], ids[which]

    def resolve(self, g: int) -> None:
        sym = self.sym
        m, ip = self.mode_l[g], self.ip[g]
        if m == F.MISC_KERNEL:
            s = sym.resolve_kernel(ip, self.t_first[g])
            entry = sym.kcache.get(ip)
            if type(entry) is tuple:  # BPF candidates: which one depends on the time
                members = self.members(g)
                self.timed.append((members, self._by_time(entry, ip, self.t[members])))
        else:
            s = sym.resolve(m, self.pid[g], ip, self.t_first[g])
        self.sym_ids[g] = self.d.ids.sym_id(s)

    def _by_time(self, entry: tuple, ip: int, ts: Any) -> Any:
        """Symbol ids for samples at a BPF address, by which function was alive when."""
        np = self.np
        side, perf, _fallback = entry  # Symbolizer.kcache's entry for a BPF address
        times = sorted({x for f in (*side, *perf) for x in (f.load, f.unload) if x is not None})
        bucket = np.searchsorted(np.array(times, dtype=np.uint64), ts, side="right")
        ids = np.empty(len(ts), dtype=np.int64)
        for b in unique(np, bucket)[0].tolist():
            sel = bucket == b
            t0 = int(ts[np.flatnonzero(sel)[0]])
            ids[sel] = self.d.ids.sym_id(self.sym.resolve_kernel(ip, t0))
        return ids

    def sym_of(self, maps: _MapsSeen | None) -> Any:
        """Each sample's symbol id, once the walk is done (maps: what it saw of the user
        states' memory maps)."""
        np = self.np
        groups = self.groups
        group_sym = np.array(self.sym_ids, dtype=np.int64)
        if self.plain is not None:
            group_sym[self.plain[0]] = self.plain[1]
        users = self.users
        if maps is not None and users is not None:
            user_groups = np.flatnonzero(self.mode == F.MISC_USER)
            state_of = np.zeros(len(groups.of), dtype=np.int64)
            state_of[users.samples] = users.groups.of
            first = groups.first[user_groups]
            user_group_syms(
                np, self.sym, self.d.ids, group_sym, user_groups, state_of[first],
                self.ip_all[first], maps.maps,
            )  # fmt: skip
        sym_of = group_sym[groups.of]
        for members, ids in self.timed:
            sym_of[members] = ids
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
        self.word_at = (samples["chain"][first] + 1).tolist()  # each chain's first entry
        self.nr = samples["nr"][first].tolist()
        self.ip = samples["ip"][first].tolist()
        self.pid = samples["pid"][first].tolist()
        self.mode = mode[first].tolist()
        self.t_first = self.t[first].tolist()
        self.words = d.data.u64  # the data section's words, in the file's byte order
        self.times_gen, self.times = -1, None  # BPF load/unload times, as of kgen

    def resolve(self, g: int) -> None:
        sym = self.sym
        at, nr = self.word_at[g], self.nr[g]
        words = self.words[at : at + nr].tolist()
        mode, pid, ip = self.mode[g], self.pid[g], self.ip[g]
        chain, timeless = sym.resolve_chain(mode, pid, ip, words, self.t_first[g])
        if timeless:
            self.chain_ids[g] = self.ids.chain_id(chain)
            return
        # through BPF code: alike between two load/unload times
        np = self.np
        members = self.members(g)
        ts = self.t[members]
        if self.times_gen != sym.kgen:
            self.times_gen, self.times = sym.kgen, np.array(_bpf_times(sym), dtype=np.uint64)
        bucket = np.searchsorted(self.times, ts, side="right")
        if len(members) == 1 or bucket.min() == bucket.max():
            self.chain_ids[g] = self.ids.chain_id(chain)  # all between the same two times
            return
        ids = [0] * len(members)
        for b in unique(np, bucket)[0].tolist():
            sel = np.flatnonzero(bucket == b)
            chain = sym.resolve_chain(mode, pid, ip, words, int(ts[sel[0]]))[0]
            chain_id = self.ids.chain_id(chain)
            for q in sel.tolist():
                ids[q] = chain_id
        self.timed.append((members, ids))

    def chain_of(self) -> Any:
        """Each sample's chain id."""
        chain_of = self.np.array(self.chain_ids, dtype=self.np.int64)[self.groups.of]
        for members, ids in self.timed:
            chain_of[members] = ids
        return chain_of


def _bpf_times(sym: Symbolizer) -> list[int]:
    """Every load and unload time of the BPF functions known now, sorted."""
    funcs = (*sym.bpf_side.funcs, *sym.bpf_perf.funcs)
    return sorted({x for f in funcs for x in (f.load, f.unload) if x is not None})
