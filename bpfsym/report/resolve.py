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

import bisect
from typing import Any

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.read.arrays import stable_argsort, unique
from bpfsym.read.bulk import BulkData, NotBulk
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
    dense,
    kernel_map,
    kernel_states,
    map_states,
    sequence_ids,
)
from bpfsym.report.rounds import Outgoing, places
from bpfsym.report.sideband import Sideband
from bpfsym.report.userspace import user_group_syms, user_syms
from bpfsym.report.window import Samples
from bpfsym.symbolize.symbolizer import KERNEL_MAP_DSO, Symbolizer
from bpfsym.symbolize.symbols import UNRESOLVED, Sym


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
        groups = None  # call chain groups: address groups merge them
        if self.callchains and "chain" in samples:
            groups = chain_groups(np, self.data.u64, samples, sideband, before, mode)
        addr, users = address_groups(np, samples, sideband, before, mode, groups)
        addresses = _Addresses(self, samples, addr, mode, users, sideband)
        probes: list[_Probe] = [addresses]
        maps = None
        if users is not None:
            pid = samples["pid"][users.groups.first].tolist()
            maps = _MapsSeen(self.sideband.sym, users.groups.at, pid)
            probes.append(maps)
        comms = None
        flt = self.filter if self.filter is not None and self.filter.hides_any else None
        if self.thread or (flt is not None and flt.comms is not None):
            comms = _Comms(np, self.ids, samples, comm_groups(np, samples, sideband, before))
            probes.append(comms)
        chains = None
        if groups is not None:
            chains = _Chains(self, samples, groups, mode, sideband)
            probes.append(chains)
            if chains.user_maps is not None:
                probes.append(chains.user_maps)
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


def plain_kernel(
    np: Any, sym: Symbolizer, sideband: list[Outgoing], ips: Any
) -> tuple[Any, Any, Any] | None:
    """Of kernel addresses ips, those whose symbol is the kallsyms one whatever the
    side-band records of this delivery do (no BPF function or out-of-line code ever
    covers them, kallsyms names them, no kernel map comes or goes): their indexes in ips,
    the kallsyms symbols among them (unique) and which of those each is. None: none."""
    kallsyms = sym.kernel
    if kallsyms is None or not len(kallsyms) or not len(ips):
        return None
    lo, hi, out_of_line = _kernel_code(sym, sideband)
    covered = np.zeros(len(ips), dtype=bool)  # by code other than kallsyms', some time
    if hi > lo:
        covered |= _within(np, ips, lo, hi)
    for a, e in out_of_line:
        covered |= _within(np, ips, a, e)
    # kallsyms names only what lies in the kernel's own map (modules: their maps)
    vmlinux = sym.vmlinux_range()
    if vmlinux is None or any(map(kernel_map, sideband)):
        return None
    covered |= ~_within(np, ips, *vmlinux)
    for a, e, dso in sym.kmaps:
        if dso != KERNEL_MAP_DSO:
            covered |= _within(np, ips, a, e)
    index = np.searchsorted(kallsyms.addr_array(np), ips, side="right").astype(np.int64) - 1
    plain = np.flatnonzero(~covered & (index >= 0))
    if not len(plain):
        return None
    symbols, which = unique(np, index[plain])
    return plain, symbols, which


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
    order = stable_argsort(np, at)
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
        of this delivery do, resolved in one lookup: (group indexes, symbol ids)."""
        np = self.np
        kernel_groups = np.flatnonzero(self.mode == F.MISC_KERNEL)
        got = plain_kernel(np, self.sym, sideband, group_ip[kernel_groups])
        if got is None:
            return None
        plain, symbols, which = got
        sym_id, kernel_sym = self.d.ids.sym_id, self.sym.kernel_sym
        ids = np.array([sym_id(kernel_sym(i)) for i in symbols.tolist()], dtype=np.int64)
        return kernel_groups[plain], ids[which]

    def resolve(self, g: int) -> None:
        sym = self.sym
        m, ip = self.mode_l[g], self.ip[g]
        if m == F.MISC_KERNEL:
            s = sym.resolve_kernel(ip, self.t_first[g])
            entry = sym.kcache.get(ip)
            if type(entry) is tuple:  # BPF candidates: which one depends on the time
                members = self.members(g)
                ts = self.t[members]
                times = _load_times(entry)
                if bisect.bisect_right(times, int(ts.min())) != bisect.bisect_right(
                    times, int(ts.max())
                ):  # a load or unload among them: each span's samples named apart
                    self.timed.append((members, self._by_time(times, ip, ts)))
                # else one span holds them all, and its symbol is the first sample's (s)
        else:
            s = sym.resolve(m, self.pid[g], ip, self.t_first[g])
        self.sym_ids[g] = self.d.ids.sym_id(s)

    def _by_time(self, times: list[int], ip: int, ts: Any) -> Any:
        """Symbol ids for samples at a BPF address, by which function was alive when
        (times: the loads and unloads of its candidates, sorted)."""
        np = self.np
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


def _load_times(entry: tuple) -> list[int]:
    """The loads and unloads of the functions a BPF address may belong to (a
    Symbolizer.kcache entry: side file's, perf.data's, fallback), sorted: the samples
    between two of them are named alike."""
    side, perf, _fallback = entry
    return sorted({x for f in (*side, *perf) for x in (f.load, f.unload) if x is not None})


class _MapsSeen(_Probe):
    """User-mode states (a pid and its memory map changes so far): the maps of each, as
    the walk meets them at the state's place (at: one where the state holds)."""

    def __init__(self, sym: Symbolizer, at: Any, pid: list[int]) -> None:
        self.sym = sym
        self.at = at
        self.pid = pid
        self.maps: list[tuple] = [()] * len(pid)

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
    state those depend on resolve their chain once, where the first of them goes out.

    A chain's nodes are resolved in bulk: every distinct (node, the state its symbol
    depends on) is a slot, resolved once, at the first group that holds it, where the
    walk puts that group; each group's chain is then its slots' symbols (report order:
    the ids are numbered in the walk's order of the groups, as they were met). A group
    whose chain the slots cannot say (no node, a mode other than kernel or user, BPF
    nodes whose samples straddle a load or unload) is resolved on its own as before."""

    def __init__(
        self, d: BulkDelivery, samples: Samples, groups: Groups, mode: Any,
        sideband: list[Outgoing],
    ) -> None:  # fmt: skip
        np = d.np
        self.np = np
        self.sym = d.sideband.sym
        self.ids = d.ids
        self.groups = groups
        self.t = samples["t"]
        first = groups.first
        self.members = Members(np, groups.of, groups.count)
        word_at = samples["chain"][first] + 1  # each chain's first entry
        self.word_at = word_at.tolist()
        self.nr = samples["nr"][first].tolist()
        ip = samples["ip"][first]
        self.ip = ip.tolist()
        pid = samples["pid"][first]
        self.pid = pid.tolist()
        cpumode = mode[first]
        self.mode = cpumode.tolist()
        self.t_first = self.t[first].tolist()
        self.words = d.data.u64  # the data section's words, in the file's byte order
        self.times_gen, self.times = -1, None  # BPF load/unload times, as of kgen
        n = groups.count
        self.order = stable_argsort(np, groups.at)  # the walk's order of the groups
        self.alone: list[Any] = [None] * n  # chains of the groups resolved on their own
        self._plan(samples, word_at, ip, pid, cpumode, sideband)

    def _plan(
        self, samples: Samples, word_at: Any, ip: Any, pid: Any, cpumode: Any,
        sideband: list[Outgoing],
    ) -> None:  # fmt: skip
        """The slots of every group's nodes, and which slots each group resolves first."""
        np, sym, n = self.np, self.sym, self.groups.count
        nr = samples["nr"][self.groups.first].astype(np.int64)
        total = int(nr.sum())
        starts = np.cumsum(nr) - nr
        pos = np.arange(total, dtype=np.int64) - np.repeat(starts, nr)
        gidx = np.repeat(np.arange(n, dtype=np.int64), nr)
        w = self.words[np.repeat(word_at, nr) + pos]
        marker = w >= np.uint64(F.CONTEXT_MAX)
        # each node's mode: its chain's last marker before it, else the sample's cpumode
        last = np.maximum.accumulate(np.where(marker, np.arange(total, dtype=np.int64), -1))
        by_marker = np.full(total, -1, dtype=np.int64)  # -1: a mode slots do not resolve
        by_marker[w == np.uint64(F.CONTEXT_KERNEL)] = F.MISC_KERNEL
        by_marker[w == np.uint64(F.CONTEXT_USER)] = F.MISC_USER
        inherit = last < np.repeat(starts, nr)
        node_mode = np.where(
            inherit, cpumode.astype(np.int64)[gidx], by_marker[np.maximum(last, 0)]
        )
        node = ~marker
        ng, nw, nmode, npos = gidx[node], w[node], node_mode[node], pos[node]
        nnodes = np.bincount(ng, minlength=n)
        nstart = np.concatenate(([0], np.cumsum(nnodes))).astype(np.int64)
        has = nnodes > 0
        first_w = np.zeros(n, dtype=np.uint64)
        first_w[has] = nw[nstart[:-1][has]]
        own = has & (first_w != ip)  # the sample's own entry before the chain
        kernel, user = cpumode == F.MISC_KERNEL, cpumode == F.MISC_USER
        alone = ~has | ~(kernel | user)
        alone |= np.bincount(ng[(nmode != F.MISC_KERNEL) & (nmode != F.MISC_USER)], minlength=n) > 0
        # the sample's own entry is the first node, of another mode: resolved in the walk
        first_mode = np.full(n, -1, dtype=np.int64)
        first_mode[has] = nmode[nstart[:-1][has]]
        odd = has & ~own & (first_mode != cpumode.astype(np.int64))
        # BPF code: which function a node names depends on the sample's time
        lo, hi, _ool = _kernel_code(sym, sideband)
        knodes = nmode == F.MISC_KERNEL
        if hi > lo:
            in_bpf = knodes & _within(np, nw, lo, hi)
            own_bpf = kernel & _within(np, ip, lo, hi)
        else:
            in_bpf, own_bpf = np.zeros(len(nw), dtype=bool), np.zeros(n, dtype=bool)
        timed = own_bpf | (np.bincount(ng[in_bpf], minlength=n) > 0)
        bucket = np.zeros(n, dtype=np.int64)
        if bool(timed.any()):
            times = _bpf_times(sym) + [
                x.args[5] for x in sideband if x.rtype == K.RECORD_KSYMBOL and x.args[5]
            ]
            tarr = np.array(sorted(set(times)), dtype=np.uint64)
            bucket = np.searchsorted(tarr, self.t[self.groups.first], side="right") + 1
            of = self.groups.of
            members = np.flatnonzero(timed[of])
            each = np.searchsorted(tarr, self.t[members], side="right") + 1
            straddle = of[members][each != bucket[of[members]]]
            alone[straddle] = True  # members between different load/unload times
        # slots: (what, state, bucket, address); what: 0 kernel node, 1 user node,
        # 2 the sample's own kernel entry, 3 its own user entry
        kepoch = kernel_states(np, sideband, self.groups.at, maps=True)
        ustate = dense(np, map_states(np, sideband, pid, self.groups.at))[0]
        nodes = ~alone[ng]
        ng, nw, npos, knodes, in_bpf = (
            ng[nodes],
            nw[nodes],
            npos[nodes],
            knodes[nodes],
            in_bpf[nodes],
        )
        ogs = np.flatnonzero(own & ~alone)
        okernel = kernel[ogs]
        what = np.concatenate((np.where(knodes, 0, 1), np.where(okernel, 2, 3)))
        occ_g = np.concatenate((ng, ogs))
        state = np.where(what % 2 == 0, kepoch[occ_g], ustate[occ_g])
        bkt = np.concatenate(
            (np.where(in_bpf, bucket[ng], 0), np.where(own_bpf[ogs], bucket[ogs], 0))
        )
        addr = np.concatenate((nw, ip[ogs]))
        values, addr_id = unique(np, addr)
        room = [
            4,
            int(state.max()) + 1 if len(state) else 1,
            int(bkt.max()) + 1 if len(bkt) else 1,
            len(values),
        ]
        if room[0] * room[1] * room[2] * max(room[3], 1) >= 1 << 62:
            raise NotBulk("too many call chain slots")
        key = ((what * room[1] + state) * room[2] + bkt) * room[3] + addr_id
        slot, nslots = dense(np, key)
        # the first occurrence of each slot: in walk order, the own entry before the nodes
        rank = np.empty(n, dtype=np.int64)
        rank[self.order] = np.arange(n, dtype=np.int64)
        width = int(nr.max()) + 2 if len(nr) else 2
        okey = rank[occ_g] * width + np.concatenate((npos + 1, np.zeros(len(ogs), dtype=np.int64)))
        firsts = np.full(nslots, BIG, dtype=np.int64)
        np.minimum.at(firsts, slot, okey)
        hit = okey == firsts[slot]  # one occurrence per slot: okey is unique to each
        fmin = np.empty(nslots, dtype=np.int64)
        fmin[slot[hit]] = np.flatnonzero(hit)
        slot_what, slot_addr = what[fmin], addr[fmin]
        self.slot_what = slot_what.tolist()
        self.slot_addr = slot_addr.tolist()
        self.slot_sym: list[Any] = [None] * nslots
        self.slot_unres = [False] * nslots
        self.slot_own: list[Any] = [None] * nslots  # unresolved slots: the entry's own symbol
        # kernel nodes whose symbol is the kallsyms one whatever the delivery's side-band
        # records do: named now, in one lookup, and no place in the walk
        walk = np.ones(nslots, dtype=bool)
        knode_slots = np.flatnonzero(slot_what == 0)
        got = plain_kernel(np, sym, sideband, slot_addr[knode_slots]) if len(knode_slots) else None
        if got is not None:
            plain, symbols, which = got
            named = [sym.kernel_sym(i) for i in symbols.tolist()]
            slot_sym = self.slot_sym
            for k, j in zip(knode_slots[plain].tolist(), which.tolist(), strict=True):
                slot_sym[k] = named[j]
            walk[knode_slots[plain]] = False
        # user node slots: named in bulk after the walk, against the maps their states had
        # in it (report.userspace), but for those an odd group reads in the walk
        nn = len(ng)
        read_in_walk = np.zeros(nslots, dtype=bool)
        read_in_walk[slot[:nn][odd[ng]]] = True
        self.user_slots = np.flatnonzero((slot_what == 1) & ~read_in_walk)  # nodes only
        self.user_maps: _MapsSeen | None = None
        if len(self.user_slots):
            g0 = occ_g[fmin[self.user_slots]]  # the group each is resolved at
            self.user_state, nstates = dense(np, ustate[g0])
            place = np.full(nstates, BIG, dtype=np.int64)
            np.minimum.at(place, self.user_state, self.groups.at[g0])
            state_pid = np.zeros(nstates, dtype=np.int64)
            state_pid[self.user_state] = pid[g0]  # a state is one pid's
            self.user_maps = _MapsSeen(sym, place, state_pid.tolist())
            walk[self.user_slots] = False
        new_at: dict[int, list[int]] = {}
        by_first = stable_argsort(np, firsts)
        by_first = by_first[walk[by_first]]
        groups_l = occ_g[fmin[by_first]].tolist()
        for k, g in zip(by_first.tolist(), groups_l, strict=True):
            new = new_at.get(g)
            if new is None:
                new_at[g] = [k]
            else:
                new.append(k)
        self.new_at = new_at
        # the walk visits only the groups that resolve something at their place
        walked = alone | odd
        walked[occ_g[fmin[walk]]] = True
        self.at = np.where(walked, self.groups.at, BIG)
        self.node_slots_a = slot[:nn]
        self.node_slots = self.node_slots_a.tolist()
        self.nstart_a = np.concatenate(([0], np.cumsum(np.bincount(ng, minlength=n))))
        self.nstart = self.nstart_a.tolist()
        own_slot = np.full(n, -1, dtype=np.int64)
        own_slot[ogs] = slot[nn:]
        self.own_slot_a = own_slot
        self.own_slot = own_slot.tolist()
        self.alone_a, self.odd_a = alone, odd
        self.alone_l = alone.tolist()
        self.odd = odd.tolist()
        self.late: dict[int, Sym] = {}  # odd groups' own entry, when nodes are unresolved

    def resolve(self, g: int) -> None:
        new = self.new_at.get(g)
        if new is not None:
            sym = self.sym
            what_l, addr_l, syms, unres = (
                self.slot_what,
                self.slot_addr,
                self.slot_sym,
                self.slot_unres,
            )
            for k in new:
                what, e = what_l[k], addr_l[k]
                if what == 0:
                    s = sym.knode.get(e) or sym.kernel_node(e, self.t_first[g])
                    if s.origin is UNRESOLVED:  # named by its raw address; as the own entry:
                        self.slot_own[k] = sym.resolve_kernel(e, self.t_first[g])
                elif what == 1:
                    unode = sym.unode.get(self.pid[g])
                    s = (unode and unode.get(e)) or sym.user_node(self.pid[g], e)
                    if s.origin is UNRESOLVED:
                        self.slot_own[k] = sym.resolve_user(self.pid[g], e)
                elif what == 2:
                    s = sym.resolve_kernel(e, self.t_first[g])
                else:
                    s = sym.resolve_user(self.pid[g], e)
                syms[k] = s
                unres[k] = s.origin is UNRESOLVED
        if self.alone_l[g]:
            self.alone[g] = self._alone(g)
        elif self.odd[g] and any(
            map(self.slot_unres.__getitem__, self.node_slots[self.nstart[g] : self.nstart[g + 1]])
        ):
            # unresolved nodes: the sample's own entry goes first when it has no symbol
            self.late[g] = self.sym.resolve(self.mode[g], self.pid[g], self.ip[g], self.t_first[g])

    def _alone(self, g: int) -> Any:
        """The chain of group g resolved on its own: a chain, or (members, a chain each)
        when its samples straddle BPF load/unload times."""
        sym = self.sym
        at, nr = self.word_at[g], self.nr[g]
        words = self.words[at : at + nr].tolist()
        mode, pid, ip = self.mode[g], self.pid[g], self.ip[g]
        chain, timeless = sym.resolve_chain(mode, pid, ip, words, self.t_first[g])
        if timeless:
            return chain
        # through BPF code: alike between two load/unload times
        np = self.np
        members = self.members(g)
        ts = self.t[members]
        if self.times_gen != sym.kgen:
            self.times_gen, self.times = sym.kgen, np.array(_bpf_times(sym), dtype=np.uint64)
        bucket = np.searchsorted(self.times, ts, side="right")
        if len(members) == 1 or bucket.min() == bucket.max():
            return chain  # all between the same two times
        each = []
        for b in unique(np, bucket)[0].tolist():
            sel = np.flatnonzero(bucket == b)
            each.append((sel, sym.resolve_chain(mode, pid, ip, words, int(ts[sel[0]]))[0]))
        return members, each

    def _user_slots(self) -> None:
        """Name the user node slots left to after the walk, all at once: each as its
        first group would have in the walk (Symbolizer.user_node: the symbol, or the
        address in its DSO when it has none, whose own symbol slot_own keeps)."""
        np, sym = self.np, self.sym
        k_l = self.user_slots.tolist()
        if not k_l or self.user_maps is None:
            return
        addr = np.array([self.slot_addr[k] for k in k_l], dtype=np.uint64)
        codes, syms = user_syms(np, sym, self.user_state, addr, self.user_maps.maps)
        slot_sym, unres, slot_own = self.slot_sym, self.slot_unres, self.slot_own
        for k, c in zip(k_l, codes.tolist(), strict=True):
            u = syms[c]
            s = sym.node(u, self.slot_addr[k])
            if s.origin is UNRESOLVED:
                slot_own[k] = u
            slot_sym[k] = s
            unres[k] = s.origin is UNRESOLVED

    def _plain(self) -> tuple[Any, Any, Any]:
        """The groups whose chain is their node slots' symbols (after their own entry's,
        when it has a slot), none unresolved: (a mask of them; a number per group, alike
        for plain groups whose chains are the same symbols, -1 for the others; the groups
        chain_of visits, in walk order: all but the plain ones after the first of their
        number). The symbols alike are found as call chains alike are
        (groups.sequence_ids), over the numbers of the slots' symbols."""
        np = self.np
        n = self.groups.count
        objects = np.fromiter(map(id, self.slot_sym), dtype=np.int64, count=len(self.slot_sym))
        sym_no = unique(np, objects)[1].astype(np.uint64)  # one number per Sym
        unres = np.array(self.slot_unres, dtype=bool)
        own, nstart = self.own_slot_a, self.nstart_a[:-1]
        nnodes = np.diff(self.nstart_a)
        some = nnodes > 0
        # unresolved nodes per group; the first node's
        bad = np.bincount(np.repeat(np.arange(n), nnodes), unres[self.node_slots_a], n) > 0
        first_unres = np.zeros(n, dtype=bool)
        first_unres[some] = unres[self.node_slots_a[nstart[some]]]
        has_own = own >= 0
        plain = some & ~self.alone_a & ~self.odd_a
        plain &= np.where(has_own, ~unres[np.maximum(own, 0)] & ~bad, ~first_unres)
        seq = np.full(n, -1, dtype=np.int64)
        pg = np.flatnonzero(plain)
        if not len(pg):
            return plain, seq, self.order
        # each plain group's symbols, its own entry's first, in one flat array
        own_p = has_own[pg].astype(np.int64)
        length = nnodes[pg] + own_p
        start = np.cumsum(length) - length
        flat = np.empty(int(length.sum()), dtype=np.uint64)
        flat[start[own_p > 0]] = sym_no[own[pg[own_p > 0]]]
        k = nnodes[pg]
        within = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
        flat[np.repeat(start + own_p, k) + within] = sym_no[
            self.node_slots_a[np.repeat(nstart[pg], k) + within]
        ]
        seq[pg] = sequence_ids(np, flat, length, start)[0]
        # visit every group but a plain one whose symbols a plain group before it had
        rank = np.empty(n, dtype=np.int64)
        rank[self.order] = np.arange(n)
        first = np.full(int(seq.max()) + 1, n, dtype=np.int64)
        np.minimum.at(first, seq[pg], rank[pg])
        keep = ~plain
        keep[self.order[first]] = True
        return plain, seq, self.order[keep[self.order]]

    def chain_of(self) -> Any:
        """Each sample's chain id (the chains numbered in the walk's order of groups)."""
        np = self.np
        self._user_slots()
        chain_id = self.ids.chain_id
        syms, unres, node_slots, nstart = (
            self.slot_sym,
            self.slot_unres,
            self.node_slots,
            self.nstart,
        )
        own_slot, alone, late, slot_own, odd = (
            self.own_slot,
            self.alone,
            self.late,
            self.slot_own,
            self.odd,
        )
        get = syms.__getitem__
        n = self.groups.count
        ids = [0] * n
        timed: list[tuple[Any, list[int]]] = []
        plain, seq, visit = self._plain()
        memo = [-1] * (int(seq.max()) + 1 if len(seq) else 0)
        seq_l = seq.tolist()
        for g in visit.tolist():
            c = alone[g]
            if c is None:
                sl = node_slots[nstart[g] : nstart[g + 1]]
                nodes = tuple(map(get, sl))
                o = own_slot[g]
                if o >= 0:
                    own = syms[o]
                    if unres[o] or any(map(unres.__getitem__, sl)):
                        if unres[o] and nodes[0] is not own:
                            nodes = (own, *nodes)
                    else:
                        nodes = (own, *nodes)
                elif odd[g]:
                    own = late.get(g)
                    if own is not None and own.origin is UNRESOLVED and nodes[0] is not own:
                        nodes = (own, *nodes)
                elif unres[sl[0]]:
                    # the first node is the sample's own entry: without a symbol, the own
                    # entry (as the sample names it) goes first when it is not that node
                    own = slot_own[sl[0]]
                    if own is not nodes[0]:
                        nodes = (own, *nodes)
                ids[g] = i = chain_id(nodes)
                q = seq_l[g]
                if q >= 0:
                    memo[q] = i
            elif type(c) is tuple:
                ids[g] = chain_id(c)
            else:
                members, each = c
                got = [0] * len(members)
                for sel, chain in each:
                    i = chain_id(chain)
                    for q in sel.tolist():
                        got[q] = i
                timed.append((members, got))
        ids_a = np.array(ids, dtype=np.int64)
        ids_a[plain] = np.array(memo, dtype=np.int64)[seq[plain]]
        chain_of = ids_a[self.groups.of]
        for members, got in timed:
            chain_of[members] = got
        return chain_of


def _kernel_code(
    sym: Symbolizer, sideband: list[Outgoing]
) -> tuple[int, int, list[tuple[int, int]]]:
    """[lo, hi) around every BPF function known now or registered by the sideband, and
    the [start, end) of the out-of-line code known or registered: what is not kallsyms'."""
    lo, hi = sym.bpf_envelope()
    out_of_line = [(a, a + max(n, 1)) for a, (n, _) in sym.ool.items()]
    for x in sideband:
        if x.rtype == K.RECORD_KSYMBOL:
            addr, length, ktype = x.args[0], x.args[1], x.args[2]
            if ktype == K.KSYMBOL_TYPE_BPF:
                lo, hi = min(lo, addr), max(hi, addr + max(length, 1))
            else:
                out_of_line.append((addr, addr + max(length, 1)))
    return lo, hi, out_of_line


def _within(np: Any, x: Any, lo: int, hi: int) -> Any:
    """lo <= x < hi for uint64 x, hi up to 2**64 (the last address included)."""
    if hi >= 1 << 64:
        return x >= np.uint64(lo)
    return (x >= np.uint64(lo)) & (x < np.uint64(hi))


def _bpf_times(sym: Symbolizer) -> list[int]:
    """Every load and unload time of the BPF functions known now, sorted."""
    funcs = (*sym.bpf_side.funcs, *sym.bpf_perf.funcs)
    return sorted({x for f in funcs for x in (f.load, f.unload) if x is not None})
