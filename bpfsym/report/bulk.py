"""The bulk (numpy) pass of a report: the same delivery as the record-by-record pass,
samples located and decoded a window at a time, grouped by the side-band state that
matters to them, and resolved once per group."""

from __future__ import annotations

import bisect
import contextlib
import functools
import os
import pickle
import signal
import struct
import threading
from typing import Any

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.read.arrays import unique
from bpfsym.read.bulk import NotBulk
from bpfsym.read.perfdata import PerfData, field_offsets
from bpfsym.report.aggregates import Aggregates, EventStats
from bpfsym.report.analysis import (
    BULK_WINDOW,
    FIRST_SHARE,
    PARALLEL_MIN_BYTES,
    TAIL_WINDOW,
)
from bpfsym.report.progress import Progress as _Progress
from bpfsym.report.query import ReportQuery
from bpfsym.report.sideband import SIDEBAND, Sideband
from bpfsym.symbolize.symbolizer import Symbolizer
from bpfsym.symbolize.symbols import Sym

MAP_CHANGES = (K.RECORD_MMAP, K.RECORD_MMAP2, K.RECORD_COMM, K.RECORD_FORK)

KERNEL_CHANGES = (K.RECORD_KSYMBOL, K.RECORD_BPF_EVENT)

COMM_CHANGES = (K.RECORD_COMM, K.RECORD_FORK)

BULK_REFUSED = (
    F.RECORD_COMPRESSED,
    F.RECORD_COMPRESSED2,
    F.RECORD_HEADER_ATTR,
    F.RECORD_HEADER_FEATURE,
)

BULK_NEEDS = K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME


class BulkPass:
    """The same pass as _Aggregator with numpy doing the per-sample work.

    Records are located and sample fields decoded for a window of the data section at
    once. Delivery follows the same rounds: a record goes out at the first round flush
    whose limit covers its time (in (time, arrival) order), so each sample is given its
    place among the side-band records. Symbolizer state only changes at side-band
    records, and only for some samples (a pid's maps, a tid's comm, kernel BPF symbols),
    so samples are grouped by (address, the state that matters to them), each group is
    resolved once while the side-band records are applied in order, and BPF addresses
    are further split by the load/unload times of the functions that ever sat there.
    """

    def __init__(self, pd: PerfData, query: ReportQuery, cap: Any, np: Any, bulk: Any) -> None:
        attrs = pd.attrs
        ev0 = attrs[0] if attrs else None
        if ev0 is None or ev0.sample_type & BULK_NEEDS != BULK_NEEDS or ev0.read_size is None:
            raise NotBulk("samples of this file need the record-by-record reader")
        # events whose samples are laid out as the first event's; others (perf -a without
        # -F adds a dummy:HG without PERIOD for its side-band records) are fine while none
        # of their samples shows up (each sample's event found as PerfData.attr_of_sample does)
        alike = [a.sample_type == ev0.sample_type and a.read_size == ev0.read_size for a in attrs]
        self.foreign = None if all(alike) else np.array([not x for x in alike], dtype=bool)
        self.pd = pd
        self.query = query
        self.np = np
        self.sideband = Sideband(pd, cap, query.kallsyms, np, query.host)
        self.agg = Aggregates()
        self.bulk = bulk
        self.sideband.set_header()  # file mode: before any side-band record
        self.ev0 = ev0
        offs = field_offsets(pd.L.sample_prefix(ev0.sample_type))
        self.prefix_size = ev0.prefix.size
        self.pos = offs
        self.sample_layout = self._sample_layout()
        self.pending: dict[str, Any] | None = None
        self.pending_sb: list[tuple] = []
        self.limits: list[int] = [0]
        self.max_t = 0
        self.nfr = 0
        self.seq = 0
        self.fixed_periods = [int(a.attr.sample_period) or 1 for a in attrs]
        ids = sorted((i, a.index) for a in attrs for i in a.ids)
        self.id_keys = np.array([i for i, _ in ids], dtype=np.uint64)
        self.id_attrs = np.array([a for _, a in ids], dtype=np.int64)
        self.sym_ids: dict[int, int] = {}
        self.syms: list[Sym] = []
        self.timed_cache: dict[tuple, tuple[Sym, ...]] = {}
        self.comm_ids: dict[str, int] = {}
        self.comm_names: list[str] = []
        self._user_state: tuple[Any, Any, int] | None = None  # user samples, their states
        self.chain_ids: dict[tuple[Sym, ...], int] = {}
        self.chain_list: list[tuple[Sym, ...]] = []

    # ---- reading -----------------------------------------------------------

    def run(self) -> None:
        halves = self._halves()
        if halves is None:
            self._part(BULK_WINDOW, None, False)
        else:
            self._run_split(*halves)
        if not self.sideband.ready:
            self.sideband.prepare()

    def _halves(self) -> tuple[list[int], list[int], int] | None:
        """When two processes should share the samples (a large file and a second CPU):
        the window sizes of the first and of the second process, and how many windows
        make the first one's share (the same in both lists); None to read it in one."""
        size = self.bulk.nwords * 8
        if self.query.parallel is None:
            try:
                cpus = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                cpus = os.cpu_count() or 1
            if size < PARALLEL_MIN_BYTES or cpus < 2:
                return None
        elif not self.query.parallel or size < 16:
            return None
        first = max(int(size * FIRST_SHARE) // 8 * 8, 8)
        k = -(-first // BULK_WINDOW)
        m = max(-(-(size - first) // BULK_WINDOW), 1)
        share = [max(-(-first // (8 * k)) * 8, 8)] * k
        # past its share, the first process only waits for its last samples' round
        return share + [TAIL_WINDOW], share + [max(-(-(size - first) // (8 * m)) * 8, 8)], k

    def _part(self, window: int | list[int], k: int | None, second: bool) -> None:
        """Read the records in windows of about window bytes and deliver the samples of
        every window (k None), of the first k (second False) or of the rest (second True).

        Every part applies the side-band records in the same order as a single pass
        would, so each sample it keeps meets the state it would have met there; the
        first part stops once its last samples have gone out."""
        pd, b = self.pd, self.bulk
        share = sum(window[:k]) if isinstance(window, list) and k else None
        progress = _Progress(pd, share)
        progress.on = progress.on and not second  # one bar: the first part's
        windows = b.windows(window)
        idx = 0
        while True:
            if k is not None and not second and idx >= k and self.pending is None:
                return  # the rest of the file only concerns the other part
            offs = next(windows, None)
            if offs is None:
                break
            mine = k is None or (idx >= k) == second
            end = int(offs[-1])
            last = end + int(b.u16[4 * end + 3]) // 8 >= b.nwords
            self._window(offs, last, mine)
            if mine:
                progress.tick(8 * end)
            idx += 1
        if self.pending is not None or self.pending_sb:
            self._window(None, True, True)
        self.agg.records = self.seq
        progress.done()

    def _run_split(self, first: list[int], second: list[int], k: int) -> None:
        """The first half of the samples here, the second in a forked child whose
        aggregates come back through a pipe (pickled) and are merged."""
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            if self.sideband.host is not None:
                self.sideband.host = self.sideband.host.inherit()  # the text read once, for both
            try:
                try:
                    self._part(second, k, True)
                    payload = pickle.dumps(("ok", self._portable()), pickle.HIGHEST_PROTOCOL)
                except BaseException as e:  # noqa: BLE001 - told to the parent, which decides
                    payload = pickle.dumps(("error", f"{type(e).__name__}: {e}"))
                with os.fdopen(wfd, "wb") as w:
                    w.write(payload)
            finally:
                os._exit(0)
        os.close(wfd)
        reader = os.fdopen(rfd, "rb")
        try:
            self._part(first, k, False)
            got = reader.read()  # to the end: the child has written all it will
        except BaseException:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        finally:
            reader.close()
        # the child's exit (unmapping its memory) takes a while: reaped on a thread
        threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
        try:
            status, body = pickle.loads(got)
        except Exception:  # noqa: BLE001 - the child died before it could say
            raise NotBulk("the second reading process failed") from None
        if status != "ok":
            raise NotBulk(f"the second reading process failed: {body}")
        self._merge(body)

    def _portable(self) -> tuple:
        """What the parent needs of this part: per event (first-sample order) its counts,
        rows and stacks, plus the totals; symbols travel as pickled Sym objects."""
        events = [
            (e, st.samples, st.period, st.rows, st.stacks) for e, st in self.agg.events.items()
        ]
        return events, self.agg.total, self.agg.lost, self.seq, self.sideband.sym.side_used

    def _merge(self, body: tuple) -> None:
        """Add the other part's aggregates, its symbols made these when they are alike."""
        events, total, lost, seq, side_used = body
        same: dict[tuple, Sym] = {}
        for ours in self.agg.events.values():
            for key in ours.rows:
                for x in key:
                    if type(x) is Sym:
                        same.setdefault(_sym_identity(x), x)
            for _head, chain in ours.stacks:
                for x in chain:
                    same.setdefault(_sym_identity(x), x)

        def mine(x: Sym) -> Sym:
            got = same.get(_sym_identity(x))
            if got is None:
                got = same[_sym_identity(x)] = x
                self.sideband.sym.adopt(x)
            return got

        for e, samples, period, rows, stacks in events:
            st = self.agg.events.get(e)
            if st is None:
                st = self.agg.events[e] = EventStats(self.pd.attrs[e])
            st.samples += samples
            st.period += period
            for key, pn in rows.items():
                _add_to(st.rows, tuple(mine(x) if type(x) is Sym else x for x in key), pn)
            for (head, chain), pn in stacks.items():
                _add_to(st.stacks, (head, tuple(mine(x) for x in chain)), pn)
        self.agg.total += total
        self.agg.lost += lost
        self.agg.records = max(self.seq, seq)
        self.sideband.sym.side_used = self.sideband.sym.side_used or side_used

    def _window(self, offs: Any, last: bool, samples: bool) -> None:
        np, b, pd = self.np, self.bulk, self.pd
        if offs is None:
            offs = np.zeros(0, dtype=np.int64)
        n = len(offs)
        u16, u32 = b.u16, b.u32
        types = u32[2 * offs]
        seqs = np.arange(self.seq + 1, self.seq + 1 + n, dtype=np.int64)
        self.seq += n
        is_sample = types == K.RECORD_SAMPLE
        other = np.flatnonzero(~is_sample)
        t_all = np.zeros(n, dtype=np.uint64)
        # -- samples (of another part: only their times, which set the round limits)
        sidx = np.flatnonzero(is_sample)
        if samples:
            smp = self._samples(offs[sidx], seqs[sidx])
            if smp is not None:
                t_all[sidx] = smp["t"]
        else:
            smp = None
            t_all[sidx] = b.u64[offs[sidx] + 1 + self.pos["time"] // 8]
        # -- everything else, in file order
        sb_new: list[tuple] = []
        fr_at: list[int] = []
        sizes = u16[4 * offs[other] + 3].tolist()
        miscs = u16[4 * offs[other] + 2].tolist()
        for j, (i, rtype) in enumerate(zip(other.tolist(), types[other].tolist(), strict=True)):
            start = b.base + 8 * int(offs[i])
            size = sizes[j]
            if rtype in SIDEBAND:
                item = self.sideband.decode(rtype, miscs[j], b.buf, start, size, start)
                t = item[0] or 0
                t_all[i] = t
                sb_new.append((t, int(seqs[i]), rtype, item[1], miscs[j], i))
            elif rtype == F.RECORD_FINISHED_ROUND:
                fr_at.append(i)
            elif rtype == K.RECORD_LOST:
                if samples:  # losses go with the part that has the samples
                    self.agg.lost += self.sideband.lost(rtype, b.buf, start, size)
            elif rtype == K.RECORD_LOST_SAMPLES:
                if samples:
                    self.agg.lost += self.sideband.lost(rtype, b.buf, start, size)
            elif rtype == F.RECORD_ID_INDEX:
                pd._id_index(b.buf, start, size, start)
            elif rtype in BULK_REFUSED:
                raise NotBulk(f"record type {rtype}")
        # -- rounds: flush j uses the newest time seen before round j-1 ended
        nfr0 = self.nfr
        if fr_at:
            running = np.maximum.accumulate(t_all)
            for i in fr_at:
                seen = int(running[i - 1]) if i > 0 else 0
                self.max_t = max(self.max_t, seen)
                self.limits.append(self.max_t)
            self.nfr += len(fr_at)
        if n:
            self.max_t = max(self.max_t, int(t_all.max()))
        fr_pos = np.array(fr_at, dtype=np.int64)
        # arrival round of each record: flushes it could first go out in
        if smp is not None:
            smp["j"] = nfr0 + np.searchsorted(fr_pos, sidx, side="left")
        for k, x in enumerate(sb_new):
            sb_new[k] = (*x[:5], nfr0 + bisect.bisect_left(fr_at, x[5]))
        # -- merge with what waits from earlier windows, pick what goes out now
        if self.pending is not None:
            smp = self.pending if smp is None else _concat(np, self.pending, smp)
        sbs = self.pending_sb + sb_new
        limits = np.array(self.limits[: self.nfr], dtype=np.uint64)
        final = self.nfr  # the flush at the end of the data
        if smp is not None:
            k = np.maximum(smp["j"], np.searchsorted(limits, smp["t"], side="left"))
            smp["k"] = k
            if last:
                go = np.ones(len(k), dtype=bool)
            else:
                go = k < final
            cut = int(np.argmin(go)) if len(go) else 0  # the first that waits
            if bool(go.all()):
                now, self.pending = smp, None
            elif not bool(go[cut:].any()):
                # the usual case: those that wait all come last, so slices (no copies)
                now = {name: v[:cut] for name, v in smp.items()}
                self.pending = {name: v[cut:] for name, v in smp.items()}
            else:
                now = {name: v[go] for name, v in smp.items()}
                self.pending = {name: v[~go] for name, v in smp.items()}
        else:
            now = None
        sb_now: list[tuple] = []
        self.pending_sb = []
        for x in sbs:
            kk = max(x[5], bisect.bisect_left(self.limits, x[0], 0, self.nfr))
            if last or kk < final:
                sb_now.append((kk, x[0], x[1], x[2], x[3], x[4]))
            else:
                self.pending_sb.append(x)
        sb_now.sort()
        if now is not None and len(now["t"]) or sb_now:
            if not self.sideband.ready and now is not None and len(now["t"]):
                self.sideband.prepare()  # kernel symbols: side-band records do without them
            self._deliver_bulk(now, sb_now)

    def _sample_layout(self) -> tuple[Any, int]:
        """The fixed head of every sample (header, prefix fields, callchain length) as a
        numpy record type over whole words, and its length in words."""
        np, pd = self.np, self.pd
        e = "<" if pd.little else ">"
        # (name, numpy kind, offset) of the fields used, from the formats declarations
        fields = _unsigned_fields(pd.L.header, 0, ("misc", "size"))
        prefix = pd.L.sample_prefix(self.ev0.sample_type)
        fields += _unsigned_fields(prefix, 8, ("ip", "pid", "tid", "time", "cpu", "period"))
        if len(pd.attrs) > 1 and pd.sample_id_pos is not None:
            fields.append(("id", "u8", 8 + pd.sample_id_pos))
        end = 8 + self.prefix_size
        if self.ev0.sample_type & K.SAMPLE_CALLCHAIN:
            nr_pos = 8 + self.prefix_size + (self.ev0.read_size or 0)
            fields.append(("nr", "u8", nr_pos))
            end = nr_pos + 8
        words = -(-end // 8)
        dtype = np.dtype(
            {
                "names": [f[0] for f in fields],
                "formats": [e + f[1] for f in fields],
                "offsets": [f[2] for f in fields],
                "itemsize": 8 * words,
            }
        )
        return dtype, words

    def _samples(self, so: Any, seqs: Any) -> dict[str, Any] | None:
        """Fields of the samples starting at words so, as arrays."""
        np, b = self.np, self.bulk
        if not len(so):
            return None
        dtype, words = self.sample_layout
        size = b.u16[4 * so + 3].astype(np.int64)
        if bool((size < 8 * words).any()):
            raise NotBulk("sample shorter than its sample_type")
        # each sample's head words in one gather (rows of consecutive words), then
        # read as records: one pass over the samples' memory instead of one per field
        rec = b.heads(words)[so].view(dtype)[:, 0]
        out: dict[str, Any] = {
            "off": so,
            "seq": seqs,
            "misc": rec["misc"],
            "ip": rec["ip"],
            "pid": rec["pid"],
            "tid": rec["tid"],
            "t": rec["time"],
        }
        if "cpu" in self.pos:
            out["cpu"] = rec["cpu"].astype(np.int64)
        else:
            out["cpu"] = np.full(len(so), -1, dtype=np.int64)
        if "id" not in dtype.names:
            ev = np.zeros(len(so), dtype=np.int64)
        else:
            ids = rec["id"]
            at = np.searchsorted(self.id_keys, ids)
            at = np.minimum(at, len(self.id_keys) - 1)
            ev = np.where(self.id_keys[at] == ids, self.id_attrs[at], 0)
            if self.foreign is not None and bool(self.foreign[ev].any()):
                raise NotBulk("a sample of an event with another sample layout")
        out["ev"] = ev
        if "period" in self.pos:
            out["period"] = rec["period"]
        else:
            out["period"] = np.array(self.fixed_periods, dtype=np.uint64)[ev]
        if "nr" in dtype.names:
            nr_at = so + (words - 1)
            nr = rec["nr"]
            room = (so + size // 8 - nr_at - 1).astype(np.uint64)
            if bool((nr > room).any()):
                raise NotBulk("callchain runs past its sample")
            out["chain"] = nr_at
            out["nr"] = nr.astype(np.int64)
        return out

    # ---- delivering ----------------------------------------------------------

    def _sym_id(self, s: Sym) -> int:
        i = self.sym_ids.get(id(s))
        if i is None:
            i = self.sym_ids[id(s)] = len(self.syms)
            self.syms.append(s)
        return i

    def _comm_id(self, tid: int) -> int:
        c = self.sideband.sym.comms.get(tid)
        if c is None:
            c = f":{tid}"
        i = self.comm_ids.get(c)
        if i is None:
            i = self.comm_ids[c] = len(self.comm_names)
            self.comm_names.append(c)
        return i

    def _deliver_bulk(self, smp: dict[str, Any] | None, sbs: list[tuple]) -> None:
        """Deliver samples and side-band records (sbs sorted by (round, time, arrival))."""
        np = self.np
        sym = self.sideband.sym
        nsb = len(sbs)
        if smp is None or not len(smp["t"]):
            for x in sbs:
                self.sideband.apply(x[3], x[4], x[5])
            return
        t = smp["t"]
        n = len(t)
        cnt = self._places(smp, sbs)
        self._new_events(smp)
        want_comm = "comm" in self.query.keys or "pid" in self.query.keys
        mode = (smp["misc"] & 7).astype(np.int64)
        g_inv, ng = self._sym_groups(smp, sbs, cnt, mode)
        big = np.iinfo(np.int64).max
        g_rep = np.full(ng, big, dtype=np.int64)
        np.minimum.at(g_rep, g_inv, cnt)
        g_first = np.full(ng, big, dtype=np.int64)
        np.minimum.at(g_first, g_inv, np.arange(n, dtype=np.int64))
        chains = self.query.callchains and "chain" in smp
        mode_g = mode[g_first]
        user_state = self._user_state
        user_bulk = user_state is not None
        if user_state is not None:
            # user-space groups resolve after the pass, in bulk, against the memory maps
            # their (pid, map changes) state had when its first sample went out
            u_sel, u_state, nus = user_state
            g_rep[mode_g == F.MISC_USER] = big
            u_rep = np.full(nus, big, dtype=np.int64)
            np.minimum.at(u_rep, u_state, cnt[u_sel])
            u_first = np.full(nus, big, dtype=np.int64)
            np.minimum.at(u_first, u_state, u_sel)
            u_pid = smp["pid"][u_first].tolist()
            u_maps: list[tuple] = [()] * nus
        plain = self._plain_kernel(sbs, mode_g, smp["ip"][g_first])
        if plain is not None:
            g_rep[plain[0]] = big  # resolved already: out of the pass below
        probes = [(g_rep, 0)]
        if user_bulk:
            probes.append((u_rep, 2))
        c_inv = None
        c_tid: list[int] = []
        nc = 0
        if want_comm:
            c_inv, nc, c_first, c_rep = self._comm_groups(smp, sbs, cnt)
            c_tid = smp["tid"][c_first].tolist()
            probes.append((c_rep, 1))
        if chains:
            # samples alike in call chain, address, mode and the side-band state those
            # depend on resolve their chain once, where the first of them goes out
            h_inv, nh = self._chain_groups(smp, sbs, cnt, mode)
            h_rep = np.full(nh, big, dtype=np.int64)
            np.minimum.at(h_rep, h_inv, cnt)
            h_first = np.full(nh, big, dtype=np.int64)
            np.minimum.at(h_first, h_inv, np.arange(n, dtype=np.int64))
            probes.append((h_rep, 3))
            h_res = [-1] * nh  # the chain (index into chain_list) of each group, or -1: by time
            h_timed: list[tuple[Any, list[int]]] = []
            h_members = _Members(np, h_inv, nh)
            h_at = (self.bulk.base + 8 * (smp["chain"][h_first] + 1)).tolist()
            h_nr = smp["nr"][h_first].tolist()
            h_ip = smp["ip"][h_first].tolist()
            h_pid = smp["pid"][h_first].tolist()
            h_mode = mode[h_first].tolist()
            h_t = t[h_first].tolist()
            buf = self.bulk.buf
            e = "<" if self.pd.little else ">"
            bps_gen, bps = -1, None
        # -- one pass over the side-band records, resolving each group where it lives
        rep = np.concatenate([p for p, _ in probes])
        kind = np.concatenate([np.full(len(p), k, dtype=np.int64) for p, k in probes])
        index = np.concatenate([np.arange(len(p)) for p, _ in probes])
        order = np.argsort(rep, kind="stable")
        rep_l, kind_l, index_l = rep[order].tolist(), kind[order].tolist(), index[order].tolist()
        first_l = g_first.tolist()
        ip_f = smp["ip"][g_first].tolist()
        pid_f = smp["pid"][g_first].tolist()
        mode_f = mode[g_first].tolist()
        t_f = t[g_first].tolist()
        g_sym = [0] * ng
        c_comm = [0] * nc
        timed: list[tuple[Any, Any]] = []  # (samples, their symbol ids): BPF, by time
        members = _Members(np, g_inv, ng)
        p = 0
        nprobe = len(rep_l)
        for c in range(nsb + 1):
            while p < nprobe and rep_l[p] == c:
                gi = index_l[p]
                p += 1
                if kind_l[p - 1] == 1:
                    c_comm[gi] = self._comm_id(c_tid[gi])
                    continue
                if kind_l[p - 1] == 2:
                    u_maps[gi] = tuple(sym.maps.get(u_pid[gi], ()))
                    continue
                if kind_l[p - 1] == 3:
                    a = h_at[gi]
                    words = struct.unpack(f"{e}{h_nr[gi]}Q", buf[a : a + 8 * h_nr[gi]])
                    m, pid, ip = h_mode[gi], h_pid[gi], h_ip[gi]
                    res, timeless = sym.resolve_chain(m, pid, ip, words, h_t[gi])
                    if timeless:
                        h_res[gi] = self._chain_id(res)
                        continue
                    # through BPF code: alike between two load/unload times
                    mem = h_members(gi)
                    ts = t[mem]
                    if bps_gen != sym.kgen:
                        bps_gen, bps = sym.kgen, np.array(_bpf_times(sym), dtype=np.uint64)
                    bucket = np.searchsorted(bps, ts, side="right")
                    if len(mem) == 1 or bucket.min() == bucket.max():
                        h_res[gi] = self._chain_id(res)  # all between the same two times
                        continue
                    ids = [0] * len(mem)
                    for bk in unique(np, bucket)[0].tolist():
                        sel = np.flatnonzero(bucket == bk)
                        res = sym.resolve_chain(m, pid, ip, words, int(ts[sel[0]]))[0]
                        cid = self._chain_id(res)
                        for q in sel.tolist():
                            ids[q] = cid
                    h_timed.append((mem, ids))
                    continue
                m, ip = mode_f[gi], ip_f[gi]
                if m == F.MISC_KERNEL:
                    s = sym.resolve_kernel(ip, t_f[gi])
                    entry = sym.kcache.get(ip)
                    if type(entry) is tuple:
                        mem = members(gi)
                        ids = self._by_time(entry, ip, t[mem])
                        timed.append((mem, ids))
                elif m == F.MISC_USER:
                    s = sym.resolve_user(pid_f[gi], ip)
                else:
                    s = sym.resolve(m, pid_f[gi], ip, t_f[gi])
                g_sym[gi] = self._sym_id(s)
            if c < nsb:
                x = sbs[c]
                self.sideband.apply(x[3], x[4], x[5])
        del first_l
        g_sym_a = np.array(g_sym, dtype=np.int64)
        if plain is not None:
            g_sym_a[plain[0]] = plain[1]
        if user_bulk:
            g_user = np.flatnonzero(mode_g == F.MISC_USER)
            state_of = np.zeros(n, dtype=np.int64)
            state_of[u_sel] = u_state
            self._user_bulk(g_sym_a, g_user, state_of[g_first[g_user]], smp["ip"][g_first[g_user]],
                            u_maps)  # fmt: skip
        sym_of = g_sym_a[g_inv]
        for mem, ids in timed:
            sym_of[mem] = ids
        self._rows(smp, sym_of, g_inv, ng, c_inv, c_comm)
        if chains:
            chain_of = np.array(h_res, dtype=np.int64)[h_inv]
            for mem, cids in h_timed:
                chain_of[mem] = cids
            self._stacks(smp, sym_of, chain_of, c_inv, c_comm)

    def _plain_kernel(self, sbs: list[tuple], mode_g: Any, ip_g: Any) -> tuple[Any, Any] | None:
        """Kernel groups whose symbol is the kallsyms one whatever the side-band records
        of this delivery do (no BPF function or out-of-line code ever covers their
        address), resolved in one lookup: (group indexes, symbol ids)."""
        np, sym = self.np, self.sideband.sym
        ks = sym.kernel
        if ks is None or not len(ks):
            return None
        kern = np.flatnonzero(mode_g == F.MISC_KERNEL)
        if not len(kern):
            return None
        ips = ip_g[kern]
        lo, hi = sym.bpf_envelope()
        ool = [(a, a + max(n, 1)) for a, (n, _) in sym.ool.items()]
        for x in sbs:
            if x[3] == K.RECORD_KSYMBOL:
                addr, length, ktype = x[4][0], x[4][1], x[4][2]
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
        ids = np.array([self._sym_id(sym.kernel_sym(i)) for i in u.tolist()], dtype=np.int64)
        return kern[ok], ids[inv]

    def _chain_id(self, chain: tuple[Sym, ...]) -> int:
        i = self.chain_ids.get(chain)
        if i is None:
            i = self.chain_ids[chain] = len(self.chain_list)
            self.chain_list.append(chain)
        return i

    def _chain_groups(
        self, smp: dict[str, Any], sbs: list[tuple], cnt: Any, mode: Any
    ) -> tuple[Any, int]:
        """Group samples by (call chain, mode, address, their pid's maps, kernel symbols)."""
        np = self.np
        words = self._chain_words(smp)
        kpos = np.array([i for i, x in enumerate(sbs) if x[3] in KERNEL_CHANGES], dtype=np.int64)
        kstate = np.searchsorted(kpos, cnt, side="left")
        ustate = _dense(np, self._map_states(smp, sbs, cnt))[0]
        ipd = unique(np, smp["ip"])[1]
        inv, n = words, int(words.max()) + 1 if len(words) else 0
        for col in (mode, ipd, ustate, kstate):
            radix = int(col.max()) + 1
            if n * radix >= 1 << 62:
                raise NotBulk("too many call chain groups")
            inv, n = _dense(np, inv * radix + col)
        return inv, n

    def _chain_words(self, smp: dict[str, Any]) -> Any:
        """A dense id per sample for its call chain's words (equal ids: equal words)."""
        np = self.np
        u64 = self.bulk.u64
        nr = smp["nr"]
        first = smp["chain"] + 1  # word index of each chain's first entry
        total = int(nr.sum())
        starts = np.cumsum(nr) - nr
        pos = np.arange(total, dtype=np.int64) - np.repeat(starts, nr)
        at = np.repeat(first, nr) + pos
        w = u64[at]
        mult = _chain_multipliers(np, int(nr.max()) if len(nr) else 0)
        h = np.zeros(len(nr), dtype=np.uint64)
        some = np.flatnonzero(nr > 0)
        if len(some):
            h[some] = np.add.reduceat(w * mult[pos], starts[some])
        h ^= nr.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        ids, nid = _dense(np, h)
        # a hash is no proof: every chain must equal its group's first, word for word
        rep = np.full(nid, len(nr), dtype=np.int64)
        np.minimum.at(rep, ids, np.arange(len(nr), dtype=np.int64))
        r = rep[ids]
        if bool((nr[r] != nr).any()) or bool((u64[np.repeat(first[r], nr) + pos] != w).any()):
            raise NotBulk("call chain hash collision")
        return ids

    def _map_states(self, smp: dict[str, Any], sbs: list[tuple], cnt: Any) -> Any:
        """Per sample: its pid and how many of that pid's map changes precede it, as one key."""
        np = self.np
        mk = sorted((int(x[4][0]) << 32) | i for i, x in enumerate(sbs) if x[3] in MAP_CHANGES)
        mkeys = np.array(mk, dtype=np.uint64)
        pid = smp["pid"].astype(np.uint64)
        ugen = np.searchsorted(mkeys, (pid << np.uint64(32)) | cnt.astype(np.uint64))
        return pid * np.uint64(len(mkeys) + 1) + ugen.astype(np.uint64)

    def _stacks(
        self, smp: dict[str, Any], sym_of: Any, chain_of: Any, c_inv: Any, c_comm: list[int]
    ) -> None:
        """Add the samples' call chains to the stacks of their events."""
        np = self.np
        keys = self.query.keys
        want_tid = "pid" in keys
        want_cpu = "cpu" in keys
        ev = smp["ev"]
        period = smp["period"]
        at = np.arange(len(ev), dtype=np.int64)
        if self.query.bpf_only:
            is_bpf = np.array([s.bpf is not None for s in self.syms], dtype=bool)
            at = np.flatnonzero(is_bpf[sym_of])
        if not len(at):
            return
        comm_of = np.array(c_comm, dtype=np.int64)[c_inv] if c_inv is not None else None
        cols: list[tuple[Any, int]] = [(ev, len(self.pd.attrs))]
        if comm_of is not None:
            cols.append((comm_of, len(self.comm_names)))
        if want_tid:
            cols.append(_dense(np, smp["tid"].astype(np.int64)))
        if want_cpu:
            cols.append(_dense(np, smp["cpu"] + 1))
        key = np.zeros(len(ev), dtype=np.int64)
        room = 1
        for col, radix in cols:
            room *= max(radix, 1)
            key = key * max(radix, 1) + col
        if room * max(len(self.chain_list), 1) >= 1 << 62:
            raise NotBulk("too many stacks")
        key = (key * len(self.chain_list) + chain_of)[at]
        period = period[at]
        nst, counts, sums, first = _group_totals(np, key, period, at)
        ev_l = ev[first].tolist()
        chain_l = chain_of[first].tolist()
        comm_l = comm_of[first].tolist() if comm_of is not None else None
        tid_l = smp["tid"][first].tolist()
        cpu_l = smp["cpu"][first].tolist()
        names = self.comm_names
        chains = self.chain_list
        events = self.agg.events
        for q in range(nst):
            head: tuple = (
                (names[comm_l[q]], tid_l[q] if want_tid else 0) if comm_l is not None else ()
            )
            if want_cpu:
                head = (cpu_l[q], *head)
            stacks = events[ev_l[q]].stacks
            sk = (head, chains[chain_l[q]])
            r = stacks.get(sk)
            if r is None:
                stacks[sk] = [sums[q], counts[q]]
            else:
                r[0] += sums[q]
                r[1] += counts[q]

    def _user_bulk(self, g_sym: Any, groups: Any, state: Any, ips: Any, maps: list[tuple]) -> None:
        """Symbol ids of user-space groups (g_sym[groups]), by their state's memory maps."""
        np, sym = self.np, self.sideband.sym
        # every state's maps as one sorted table of (state, start) -> map entry
        eids: dict[int, int] = {}
        ents: list[Any] = []
        ent_l: list[int] = []
        st_l: list[int] = []
        for s, mp in enumerate(maps):
            for m in mp:
                e = eids.get(id(m))
                if e is None:
                    e = eids[id(m)] = len(ents)
                    ents.append(m)
                ent_l.append(e)
            st_l.extend([s] * len(mp))
        files: dict[tuple[str, str], int] = {}
        e_file = np.array(
            [files.setdefault((m.filename, m.build_id), len(files)) for m in ents], dtype=np.int64
        )
        e_start = np.array([m.start for m in ents], dtype=np.uint64)
        e_end = np.array([m.end for m in ents], dtype=np.uint64)
        e_pg = np.array([m.pgoff for m in ents], dtype=np.uint64)
        ment = np.array(ent_l, dtype=np.int64)
        mstate = np.array(st_l, dtype=np.int64)
        mstart = e_start[ment]
        state = state.astype(np.int64)
        top = max(int(ips.max()), int(mstart.max()) if len(mstart) else 0)
        sbits = max(len(maps) - 1, 1).bit_length()
        if sbits + top.bit_length() <= 63:
            abits, a_maps, a_ips = top.bit_length(), mstart, ips
        else:  # addresses by rank among them all (order is all the lookup needs)
            _, rank = unique(np, np.concatenate([mstart, ips]))
            abits = max(int(rank.max()), 1).bit_length()
            a_maps, a_ips = rank[: len(mstart)], rank[len(mstart) :]
            if sbits + abits > 63:
                raise NotBulk("too many memory maps")
        sh = np.uint64(abits)
        mkey = (mstate.astype(np.uint64) << sh) | a_maps.astype(np.uint64)
        gkey = (state.astype(np.uint64) << sh) | a_ips.astype(np.uint64)
        j = np.searchsorted(mkey, gkey, side="right").astype(np.int64) - 1
        jj = np.maximum(j, 0)
        e = ment[jj] if len(ment) else np.zeros(len(ips), dtype=np.int64)
        inside = (j >= 0) & (mstate[jj] == state) & (ips < e_end[e]) if len(ment) else j < -1
        out = np.flatnonzero(~inside)
        if len(out):
            nmaps = np.bincount(mstate, minlength=len(maps))
            empty = (nmaps[state[out]] == 0).tolist()
            for g, ip, none in zip(groups[out].tolist(), ips[out].tolist(), empty, strict=True):
                why = (
                    "no memory map for the process" if none else "address outside every memory map"
                )
                g_sym[g] = self._sym_id(sym.unresolved("[unknown]", ".", ip, why))
        inn = np.flatnonzero(inside)
        if not len(inn):
            return
        e = e[inn]
        rel = ips[inn] - e_start[e] + e_pg[e]
        f = e_file[e]
        order = np.argsort(f, kind="stable")
        f_sorted = f[order]
        bounds = np.flatnonzero(np.diff(f_sorted)) + 1
        sym_ids = self.sym_ids
        for part in np.split(order, bounds):
            m = ents[int(e[part[0]])]
            codes, syms = sym.user_file_syms(np, m, rel[part])
            ids = []
            for sy in syms:
                i = sym_ids.get(id(sy))
                if i is None:
                    i = self._sym_id(sy)
                ids.append(i)
            g_sym[groups[inn[part]]] = np.array(ids, dtype=np.int64)[codes]

    def _sym_groups(
        self, smp: dict[str, Any], sbs: list[tuple], cnt: Any, mode: Any
    ) -> tuple[Any, int]:
        """Group samples by (mode, address, the side-band state their symbol depends on).

        Kernel symbols change with KSYMBOL/BPF_EVENT records, a process's with the
        MMAP/COMM/FORK records of its pid; other modes never resolve.
        """
        np = self.np
        n = len(mode)
        ip = smp["ip"]
        g_inv = np.empty(n, dtype=np.int64)
        base = 0
        self._user_state = None
        kernel = mode == F.MISC_KERNEL
        user = mode == F.MISC_USER
        for sel_mask, what in ((kernel, 1), (user, 2), (~(kernel | user), 0)):
            sel = np.flatnonzero(sel_mask)
            if not len(sel):
                continue
            ips = ip[sel]
            if what == 1:
                kpos = np.array(
                    [i for i, x in enumerate(sbs) if x[3] in KERNEL_CHANGES], dtype=np.int64
                )
                state = np.searchsorted(kpos, cnt[sel], side="left")
            elif what == 2:
                mk = sorted(
                    (int(x[4][0]) << 32) | i for i, x in enumerate(sbs) if x[3] in MAP_CHANGES
                )
                mkeys = np.array(mk, dtype=np.uint64)
                pid = smp["pid"][sel].astype(np.uint64)
                ugen = np.searchsorted(mkeys, (pid << np.uint64(32)) | cnt[sel].astype(np.uint64))
                state, nstates = _dense(
                    np, pid * np.uint64(len(mkeys) + 1) + ugen.astype(np.uint64)
                )
                self._user_state = (sel, state, nstates)
            else:
                state = mode[sel]
            lo = int(ips.min())
            bits = (int(ips.max()) - lo).bit_length()
            if int(state.max()).bit_length() + bits <= 62:
                # (state, address) packed in one word: one sort
                key = (state.astype(np.uint64) << np.uint64(bits)) | (ips - np.uint64(lo))
                inv, ng = _dense(np, key)
            else:
                ipu, ip_inv = unique(np, ips)
                if int(state.max()) * len(ipu) >= 1 << 62:
                    raise NotBulk("too many address groups")
                inv, ng = _dense(np, state * len(ipu) + ip_inv)
            g_inv[sel] = inv + base
            base += ng
        return g_inv, base

    def _comm_groups(
        self, smp: dict[str, Any], sbs: list[tuple], cnt: Any
    ) -> tuple[Any, int, Any, Any]:
        """Group samples by (tid, COMM/FORK records of that tid before them)."""
        np = self.np
        ck = sorted(
            (int(x[4][1 if x[3] == K.RECORD_COMM else 2]) << 32) | i
            for i, x in enumerate(sbs)
            if x[3] in COMM_CHANGES
        )
        ckeys = np.array(ck, dtype=np.uint64)
        tid = smp["tid"].astype(np.uint64)
        cgen = np.searchsorted(ckeys, (tid << np.uint64(32)) | cnt.astype(np.uint64))
        tid_d, _ = _dense(np, tid)
        c_inv, nc = _dense(np, tid_d * (len(ckeys) + 1) + cgen)
        big = np.iinfo(np.int64).max
        c_first = np.full(nc, big, dtype=np.int64)
        np.minimum.at(c_first, c_inv, np.arange(len(tid), dtype=np.int64))
        c_rep = np.full(nc, big, dtype=np.int64)
        np.minimum.at(c_rep, c_inv, cnt)
        return c_inv, nc, c_first, c_rep

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
            ids[sel] = self._sym_id(self.sideband.sym.resolve_kernel(ip, t0))
        return ids

    def _places(self, smp: dict[str, Any], sbs: list[tuple]) -> Any:
        """How many of the side-band records sbs go out before each sample."""
        np = self.np
        k = smp["k"]
        n = len(k)
        if not sbs:
            return np.zeros(n, dtype=np.int64)
        sb_k = np.array([x[0] for x in sbs], dtype=np.int64)
        lo = np.searchsorted(sb_k, k, side="left")
        hi = np.searchsorted(sb_k, k, side="right")
        cnt = lo.astype(np.int64)
        mixed = np.flatnonzero(hi > lo)
        if not len(mixed):
            return cnt
        t, seq = smp["t"], smp["seq"]
        mixed = mixed[np.argsort(k[mixed], kind="stable")]
        km = k[mixed]
        bounds = np.flatnonzero(np.diff(km)) + 1
        for part in np.split(mixed, bounds):
            a, z = int(lo[part[0]]), int(hi[part[0]])
            sb_t = np.array([x[1] for x in sbs[a:z]], dtype=np.uint64)
            ts = t[part]
            at = np.searchsorted(sb_t, ts, side="left")
            cnt[part] = a + at
            ties = np.flatnonzero((at < len(sb_t)) & (sb_t[np.minimum(at, len(sb_t) - 1)] == ts))
            for q in ties.tolist():
                i = int(part[q])
                j = a + int(at[q])
                while j < z and sbs[j][1] == int(t[i]) and sbs[j][2] < int(seq[i]):
                    j += 1
                cnt[i] = j
        return cnt

    def _rows(
        self,
        smp: dict[str, Any],
        sym_of: Any,
        g_inv: Any,
        ng: int,
        c_inv: Any,
        c_comm: list[int],
    ) -> None:
        """Add the samples to the rows of their events."""
        np = self.np
        keys = self.query.keys
        want_tid = "pid" in keys
        want_cpu = "cpu" in keys
        want_ip = "srcline" in keys
        ev = smp["ev"]
        period = smp["period"]
        nev = len(self.pd.attrs)
        n_ev = np.bincount(ev, minlength=nev).tolist()
        for e in np.flatnonzero(n_ev).tolist():
            st = self.agg.events[e]
            st.samples += n_ev[e]
            st.period += int(period[ev == e].sum()) if nev > 1 else int(period.sum())
        self.agg.total += len(ev)
        keep = None
        if self.query.bpf_only:
            is_bpf = np.array([s.bpf is not None for s in self.syms], dtype=bool)
            keep = np.flatnonzero(is_bpf[sym_of])
        comm_of = np.array(c_comm, dtype=np.int64)[c_inv] if c_inv is not None else None
        cols: list[tuple[Any, int]] = [(ev, nev)]
        if comm_of is not None:
            cols.append((comm_of, len(self.comm_names)))
        if want_tid:
            cols.append(_dense(np, smp["tid"].astype(np.int64)))
        if want_cpu:
            cols.append(_dense(np, smp["cpu"] + 1))
        cols.append((sym_of, len(self.syms)))
        if want_ip:
            cols.append((g_inv, ng))
        key = np.zeros(len(ev), dtype=np.int64)
        room = 1
        for col, radix in cols:
            room *= max(radix, 1)
            if room >= 1 << 62:
                raise NotBulk("too many rows")
            key = key * max(radix, 1) + col
        at = np.arange(len(ev), dtype=np.int64)
        if keep is not None:
            key, period, at = key[keep], period[keep], keep
        if not len(key):
            return
        nrows, counts, sums, first = _group_totals(np, key, period, at)
        ev_l = ev[first].tolist()
        sym_l = sym_of[first].tolist()
        comm_l = comm_of[first].tolist() if comm_of is not None else None
        tid_l = smp["tid"][first].tolist()
        cpu_l = smp["cpu"][first].tolist()
        ip_l = smp["ip"][first].tolist()
        syms = self.syms
        names = self.comm_names
        # the keys of the record-by-record pass: (cpu?, comm, tid, sym, ip?)
        cols_k: list[list[Any]] = []
        if want_cpu:
            cols_k.append(cpu_l)
        if comm_l is not None:
            cols_k.append([names[c] for c in comm_l])
            cols_k.append(tid_l if want_tid else [0] * nrows)
        cols_k.append([syms[i] for i in sym_l])
        if want_ip:
            cols_k.append(ip_l)
        events = self.agg.events
        one = events[ev_l[0]].rows if nev == 1 else None
        for q, (k, p, c) in enumerate(zip(zip(*cols_k, strict=True), sums, counts, strict=True)):
            rows = one if one is not None else events[ev_l[q]].rows
            r = rows.get(k)
            if r is None:
                rows[k] = [p, c]
            else:
                r[0] += p
                r[1] += c

    def _new_events(self, smp: dict[str, Any]) -> None:
        """EventStats for events first seen here, in the order their first samples go out."""
        np = self.np
        ev = smp["ev"]
        firsts = []
        for e in unique(np, ev)[0].tolist():
            if e in self.agg.events:
                continue
            sel = np.flatnonzero(ev == e)
            k, t, seq = smp["k"][sel], smp["t"][sel], smp["seq"][sel]
            i = np.lexsort((seq, t, k))[0]
            firsts.append(((int(k[i]), int(t[i]), int(seq[i])), e))
        for _, e in sorted(firsts):
            self.agg.events[e] = EventStats(self.pd.attrs[e])


@functools.cache
def _chain_multipliers(np: Any, n: int) -> Any:
    """Fixed odd 64-bit multipliers, one per call chain position (for hashing chains)."""
    x = (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0xBF58476D1CE4E5B9)) ^ np.uint64(
        0x94D049BB133111EB
    )
    x ^= x >> np.uint64(31)
    return x | np.uint64(1)


def _bpf_times(sym: Symbolizer) -> list[int]:
    """Every load and unload time of the BPF functions known now, sorted."""
    funcs = (*sym.bpf_side.funcs, *sym.bpf_perf.funcs)
    return sorted({x for f in funcs for x in (f.load, f.unload) if x is not None})


def _group_totals(np: Any, key: Any, period: Any, at: Any) -> tuple[int, list[int], list[int], Any]:
    """Rows by key: (number of rows, samples per row, period per row, first sample index)."""
    inv, nrows = _dense(np, key)
    counts = np.bincount(inv, minlength=nrows).tolist()
    if int(period.sum()) < 1 << 53:  # float sums of integers stay exact
        sums = [int(x) for x in np.bincount(inv, weights=period.astype(np.float64)).tolist()]
    else:
        perm = np.argsort(inv, kind="stable")
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        sums = np.add.reduceat(period[perm], starts).tolist()
    first = np.full(nrows, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, inv, at)
    return nrows, counts, sums, first


def _dense(np: Any, key: Any) -> tuple[Any, int]:
    """Number the distinct values of a non-negative integer array 0.. in value order."""
    if not len(key):
        return np.zeros(0, dtype=np.int64), 0
    top = int(key.max())
    if top < DENSE_TABLE:
        seen = np.zeros(top + 1, dtype=bool)
        seen[key] = True
        values = np.flatnonzero(seen)
        table = np.zeros(top + 1, dtype=np.int64)
        table[values] = np.arange(len(values), dtype=np.int64)
        return table[key], len(values)
    values, inv = unique(np, key)
    return inv, len(values)


DENSE_TABLE = 1 << 22


class _Members:
    """The samples of each group, sorted out the first time one is asked for."""

    def __init__(self, np: Any, inv: Any, n: int) -> None:
        self.np = np
        self.inv = inv
        self.n = n
        self.perm: Any = None
        self.starts: Any = None

    def __call__(self, g: int) -> Any:
        np = self.np
        if self.perm is None:
            key = self.inv.astype(np.uint16) if self.n <= 1 << 16 else self.inv
            self.perm = np.argsort(key, kind="stable")
            counts = np.bincount(self.inv, minlength=self.n)
            self.starts = np.concatenate(([0], np.cumsum(counts)))
        return self.perm[self.starts[g] : self.starts[g + 1]]


def _unsigned_fields(decl: Any, base: int, names: tuple[str, ...]) -> list[tuple[str, str, int]]:
    """(name, numpy unsigned kind, byte offset from base) of the named fields of a
    construct Struct of fixed-size unsigned integers."""
    out = []
    pos = base
    for sc in decl.subcons:
        if sc.name in names:
            out.append((sc.name, f"u{sc.sizeof()}", pos))
        pos += sc.sizeof()
    return out


def _add_to(totals: dict[tuple, list[int]], key: tuple, pn: list[int]) -> None:
    """Add [period, samples] pn to totals[key]."""
    r = totals.get(key)
    if r is None:
        totals[key] = list(pn)
    else:
        r[0] += pn[0]
        r[1] += pn[1]


def _sym_identity(s: Sym) -> tuple:
    """What makes two Sym objects (from two reading processes) the same symbol."""
    f = s.bpf
    fn = None if f is None else (f.name, f.addr, f.size, f.load, f.unload)
    return (s.name, s.dso, s.kind, s.origin, s.reason, s.start, fn)


def _concat(np: Any, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {k: np.concatenate([a[k], b[k]]) for k in b}
