"""The record-by-record pass of a report, delivered in time order like perf's ordered
events: every record type, every file (pipe mode, streams, compressed records)."""

from __future__ import annotations

import bisect
import struct
import sys
from typing import Any

from bpfsym.errors import FormatError
from bpfsym.formats import fixed_head
from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.formats import struct_of as formats_struct_of
from bpfsym.live.host import HostKallsyms
from bpfsym.read.perfdata import EventAttr, PerfData
from bpfsym.report.analysis import PROGRESS_MIN_BYTES, EventStats
from bpfsym.symbolize.kernel import KERNEL_DSO, kernel_symbols
from bpfsym.symbolize.symbolizer import Symbolizer
from bpfsym.symbolize.symbols import Sym


def _indexes(ev: EventAttr) -> tuple[int, int, int, int, int, int]:
    f = ev.fields

    def at(name: str) -> int:
        return f.index(name) if name in f else -1

    return at("ip"), at("pid"), at("tid"), at("time"), at("cpu"), at("period")


SIDEBAND = (
    K.RECORD_MMAP,
    K.RECORD_MMAP2,
    K.RECORD_COMM,
    K.RECORD_FORK,
    K.RECORD_EXIT,
    K.RECORD_KSYMBOL,
    K.RECORD_BPF_EVENT,
)

_LAST = float("inf")


class _Aggregator:
    """One pass over the records, delivered in time order like perf's ordered events.

    Records are queued and, at each FINISHED_ROUND, those up to the newest time of
    the round before are sorted and delivered (perf record guarantees nothing
    older turns up after that); memory is bounded by two rounds.
    """

    def __init__(
        self,
        pd: PerfData,
        cap: Any,
        keys: list[str],
        callchains: bool,
        bpf_only: bool,
        kallsyms: str | None,
        np: Any = None,
        host: HostKallsyms | None = None,
    ) -> None:
        self.pd = pd
        self.host = host
        self.cap = cap
        self.np = np
        self.kallsyms = kallsyms
        self.keys = keys
        self.callchains = callchains
        self.bpf_only = bpf_only
        # kernel symbols come at the first delivery (_prepare): pipe-mode headers arrive in
        # the data, and a host /proc/kallsyms being read beside (HostKallsyms) gets time
        self.sym = Symbolizer(None, "", cap)
        self.sym.elf.np = np
        self.ready = False
        self.header_set = False  # pipe mode: the header comes in the data
        self.events: dict[int, EventStats] = {}
        self.lost = 0
        self.nrec = 0
        self.total = 0
        self.chain_cache: dict[tuple, tuple[Sym, ...]] = {}
        self.chain_kgen = -1
        little = pd.little
        fast = K.layouts(little).fast
        self.ksym_head = fast.ksymbol  # addr, len, ksym_type, flags
        self.bpf_head = fast.bpf_event  # type, flags, id, tag
        self.fork_body = struct.Struct("<IIII" if little else ">IIII")
        self.u64 = struct.Struct("<Q" if little else ">Q")
        L = pd.L
        self.comm_head = fixed_head(L.comm, "comm")[0]  # pid, tid
        self.mmap_head = fixed_head(L.mmap, "filename")[0]  # pid, tid, addr, len, pgoff
        self.mmap2_head = fixed_head(L.mmap2, "filename")[0]  # ... dev_or_build_id, prot, flags
        self.mmap2_bid = formats_struct_of(L.mmap2_build_id)[0]  # size, build_id
        # the kernel map's ref-reloc symbol and its address when recorded ("_text", pgoff)
        self.kernel_reloc: tuple[str, int] | None = None

    def _prepare(self) -> None:
        pd, sym = self.pd, self.sym
        sym.kernel, sym.kernel_note = kernel_symbols(
            pd, self.cap, self.kallsyms, self.np, self.host, self.kernel_reloc
        )
        if not self.header_set:
            self._set_header()
        self.ready = True

    def _set_header(self) -> None:
        h = self.pd.header
        self.sym.set_header(h.bpf_progs, h.btfs, h.build_ids, self.pd.little)
        self.header_set = True

    def run(self) -> None:
        pd = self.pd
        queue: list[tuple] = []
        push = queue.append
        seq = 0
        max_t = 0
        next_flush = 0
        need_chain = self.callchains
        attr_of_sample = pd.attr_of_sample
        progress = _Progress(pd)
        idx: dict[int, tuple[int, int, int, int, int, int]] = {}
        ix = (-1, -1, -1, -1, -1, -1)
        t_i = -1
        psize = 0
        unpack = struct.Struct("<").unpack_from
        ev0 = None
        by_id = pd.id_to_attr
        u64 = self.u64.unpack_from
        for rtype, misc, buf, start, size, off in pd.records():
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
                if need_chain and ev.sample_type & K.SAMPLE_CALLCHAIN:
                    push((t, seq, 9, ev, misc, v, pd.callchain(ev, buf, start, size)))
                else:
                    push((t, seq, 9, ev, misc, v, None))
                if t > max_t:
                    max_t = t
            elif rtype in SIDEBAND:
                item = self._sideband(rtype, misc, buf, start, size, off)
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
            elif rtype == K.RECORD_LOST:
                if size >= 24:
                    self.lost += self.u64.unpack_from(buf, start + 16)[0]
            elif rtype == K.RECORD_LOST_SAMPLES:
                if size >= 16:
                    self.lost += self.u64.unpack_from(buf, start + 8)[0]
        nrec = seq
        self._flush(queue, _LAST)
        self.nrec = nrec
        if not self.ready:
            self._prepare()
        progress.done()

    def _sideband(
        self, rtype: int, misc: int, buf: bytes, start: int, size: int, off: int
    ) -> tuple[int | None, tuple]:
        """Decode a side-band record now (buf is only valid during the pass): (time, args)."""
        pd = self.pd
        if rtype == K.RECORD_KSYMBOL:
            if size < 8 + 16 + 1:
                raise FormatError(pd.path, off, "KSYMBOL record too small")
            addr, length, ktype, flags = self.ksym_head.unpack_from(buf, start + 8)
            raw = bytes(buf[start + 24 : start + size])
            nend = raw.find(b"\0")
            if nend < 0:
                raise FormatError(pd.path, off, "KSYMBOL name not terminated")
            name = raw[:nend].decode("utf-8", "replace")
            tr = pd.trailer(buf, start, size, rtype, 16 + K.ksymbol_name_size(nend))
            t = tr.get("time") if tr else None
            return t, (addr, length, ktype, flags, name, t)
        if rtype == K.RECORD_BPF_EVENT:
            if size < 8 + 16:
                raise FormatError(pd.path, off, "BPF_EVENT record too small")
            etype, _flags, prog_id, tag = self.bpf_head.unpack_from(buf, start + 8)
            tr = pd.trailer(buf, start, size, rtype, 16)
            t = tr.get("time") if tr else None
            return t, (etype, prog_id, tag, t)
        if rtype == K.RECORD_FORK or rtype == K.RECORD_EXIT:
            if size < 8 + 24:
                raise FormatError(pd.path, off, "FORK/EXIT record too small")
            tr = pd.trailer(buf, start, size, rtype, 24)
            return (tr.get("time") if tr else None), self.fork_body.unpack_from(buf, start + 8)
        tr = pd.trailer(buf, start, size, rtype, 0)
        t = tr.get("time") if tr else None
        body = start + 8
        try:
            if rtype == K.RECORD_COMM:
                head = self.comm_head
                if size - 8 < head.size:
                    raise ValueError("record too small")
                pid, tid = head.unpack_from(buf, body)
                comm = _cstring(buf, body + head.size, start + size)
                return t, (pid, tid, comm, bool(misc & F.MISC_COMM_EXEC))
            bid = ""
            if rtype == K.RECORD_MMAP2:
                head = self.mmap2_head
                if size - 8 < head.size:
                    raise ValueError("record too small")
                pid, _tid, addr, length, pgoff, dev, _prot, _flags = head.unpack_from(buf, body)
                if misc & F.MISC_MMAP_BUILD_ID:
                    n, raw = self.mmap2_bid.unpack_from(dev)
                    bid = raw[: min(n, 20)].hex()
            else:
                head = self.mmap_head
                if size - 8 < head.size:
                    raise ValueError("record too small")
                pid, _tid, addr, length, pgoff = head.unpack_from(buf, body)
            filename = _cstring(buf, body + head.size, start + size)
            if misc & 7 == F.MISC_KERNEL and filename.startswith(KERNEL_DSO):
                # perf names the kernel map [kernel.kallsyms]<ref-reloc symbol>, pgoff its address
                if self.kernel_reloc is None and len(filename) > len(KERNEL_DSO):
                    self.kernel_reloc = (filename[len(KERNEL_DSO) :], pgoff)
        except (struct.error, ValueError) as e:  # short records, no NUL, bad UTF-8
            what = str(e).splitlines()[0][:80]
            raise FormatError(pd.path, off, f"bad record type {rtype}: {what}") from None
        return t, (pid, addr, length, pgoff, filename, bid, misc & 7)

    def _flush(self, queue: list[tuple], limit: float) -> list[tuple]:
        if not self.ready:
            self._prepare()
        queue.sort()  # by (time, arrival): seq is unique, later fields are never compared
        if limit is _LAST:
            upto = len(queue)
        else:
            upto = bisect.bisect_right(queue, (limit, _LAST))
        self._deliver(queue, upto)
        return queue[upto:]

    def _deliver(self, queue: list[tuple], upto: int) -> None:
        sym = self.sym
        resolve = sym.resolve
        kcache = sym.kcache
        ucache = sym.ucache
        comms = sym.comms
        keys = self.keys
        want_comm = "comm" in keys or "pid" in keys
        want_tid = "pid" in keys
        want_cpu = "cpu" in keys
        want_ip = "srcline" in keys
        bpf_only = self.bpf_only
        events = self.events
        chain_cache = self.chain_cache
        cur_ev = None
        st = EventStats(None)  # type: ignore[arg-type]
        rows = st.rows
        ip_i = pid_i = tid_i = t_i = cpu_i = per_i = -1
        fixed_period = 1
        nsamples = 0
        for n in range(upto):
            t, _seq, rtype, ev, misc, v, chain = queue[n]
            if rtype != 9:
                self._apply(rtype, ev, misc)
                kcache = sym.kcache
                continue
            if ev is not cur_ev:
                cur_ev = ev
                st = events.get(ev.index)  # type: ignore[assignment]
                if st is None:
                    st = events[ev.index] = EventStats(ev)
                rows = st.rows
                ip_i, pid_i, tid_i, t_i, cpu_i, per_i = _indexes(ev)
                fixed_period = int(ev.attr.sample_period) or 1
            ip = v[ip_i] if ip_i >= 0 else 0
            pid = v[pid_i] if pid_i >= 0 else -1
            period = v[per_i] if per_i >= 0 else fixed_period
            mode = misc & 7
            if mode == 1:
                s = kcache.get(ip)
                if type(s) is not Sym:
                    s = resolve(1, pid, ip, t if t_i >= 0 else None)
            elif mode == 2:
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
            r = rows.get(key)
            if r is None:
                rows[key] = [period, 1]
            else:
                r[0] += period
                r[1] += 1
            if chain is not None:
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
                sk = (key[:-2] if want_ip else key[:-1], syms)
                r = st.stacks.get(sk)
                if r is None:
                    st.stacks[sk] = [period, 1]
                else:
                    r[0] += period
                    r[1] += 1
        self.total += nsamples

    def _apply(self, rtype: int, args: tuple, misc: int) -> None:
        sym = self.sym
        if rtype == K.RECORD_MMAP2 or rtype == K.RECORD_MMAP:
            pid, addr, length, pgoff, filename, bid, mode = args
            if mode != F.MISC_KERNEL:
                sym.mmap(pid, addr, length, pgoff, filename, bid)
        elif rtype == K.RECORD_COMM:
            sym.comm(*args)
        elif rtype == K.RECORD_FORK:
            sym.fork(*args)
        elif rtype == K.RECORD_KSYMBOL:
            sym.ksymbol(*args)
        elif rtype == K.RECORD_BPF_EVENT:
            sym.bpf_event(*args)


def _cstring(buf: Any, start: int, end: int) -> str:
    """The NUL-terminated UTF-8 string at buf[start:end] (ValueError when unterminated)."""
    nul = buf.find(b"\0", start, end)
    if nul < 0:
        raise ValueError("string not terminated")
    return bytes(buf[start:nul]).decode("utf-8")


class _Progress:
    """A progress bar on stderr, only on a TTY and only for large files."""

    def __init__(self, pd: PerfData, size: int | None = None) -> None:
        self.size = (pd.file_size or 0) if size is None else size  # or a part's share
        self.on = self.size >= PROGRESS_MIN_BYTES and sys.stderr.isatty()
        self.next = 0
        self.step = max(self.size // 100, 1)

    def tick(self, off: int) -> None:
        if self.on and off >= self.next:
            pct = min(100, off * 100 // self.size)
            bar = "#" * (pct // 4)
            sys.stderr.write(f"\r[{bar:<25}] {pct:3d}% reading {self.size >> 20} MB")
            sys.stderr.flush()
            self.next = off + self.step

    def done(self) -> None:
        if self.on:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()
