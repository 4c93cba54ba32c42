"""Report where perf.data samples landed, BPF programs named, like perf report --stdio.

Symbols come from the side file (<input>.bpfsym) when there is one, else from
perf.data's own KSYMBOL/BPF_EVENT records and header; the report header says
which source named what and why samples stayed unresolved.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

from .formats import perf as K
from .formats import perfdata as F
from .formats.errors import FormatError
from .perfdata import EventAttr, PerfData
from .symbolize import (
    FROM_KALLSYMS_HOST,
    FROM_KALLSYMS_SIDE,
    UNRESOLVED,
    KernelSymbols,
    Sym,
    Symbolizer,
    host_boot_id,
    read_host_kallsyms,
)

EPILOG = """examples:
  bpfsym report                                  # perf.data (+ perf.data.bpfsym if there)
  bpfsym report --sort prog,func,srcline --bpf-only
  bpfsym report -g --stdio                       # with call graphs
  bpfsym report --folded | flamegraph.pl > bpf.svg
  bpfsym report --json -i run1.data --no-side
"""

SORT_KEYS = ("comm", "pid", "cpu", "dso", "sym", "prog", "func", "srcline")
HEADINGS = {
    "comm": "Command",
    "pid": "Pid:Command",
    "cpu": "CPU",
    "dso": "Shared Object",
    "sym": "Symbol",
    "prog": "BPF Program",
    "func": "Function",
    "srcline": "Source:Line",
}
PROGRESS_MIN_BYTES = 64 << 20
GRAPH_MIN_PERCENT = 0.5  # perf's default callchain threshold


def sort_keys(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    for k in keys:
        if k not in SORT_KEYS:
            raise argparse.ArgumentTypeError(
                f"unknown sort key {k!r} (choose from {', '.join(SORT_KEYS)})"
            )
    if not keys:
        raise argparse.ArgumentTypeError("empty sort key list")
    return keys


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--input", default="perf.data", help="perf.data file ('-' for stdin)")
    p.add_argument("--side", help="side file (default: <input>.bpfsym when it exists)")
    p.add_argument("--no-side", action="store_true", help="ignore any side file")
    p.add_argument(
        "-s",
        "--sort",
        type=sort_keys,
        default=None,
        help=f"sort keys, comma separated: {','.join(SORT_KEYS)} (default comm,dso,sym)",
    )
    p.add_argument("--bpf-only", action="store_true", help="only samples in BPF programs")
    p.add_argument(
        "-g", "--call-graph", action="store_true", help="show children overhead and call graphs"
    )
    p.add_argument("--stdio", action="store_true", help="text output (the default)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON output")
    out.add_argument("--folded", action="store_true", help="folded stacks for flame graphs")
    p.add_argument(
        "--percent-limit", type=float, default=0.0, help="hide entries below this overhead"
    )
    p.add_argument(
        "--kallsyms", help="kernel symbols from this kallsyms file instead of a snapshot"
    )


# ---- analysis ------------------------------------------------------------


@dataclass
class EventStats:
    attr: EventAttr
    samples: int = 0
    period: int = 0
    rows: dict[tuple, list[int]] = field(default_factory=dict)  # key -> [period, samples]
    stacks: dict[tuple, list[int]] = field(default_factory=dict)  # (head, syms) -> [p, n]


@dataclass
class Analysis:
    path: str
    pipe: bool
    little: bool
    header: Any
    events: dict[int, EventStats]
    keys: list[str]
    origins: dict[str, int]
    unresolved: dict[str, int]
    notes: list[str]
    lost: int
    records: int
    compressed: int
    bpf_only: bool
    callchains: bool
    total_samples: int


def _indexes(ev: EventAttr) -> tuple[int, int, int, int, int, int]:
    f = ev.fields

    def at(name: str) -> int:
        return f.index(name) if name in f else -1

    return at("ip"), at("pid"), at("tid"), at("time"), at("cpu"), at("period")


def _kernel_symbols(
    pd: PerfData, cap: Any, kallsyms: str | None
) -> tuple[KernelSymbols | None, str]:
    """Pick the kernel symbol source; the second item says why (for the header or misses)."""
    if kallsyms:
        try:
            text = read_host_kallsyms(kallsyms)
            return KernelSymbols.from_text(text, f"kallsyms file {kallsyms}"), ""
        except OSError as e:
            raise FormatError(kallsyms, 0, f"cannot read: {e.strerror}") from None
    if cap is not None and cap.kallsyms:
        return KernelSymbols(cap.kallsyms, FROM_KALLSYMS_SIDE), ""
    release = os.uname().release
    if cap is not None:
        if cap.header.boot_id and cap.header.boot_id == host_boot_id():
            return _host("boot id matches the side file")
        return None, "no kallsyms: the side file has none and was recorded in another boot"
    rec = pd.header.osrelease
    if rec and rec == release:
        return _host(
            f"osrelease {rec} matches; perf.data has no boot id,"
            " so a reboot since recording would go unnoticed"
        )
    return None, f"no kallsyms: recorded on {rec or 'an unknown kernel'}, this host runs {release}"


def _host(note: str) -> tuple[KernelSymbols | None, str]:
    try:
        text = read_host_kallsyms()
    except OSError as e:
        return None, f"no kallsyms: /proc/kallsyms unreadable ({e.strerror})"
    ks = KernelSymbols.from_text(text, FROM_KALLSYMS_HOST, f"{FROM_KALLSYMS_HOST} ({note})")
    if not len(ks):
        return None, "no kallsyms: /proc/kallsyms addresses are hidden (kernel.kptr_restrict)"
    return ks, ""


def analyze(
    path: str,
    side: str | None = None,
    keys: list[str] | None = None,
    callchains: bool = False,
    bpf_only: bool = False,
    kallsyms: str | None = None,
    stream: Any = None,
) -> Analysis:
    """Stream a perf.data file and aggregate its samples by the sort keys."""
    keys = keys or ["comm", "dso", "sym"]
    cap = None
    if side:
        from .store import read_capture

        cap = read_capture(side)
    pd = PerfData(path, stream)
    with pd:
        return _analyze(pd, cap, side, keys, callchains, bpf_only, kallsyms)


def _analyze(
    pd: PerfData,
    cap: Any,
    side: str | None,
    keys: list[str],
    callchains: bool,
    bpf_only: bool,
    kallsyms: str | None,
) -> Analysis:
    a = _Aggregator(pd, cap, keys, callchains, bpf_only, kallsyms)
    a.run()
    for st in a.events.values():
        for key, (_period, n) in st.rows.items():
            s = _unpack_key(key, keys)[3]
            a.origins[s.origin] = a.origins.get(s.origin, 0) + n
            if s.origin == UNRESOLVED:
                a.unresolved[s.reason] = a.unresolved.get(s.reason, 0) + n
    notes: list[str] = []
    sym = a.sym
    if sym.kernel is not None:
        notes.append(f"kernel symbols: {sym.kernel.note}")
    elif sym.kernel_note:
        notes.append(sym.kernel_note)
    return Analysis(
        path=pd.path,
        pipe=pd.pipe,
        little=pd.little,
        header=pd.header,
        events=a.events,
        keys=keys,
        origins=a.origins,
        unresolved=a.unresolved,
        notes=notes,
        lost=a.lost,
        records=a.nrec,
        compressed=pd.compressed_records,
        bpf_only=bpf_only,
        callchains=callchains,
        total_samples=a.total,
    )


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
    ) -> None:
        self.pd = pd
        self.cap = cap
        self.kallsyms = kallsyms
        self.keys = keys
        self.callchains = callchains
        self.bpf_only = bpf_only
        ks, why = _kernel_symbols(pd, cap, kallsyms) if not pd.pipe else (None, "")
        self.sym = Symbolizer(ks, why, cap)
        self.ready = False
        self.events: dict[int, EventStats] = {}
        self.origins: dict[str, int] = {}
        self.unresolved: dict[str, int] = {}
        self.lost = 0
        self.nrec = 0
        self.total = 0
        self.chain_cache: dict[tuple, tuple[Sym, ...]] = {}
        self.chain_kgen = -1
        little = pd.little
        self.ksym_head = struct.Struct("<QIHH" if little else ">QIHH")
        self.bpf_head = struct.Struct("<HHI8s" if little else ">HHI8s")
        self.fork_body = struct.Struct("<IIII" if little else ">IIII")
        self.u64 = struct.Struct("<Q" if little else ">Q")

    def _prepare(self) -> None:
        pd, sym = self.pd, self.sym
        if pd.pipe:
            sym.kernel, sym.kernel_note = _kernel_symbols(pd, self.cap, self.kallsyms)
        sym.set_header(pd.header.bpf_progs, pd.header.btfs, pd.header.build_ids)
        self.ready = True

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
        progress.done()

    def _sideband(
        self, rtype: int, misc: int, buf: bytes, start: int, size: int, off: int
    ) -> tuple[int | None, tuple]:
        """Decode a side-band record now (buf is only valid during the pass): (time, args)."""
        pd = self.pd
        L = pd.L
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
        body = bytes(buf[start + 8 : start + size])
        tr = pd.trailer(buf, start, size, rtype, 0)
        t = tr.get("time") if tr else None
        try:
            if rtype == K.RECORD_COMM:
                c = L.comm.parse(body)
                return t, (c.pid, c.tid, c.comm, bool(misc & F.MISC_COMM_EXEC))
            if rtype == K.RECORD_MMAP2:
                m = L.mmap2.parse(body)
                bid = ""
                if misc & F.MISC_MMAP_BUILD_ID:
                    b = L.mmap2_build_id.parse(m.dev_or_build_id)
                    bid = b.build_id[: min(b.size, 20)].hex()
            else:
                m = L.mmap.parse(body)
                bid = ""
        except Exception as e:  # noqa: BLE001 - construct errors and bad UTF-8 alike
            what = str(e).splitlines()[0][:80]
            raise FormatError(pd.path, off, f"bad record type {rtype}: {what}") from None
        return t, (m.pid, m.addr, m.len, m.pgoff, m.filename, bid, misc & 7)

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


class _Progress:
    """A progress bar on stderr, only on a TTY and only for large files."""

    def __init__(self, pd: PerfData) -> None:
        self.size = pd.file_size or 0
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


# ---- rendering -----------------------------------------------------------


def _cell(key: str, comm: str, tid: int, cpu: int, s: Sym, ip: int) -> str:
    if key == "comm":
        return comm
    if key == "pid":
        return f"{tid:>7}:{comm}"
    if key == "cpu":
        return f"{cpu:03d}"
    if key == "dso":
        return s.dso
    if key == "sym":
        return s.label
    if key == "prog":
        return s.prog or "[not bpf]"
    if key == "func":
        return s.name
    return s.srcline(ip)


def _unpack_key(key: tuple, keys: list[str]) -> tuple[str, int, int, Sym, int]:
    """Undo the packing of the hot loop: (cpu?, comm, tid, sym, ip?)."""
    i = 0
    cpu = -1
    comm = ""
    tid = 0
    if "cpu" in keys:
        cpu = key[0]
        i = 1
    if "comm" in keys or "pid" in keys:
        comm, tid = key[i], key[i + 1]
        i += 2
    s = key[i]
    ip = key[i + 1] if "srcline" in keys else 0
    return comm, tid, cpu, s, ip


def table(an: Analysis, st: EventStats) -> list[tuple[tuple[str, ...], int, int]]:
    """Rows (cells, period, samples) merged by their displayed cells, largest first."""
    merged: dict[tuple[str, ...], list[int]] = {}
    for key, (period, n) in st.rows.items():
        comm, tid, cpu, s, ip = _unpack_key(key, an.keys)
        cells = tuple(_cell(k, comm, tid, cpu, s, ip) for k in an.keys)
        r = merged.get(cells)
        if r is None:
            merged[cells] = [period, n]
        else:
            r[0] += period
            r[1] += n
    rows = [(c, p, n) for c, (p, n) in merged.items()]
    rows.sort(key=lambda r: (-r[1], r[0]))
    return rows


def _children(an: Analysis, st: EventStats) -> dict[tuple[str, ...], int]:
    out: dict[tuple[str, ...], int] = {}
    for (head, syms), (period, _n) in st.stacks.items():
        seen = set()
        for s in syms:
            cells = _cells_for(an, head, s)
            if cells in seen:
                continue
            seen.add(cells)
            out[cells] = out.get(cells, 0) + period
    return out


def _cells_for(an: Analysis, head: tuple, s: Sym) -> tuple[str, ...]:
    comm, tid, cpu, _, _ = _unpack_key((*head, s, 0), an.keys)
    return tuple(_cell(k, comm, tid, cpu, s, s.start) for k in an.keys)


def _si(n: int) -> str:
    """perf's convert_unit: 757 -> '757 ', 3737 -> '3K'."""
    unit = " "
    for u in "KMG":
        if n > 1000:
            n //= 1000
            unit = u
    return f"{n}{unit}"


def header_lines(an: Analysis, side: str | None) -> list[str]:
    h = an.header
    mode = "pipe mode" if an.pipe else "file mode"
    endian = "little-endian" if an.little else "big-endian"
    out = [f"# bpfsym report of {an.path} ({mode}, {endian}, {an.records} records"]
    if an.compressed:
        out[-1] += f", {an.compressed} compressed"
    out[-1] += ")"
    if h.hostname or h.osrelease:
        out.append(f"# recorded on {h.hostname or '?'}, kernel {h.osrelease or '?'}")
    out.append(f"# side file: {side}" if side else "# side file: none (BPF from perf.data records)")
    for n in an.notes:
        out.append(f"# {n}")
    total = sum(an.origins.values())
    if total:
        parts = ", ".join(
            f"{o} {n}"
            for o, n in sorted(an.origins.items(), key=lambda x: -x[1])
            if o != UNRESOLVED
        )
        out.append(f"# samples named by: {parts or 'nothing'}")
        nun = an.origins.get(UNRESOLVED, 0)
        out.append(f"# unresolved: {nun} of {total} samples ({100.0 * nun / total:.2f}%)")
        for why, count in sorted(an.unresolved.items(), key=lambda x: -x[1]):
            out.append(f"#   {count:>9}  {why}")
    for w in h.warnings:
        out.append(f"# warning: {w}")
    if an.bpf_only:
        out.append("# --bpf-only: percentages are of all samples of the event")
    out.append("#")
    out.append(f"# Total Lost Samples: {an.lost}")
    out.append("#")
    return out


def render_stdio(an: Analysis, side: str | None, limit: float) -> str:
    out = header_lines(an, side)
    for st in an.events.values():
        if not st.samples:
            continue
        out.append(f"# Samples: {_si(st.samples)} of event '{st.attr.name}'")
        out.append(f"# Event count (approx.): {st.period}")
        out.append("#")
        rows = table(an, st)
        total = st.period or 1
        heads = [HEADINGS[k] for k in an.keys]
        children = _children(an, st) if an.callchains and st.stacks else None
        if children is not None:
            selfp = {c: p for c, p, _ in rows}
            entries = sorted(
                set(children) | set(selfp),
                key=lambda c: (-children.get(c, selfp.get(c, 0)), c),
            )
            lines = [(c, children.get(c, selfp.get(c, 0)), selfp.get(c, 0)) for c in entries]
        else:
            lines = [(c, p, p) for c, p, _ in rows]
        lines = [x for x in lines if 100.0 * x[1] / total >= limit]
        widths = [len(h) for h in heads]
        for c, _, _ in lines:
            for i, cell in enumerate(c[:-1]):
                widths[i] = max(widths[i], len(cell))
        pct_cols = "# Children      Self" if children is not None else "# Overhead"
        out.append(
            pct_cols + "  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=False))
        )
        dots = "# ........  ........" if children is not None else "# ........"
        out.append(dots + "  " + "  ".join("." * w for w in widths))
        out.append("#")
        graphs = _graphs(an, st, lines, total) if children is not None else {}
        for c, p_children, p_self in lines:
            cells = "  ".join(x.ljust(w) for x, w in zip(c, widths, strict=False))
            if children is not None:
                pc = 100.0 * p_children / total
                out.append(f"{pc:9.2f}% {100.0 * p_self / total:9.2f}%  {cells.rstrip()}")
                g = graphs.get(c)
                if g:
                    out.extend(g)
                    out.append("")
            else:
                out.append(f"{100.0 * p_children / total:9.2f}%  {cells.rstrip()}")
        out.append("")
    return "\n".join(out) + "\n"


def _graphs(an: Analysis, st: EventStats, lines: list, total: int) -> dict[tuple, list[str]]:
    """Callee trees under each entry with enough children overhead."""
    want = {c for c, pc, _ in lines if 100.0 * pc / total >= GRAPH_MIN_PERCENT}
    trees: dict[tuple, dict] = {}
    for (head, syms), (period, _n) in st.stacks.items():
        cells_list = [_cells_for(an, head, s) for s in syms]
        seen = set()
        # syms are leaf first: walk from the root so an entry's callees come after it
        for pos in range(len(syms) - 1, -1, -1):
            c = cells_list[pos]
            if c not in want or c in seen:
                continue
            seen.add(c)
            node = trees.setdefault(c, {})
            for q in range(pos - 1, -1, -1):
                name = syms[q].name
                child = node.get(name)
                if child is None:
                    child = node[name] = [0, {}]
                child[0] += period
                node = child[1]
    out = {}
    for c, tree in trees.items():
        lines_: list[str] = []
        _render_tree(tree, total, "            ", lines_)
        out[c] = lines_
    return out


def _render_tree(node: dict, total: int, indent: str, out: list[str]) -> None:
    items = sorted(node.items(), key=lambda x: (-x[1][0], x[0]))
    items = [x for x in items if 100.0 * x[1][0] / total >= GRAPH_MIN_PERCENT]
    for i, (name, (period, children)) in enumerate(items):
        last = i == len(items) - 1
        out.append(f"{indent}{'`' if last else '|'}--{100.0 * period / total:.2f}%-- {name}")
        _render_tree(children, total, indent + ("    " if last else "|   "), out)


def render_json(an: Analysis, side: str | None) -> str:
    h = an.header
    doc: dict[str, Any] = {
        "input": an.path,
        "pipe": an.pipe,
        "side_file": side,
        "hostname": h.hostname,
        "osrelease": h.osrelease,
        "notes": an.notes,
        "sort": an.keys,
        "lost": an.lost,
        "named_by": an.origins,
        "unresolved": an.unresolved,
        "warnings": h.warnings,
        "events": [],
    }
    for st in an.events.values():
        total = st.period or 1
        ev: dict[str, Any] = {
            "name": st.attr.name,
            "samples": st.samples,
            "period": st.period,
            "rows": [],
        }
        children = _children(an, st) if an.callchains and st.stacks else None
        for cells, period, n in table(an, st):
            row: dict[str, Any] = dict(zip(an.keys, cells, strict=False))
            row.update(overhead=round(100.0 * period / total, 4), period=period, samples=n)
            if children is not None:
                row["children"] = round(100.0 * children.get(cells, period) / total, 4)
            ev["rows"].append(row)
        doc["events"].append(ev)
    return json.dumps(doc, indent=1) + "\n"


def render_folded(an: Analysis) -> str:
    """One line per distinct stack: comm;root;...;leaf count (flamegraph.pl input)."""
    agg: dict[str, int] = {}
    for st in an.events.values():
        if st.stacks:
            for (head, syms), (_p, n) in st.stacks.items():
                comm = _unpack_key((*head, syms[0] if syms else None, 0), an.keys)[0]
                names = [s.name for s in reversed(syms)]
                line = ";".join([comm or st.attr.name, *names])
                agg[line] = agg.get(line, 0) + n
        else:
            for key, (_p, n) in st.rows.items():
                comm, _tid, _cpu, s, _ip = _unpack_key(key, an.keys)
                line = ";".join([comm or st.attr.name, s.name])
                agg[line] = agg.get(line, 0) + n
    return "".join(f"{k} {v}\n" for k, v in sorted(agg.items()))


def default_side(inp: str) -> str | None:
    cand = inp + ".bpfsym"
    return cand if inp != "-" and os.path.exists(cand) else None


def run(args: argparse.Namespace) -> int:
    side = None if args.no_side else (args.side or default_side(args.input))
    keys = args.sort or ["comm", "dso", "sym"]
    folded = bool(getattr(args, "folded", False))
    callchains = bool(args.call_graph) or folded
    if folded and "comm" not in keys:
        keys = ["comm", *keys]
    stream = sys.stdin.buffer if args.input == "-" else None
    try:
        an = analyze(args.input, side, keys, callchains, args.bpf_only, args.kallsyms, stream)
    except FileNotFoundError as e:
        raise FormatError(e.filename or args.input, 0, "no such file") from None
    if args.json:
        text = render_json(an, side)
    elif folded:
        text = render_folded(an)
    else:
        text = render_stdio(an, side, args.percent_limit)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0
