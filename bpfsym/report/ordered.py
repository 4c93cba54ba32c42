"""The record-by-record pass of a report, delivered in time order like perf's ordered
events: every record type, every file (pipe mode, streams, compressed records)."""

from __future__ import annotations

import bisect
import struct
from typing import Any

from bpfsym.errors import FormatError
from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.formats import struct_of
from bpfsym.read import intel_pt
from bpfsym.read.perfdata import EventAttr, PerfData
from bpfsym.report.aggregates import Aggregates, EventStats
from bpfsym.report.dwarf import Pending, UserStacks
from bpfsym.report.filters import SampleFilter
from bpfsym.report.progress import Progress
from bpfsym.report.query import ReportQuery
from bpfsym.report.sideband import LOSSES, SIDEBAND, Sideband
from bpfsym.symbolize.symbolizer import KERNEL_MAP_DSO
from bpfsym.symbolize.symbols import UNRESOLVED, Sym

# the records an Intel PT trace's decoding takes its tasks from (intel-pt.c
# intel_pt_process_event): queued in time order with the others when there is a trace
TRACE_RECORDS = (K.RECORD_SWITCH, K.RECORD_SWITCH_CPU_WIDE, K.RECORD_ITRACE_START)
# side-band records it also looks at: tasks' pids, [vdso] maps
TRACE_TASKS = (K.RECORD_COMM, K.RECORD_FORK, K.RECORD_MMAP, K.RECORD_MMAP2)


def _indexes(ev: EventAttr) -> tuple[int, int, int, int, int, int]:
    """Where ip, pid, tid, time, cpu and period sit in ev's sample prefix (-1: absent)."""
    f = ev.fields

    def at(name: str) -> int:
        return f.index(name) if name in f else -1

    return at("ip"), at("pid"), at("tid"), at("time"), at("cpu"), at("period")


_LAST = float("inf")


class OrderedPass:
    """One pass over the records, delivered in time order like perf's ordered events.

    Records are queued and, at each FINISHED_ROUND, those up to the newest time of
    the round before are sorted and delivered (perf record guarantees nothing
    older turns up after that; tools/perf/util/ordered-events.c); memory is bounded by
    two rounds.
    """

    def __init__(self, pd: PerfData, query: ReportQuery, cap: Any, np: Any = None) -> None:
        self.pd = pd
        self.query = query
        self.sideband = Sideband(pd, cap, query.kallsyms, np, query.host, query.symfs)
        self.agg = Aggregates()
        self.chain_cache: dict[tuple, tuple[Sym, ...]] = {}
        self.chain_kgen = -1
        self.trace: TraceSamples | None = None  # the samples perf synthesizes from AUX data
        self.trace_log: list[intel_pt.SynthSample] | None = None  # set: they are kept here
        # --call-graph dwarf samples, with a call graph asked: user stacks unwound
        self.user_stacks = UserStacks(pd, self.sideband.sym, query.symfs)
        self.filter: SampleFilter | None = None  # made at the first delivery (pipe mode:
        self.filter_made = False  # the header's records come before any sample)

    def run(self) -> None:
        pd = self.pd
        sideband = self.sideband
        agg = self.agg
        queue: list[tuple] = []
        push = queue.append
        seq = 0
        max_t = 0
        next_flush = 0
        need_chain = self.query.callchains
        user_layout = self.user_stacks.layout
        read_stack = self.user_stacks.read
        attr_of_sample = pd.attr_of_sample
        progress = Progress(pd)
        idx: dict[int, tuple[int, int, int, int, int, int]] = {}
        ix = (-1, -1, -1, -1, -1, -1)
        t_i = -1
        psize = 0
        unpack = struct.Struct("<").unpack_from  # the prefix's, from the first sample on
        ev0 = None
        by_id = pd.id_to_attr
        u64 = pd.u64.unpack_from  # the event id of a sample
        for rtype, misc, buf, start, size, off in pd.records():
            # pipe mode: HEADER_ATTR records can move the event id
            id_at = -1 if pd.sample_id_pos is None else 8 + pd.sample_id_pos
            seq += 1
            if rtype == 9:  # PERF_RECORD_SAMPLE
                if pd.single:
                    ev = ev0
                    if ev is None:
                        ev = ev0 = attr_of_sample(buf, start, size)
                        ix = idx[ev.index] = _indexes(ev)
                        t_i = ix[3]
                        psize = ev.prefix.size + 8
                        unpack = ev.prefix.unpack_from
                else:
                    ev = by_id.get(u64(buf, start + id_at)[0]) if id_at >= 0 else None
                    if ev is None:
                        ev = attr_of_sample(buf, start, size)
                    ix = idx.get(ev.index)  # type: ignore[assignment]
                    if ix is None:
                        ix = idx[ev.index] = _indexes(ev)
                    t_i = ix[3]
                    psize = ev.prefix.size + 8
                    unpack = ev.prefix.unpack_from
                if psize > size:
                    raise FormatError(pd.path, off, "sample shorter than its sample_type")
                v = unpack(buf, start + 8)
                t = v[t_i] if t_i >= 0 else 0
                lay = user_layout(ev) if need_chain else None
                if lay is not None:  # the user stack copied out now, unwound at delivery
                    chain = None
                    if ev.sample_type & K.SAMPLE_CALLCHAIN:
                        chain = pd.callchain(ev, buf, start, size)
                    push((t, seq, 9, ev, misc, v, read_stack(lay, chain, buf, start, size)))
                elif need_chain and ev.sample_type & K.SAMPLE_CALLCHAIN:
                    push((t, seq, 9, ev, misc, v, pd.callchain(ev, buf, start, size)))
                else:
                    push((t, seq, 9, ev, misc, v, None))
                if t > max_t:
                    max_t = t
            elif rtype in SIDEBAND:
                item = sideband.decode(rtype, misc, buf, start, size, off)
                t = item[0] or 0
                push((t, seq, rtype, item[1], misc, None, None))
                if t > max_t:
                    max_t = t
            elif rtype == F.RECORD_FINISHED_ROUND:
                if queue:
                    queue = self._flush(queue, next_flush)
                    push = queue.append
                next_flush = max_t
                progress.tick(off)
            elif rtype in LOSSES:
                agg.lost += sideband.lost(rtype, buf, start, size)
            elif rtype == F.RECORD_AUXTRACE_INFO and self.trace is None:
                self.trace = TraceSamples.start(self, off)
            elif self.trace is not None and rtype in TRACE_RECORDS:
                item = self.trace.decode(rtype, misc, buf, start, size, off)
                t = item[0]
                push((t, seq, rtype, item[1], misc, None, None))
                if t > max_t:
                    max_t = t
        self._flush(queue, _LAST)
        if self.trace is not None:
            self.trace.finish()
        agg.records = seq
        agg.unwind_samples = self.user_stacks.counts.samples
        agg.unwind_stops = self.user_stacks.counts.stopped
        if not sideband.ready:
            sideband.prepare()
        progress.done()

    def _flush(self, queue: list[tuple], limit: float) -> list[tuple]:
        if not self.sideband.ready:
            self.sideband.prepare()
        queue.sort()  # by (time, arrival): seq is unique, later fields are never compared
        if limit is _LAST:
            upto = len(queue)
        else:
            upto = bisect.bisect_right(queue, (limit, _LAST))
        self._deliver(queue, upto)
        return queue[upto:]

    def _deliver(self, queue: list[tuple], upto: int) -> None:
        sym = self.sideband.sym
        apply = self.sideband.apply
        resolve = sym.resolve
        kcache = sym.kcache
        ucache = sym.ucache
        comms = sym.comms
        layout = self.query.layout
        want_comm = layout.thread
        want_tid = layout.tid
        want_cpu = layout.cpu
        want_ip = layout.ip
        bpf_only = self.query.bpf_only
        agg = self.agg
        chain_cache = self.chain_cache
        unwound = self.user_stacks.chain
        cur_ev = None
        st = EventStats(None)  # type: ignore[arg-type]
        rows = st.rows
        ip_i = pid_i = tid_i = t_i = cpu_i = per_i = -1
        fixed_period = 1
        nsamples = 0
        trace = self.trace
        flt = self.sample_filter()
        for n in range(upto):
            t, _seq, rtype, ev, misc, v, chain = queue[n]
            if trace is not None:
                if t:
                    trace.before(t)  # what perf decodes up to this record's time
                if rtype in TRACE_RECORDS or rtype in TRACE_TASKS:
                    trace.take(rtype, ev, misc)
                    if rtype in TRACE_RECORDS:
                        continue
            if rtype != 9:
                apply(rtype, ev, misc)
                kcache = sym.kcache  # a KSYMBOL drops the kernel cache (a new dict)
                continue
            if ev is not cur_ev:
                cur_ev = ev
                st = agg.event(ev)
                rows = st.rows
                ip_i, pid_i, tid_i, t_i, cpu_i, per_i = _indexes(ev)
                fixed_period = int(ev.attr.sample_period) or 1
            if flt is not None and flt.drops_any and flt.drops(t, v[cpu_i] if cpu_i >= 0 else -1):
                continue
            ip = v[ip_i] if ip_i >= 0 else 0
            pid = v[pid_i] if pid_i >= 0 else -1
            period = v[per_i] if per_i >= 0 else fixed_period
            mode = misc & 7  # PERF_RECORD_MISC_CPUMODE_MASK
            if mode == 1:  # MISC_KERNEL
                s = kcache.get(ip)
                if type(s) is not Sym:  # absent, or a BPF address: by time
                    s = resolve(1, pid, ip, t if t_i >= 0 else None)
            elif mode == 2:  # MISC_USER
                uc = ucache.get(pid)
                s = uc.get(ip) if uc is not None else None
                if s is None:
                    s = resolve(2, pid, ip, None)
            else:
                s = resolve(mode, pid, ip, t if t_i >= 0 else None)
            nsamples += 1
            st.samples += 1
            st.period += period
            if bpf_only and s.bpf is None:
                continue
            if flt is not None and flt.hides_any and _hidden(flt, comms, v, pid, tid_i):
                continue
            # the key as KeyLayout has it, built inline: this runs per sample
            if want_comm:
                tid = v[tid_i] if tid_i >= 0 else -1
                comm = comms.get(tid)
                if comm is None:
                    comm = f":{tid}"
                key: tuple = (comm, tid if want_tid else 0, s)
            else:
                key = (s,)
            if want_cpu:
                key = (v[cpu_i] if cpu_i >= 0 else -1, *key)
            if want_ip:
                key = (*key, ip)
            r = rows.get(key)  # aggregates.add_to, inlined
            if r is None:
                rows[key] = [period, 1]
            else:
                r[0] += period
                r[1] += 1
            if chain is not None:
                if chain.__class__ is Pending:
                    chain = unwound(pid, chain)
                tt = t if t_i >= 0 else None
                if sym.kgen != self.chain_kgen:
                    chain_cache.clear()
                    self.chain_kgen = sym.kgen
                ck = (pid, sym.ugen.get(pid, 0), mode, ip, chain)
                syms = chain_cache.get(ck)
                if syms is None:
                    syms, timeless = sym.resolve_chain(mode, pid, ip, chain, tt)
                    if timeless:
                        chain_cache[ck] = syms
                sk = (key[:-2] if want_ip else key[:-1], syms)  # KeyLayout.stack_head
                r = st.stacks.get(sk)
                if r is None:
                    st.stacks[sk] = [period, 1]
                else:
                    r[0] += period
                    r[1] += 1
        agg.total += nsamples

    def sample_filter(self) -> SampleFilter | None:
        """The query's filters against this file (made once its header is read)."""
        if not self.filter_made:
            self.filter_made = True
            pd = self.pd
            self.filter = SampleFilter.of(self.query.filters, pd.header, pd.attrs)
        return self.filter


def _hidden(flt: SampleFilter, comms: dict, v: tuple, pid: int, tid_i: int) -> bool:
    tid = v[tid_i] if tid_i >= 0 else -1
    comm = comms.get(tid)
    return flt.hides(f":{tid}" if comm is None else comm, pid, tid)


class TraceSamples:
    """The samples perf synthesizes from an Intel PT trace (read.intel_pt), added to a
    pass's aggregates as samples of the events perf appends after the file's: before each
    record the pass delivers, those perf delivers before it."""

    def __init__(self, ordered: OrderedPass, pt: intel_pt.IntelPT, attrs: list[EventAttr]) -> None:
        self.ordered = ordered
        self.pd = ordered.pd
        self.pt = pt
        self.attrs = attrs
        pd = ordered.pd
        # SWITCH_CPU_WIDE's next_prev_pid, next_prev_tid; ITRACE_START's pid, tid
        self.switch_body = struct_of(pd.L.switch_cpu_wide)[0]
        self.itrace_body = struct_of(pd.L.itrace_start)[0]
        # perf's hists merge rows without a symbol by address alone (sort.c sort__sym_cmp):
        # the first sample's privilege level is the row's. Applied to these samples.
        self.first: dict[tuple, Sym] = {}

    @classmethod
    def start(cls, ordered: OrderedPass, off: int) -> TraceSamples | None:
        """At AUXTRACE_INFO: the decoding of an Intel PT trace (None for other types)."""
        pd = ordered.pd
        info = pd.auxtrace_info
        if info is None or info[0] != F.AUXTRACE_INTEL_PT:
            return None
        try:
            config = intel_pt.PtConfig.of(info[1], pd.attrs)
        except (ValueError, ZeroDivisionError) as e:
            pd.header.warnings.append(f"Intel PT trace not decoded: {e}")
            return None
        sym = ordered.sideband.sym
        pt = intel_pt.IntelPT(config, _code_at(sym))
        if pt.skip_reason is not None:
            pd.header.warnings.append(f"Intel PT trace not decoded: {pt.skip_reason}")
            return None
        self = cls(ordered, pt, intel_pt.event_attrs(pd, config))
        # perf 6.1 reports one failed walk in the kernel's own code, not two as in a
        # binary it meets first in the trace: its data has failed before (seen on the
        # corpus's intel_pt-4.14, where perf script --itrace=e lists every error)
        pt.binaries_failed([("k", KERNEL_MAP_DSO)])
        if pd.pipe:
            pd.aux_sink = self._sink  # queued as the records arrive, as perf does
        else:
            for head, at in pd.auxtrace_buffers():
                size, _offset, reference, idx, tid, cpu, _res = head
                pt.add_buffer(idx, cpu, tid, reference, path=pd.path, offset=at, size=size)
        return self

    def _sink(self, head: tuple[int, ...], data: bytes | None, at: int) -> None:
        size, _offset, reference, idx, tid, cpu, _res = head
        self.pt.add_buffer(idx, cpu, tid, reference, data=data)

    def decode(
        self, rtype: int, misc: int, buf: Any, start: int, size: int, off: int
    ) -> tuple[int, tuple]:
        """A SWITCH, SWITCH_CPU_WIDE or ITRACE_START record: (time, its fields)."""
        body = 8 if rtype != K.RECORD_SWITCH else 0
        if size < 8 + body:
            raise FormatError(self.pd.path, off, f"record type {rtype} too small")
        tr = self.pd.trailer(buf, start, size, rtype, body) or {}
        body_of = self.itrace_body if rtype == K.RECORD_ITRACE_START else self.switch_body
        a, b = body_of.unpack_from(buf, start + 8) if body else (-1, -1)
        t = tr.get("time", 0)
        args = (tr.get("cpu", -1), tr.get("pid", -1), tr.get("tid", -1), _s32(a), _s32(b))
        return t, args

    def take(self, rtype: int, args: tuple, misc: int) -> None:
        pt = self.pt
        if rtype == K.RECORD_COMM:
            pt.thread(args[0], args[1])
        elif rtype == K.RECORD_FORK:
            pt.thread(args[0], args[2])
        elif rtype == K.RECORD_MMAP or rtype == K.RECORD_MMAP2:
            pid, filename, mode = args[0], args[4], args[6]
            if filename == "[vdso]" and mode == F.MISC_USER:
                # perf reads the task's binaries to tell the vdso's type (vdso.c)
                sym = self.ordered.sideband.sym
                keys = [
                    ("u", m.filename, m.build_id)
                    for m in sym.maps.get(pid, ())
                    if m.filename.startswith("/")
                ]
                pt.binaries_failed(keys)
        elif rtype == K.RECORD_ITRACE_START:
            pt.itrace_start(args[0], args[3], args[4])
        elif misc & 7 not in (F.MISC_GUEST_KERNEL, F.MISC_GUEST_USER):
            cpu, pid, tid, np_pid, np_tid = args
            out = bool(misc & F.MISC_SWITCH_OUT)
            pt.switch(rtype == K.RECORD_SWITCH_CPU_WIDE, out, cpu, pid, tid, np_pid, np_tid)

    def before(self, t: int) -> None:
        for s in self.pt.process(t):
            self.add(s)

    def finish(self) -> None:
        for s in self.pt.flush():
            self.add(s)
        self.pt.close()
        errors = len(self.pt.errors)
        note = "Intel PT trace decoded from its packets alone (the traced code is not read)"
        if errors:
            note += f"; {errors} instruction trace errors, as perf counts them"
        self.pd.header.warnings.append(note)
        if self.pt.unsynthesized:
            what = ", ".join(f"{n} {k}" for k, n in sorted(self.pt.unsynthesized.items()))
            self.pd.header.warnings.append(
                f"Intel PT samples perf would synthesize, not made: {what}"
            )

    def add(self, s: intel_pt.SynthSample) -> None:
        """One synthesized sample into the aggregates, keyed as the pass keys samples."""
        ordered = self.ordered
        if ordered.trace_log is not None:
            ordered.trace_log.append(s)
        sym = ordered.sideband.sym
        layout = ordered.query.layout
        agg = ordered.agg
        ev = self.attrs[s.event]
        st = agg.event(ev)
        flt = ordered.sample_filter()
        if flt is not None and flt.drops_any and flt.drops(s.time, s.cpu):
            return
        sy = sym.resolve(s.cpumode, s.pid, s.ip, s.time or None)
        if sy.origin == UNRESOLVED:
            sy = self.first.setdefault((s.event, sy.dso, sy.start), sy)
        st.samples += 1
        st.period += s.period
        agg.total += 1
        if ordered.query.bpf_only and sy.bpf is None:
            return
        if flt is not None and flt.hides_any:
            comm = sym.comms.get(s.tid)
            if flt.hides(f":{s.tid}" if comm is None else comm, s.pid, s.tid):
                return
        if layout.thread:
            comm = sym.comms.get(s.tid)
            if comm is None:
                comm = f":{s.tid}"
            key: tuple = (comm, s.tid if layout.tid else 0, sy)
        else:
            key = (sy,)
        if layout.cpu:
            key = (s.cpu, *key)
        if layout.ip:
            key = (*key, s.ip)
        r = st.rows.get(key)
        if r is None:
            st.rows[key] = [s.period, 1]
        else:
            r[0] += s.period
            r[1] += 1


def _s32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


def _code_at(sym: Any) -> intel_pt.CodeAt:
    """Which binary holds an address for the decoder's failed walks, from the pass's maps
    as they are when it decodes there (perf: thread__find_map)."""

    def code_at(cpumode: int, pid: int, ip: int) -> Any:
        if cpumode == F.MISC_KERNEL:
            m = sym.kernel_map(ip)
            return None if m is None else ("k", m[2])
        starts = sym.map_starts.get(pid)
        if not starts:
            return None
        i = bisect.bisect_right(starts, ip) - 1
        if i < 0:
            return None
        m = sym.maps[pid][i]
        return ("u", m.filename, m.build_id) if ip < m.end else None

    return code_at
