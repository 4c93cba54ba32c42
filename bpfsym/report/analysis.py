"""A report's analysis: one pass over a perf.data file aggregated by the sort keys, per
event (EventStats), with what named the samples and why some stayed unresolved.

Symbols come from the side file (<input>.bpfsym) when there is one, else from
perf.data's own KSYMBOL/BPF_EVENT records and header; the report header says
which source named what and why samples stayed unresolved.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from bpfsym.errors import FormatError
from bpfsym.live.host import HostKallsyms
from bpfsym.read.bulk import NotBulk, file_size, load_numpy
from bpfsym.read.perfdata import PerfData
from bpfsym.read.user_stack import has_user_stacks
from bpfsym.report.aggregates import Aggregates, EventStats, add_to
from bpfsym.report.query import DEFAULT_KEYS, KeyLayout, ReportQuery
from bpfsym.symbolize.symbolizer import Symbolizer
from bpfsym.symbolize.symbols import UNRESOLVED

NUMPY_MIN_BYTES = 1 << 20  # smaller files: importing numpy costs more than it saves

GRAPH_MIN_PERCENT = 0.5  # perf's default callchain threshold


@dataclass(repr=False, eq=False)
class Analysis:
    path: str
    pipe: bool
    little: bool
    header: Any
    events: dict[int, EventStats]
    keys: list[str]
    layout: KeyLayout
    origins: dict[str, int]
    unresolved: dict[str, int]
    notes: list[str]
    lost: int
    records: int
    compressed: int
    bpf_only: bool
    callchains: bool
    total_samples: int
    cells: dict[tuple, tuple[str, ...]] = field(default_factory=dict)  # (head, sym) -> cells
    # render's stack tree and first nodes of each event: by ("tree" or "first", id(EventStats))
    stack_cells: dict[tuple[str, int], Any] = field(default_factory=dict)
    runtime: dict[str, ProgRuntime] = field(default_factory=dict)  # by program (kallsyms) name
    stats_every: float | None = None  # seconds between record --stats samples
    accelerated: bool = False  # numpy did the per-sample work
    unwind_samples: int = 0  # --call-graph dwarf samples whose user stack was unwound
    unwind_stops: dict[str, int] = field(default_factory=dict)  # why some stopped early


@dataclass(repr=False, eq=False)
class ProgRuntime:
    """A program's BPF runtime stats between its first and last `record --stats` sample."""

    runs: int
    run_time_ns: int
    cpu_percent: float  # of one CPU: run time over the wall time between the samples

    @property
    def ns_per_run(self) -> float:
        return self.run_time_ns / self.runs if self.runs else 0.0


def prog_runtime(cap: Any) -> tuple[dict[str, ProgRuntime], float | None]:
    """Per-program deltas of the side file's stats samples, and the sampling interval.

    Programs sharing a kallsyms name (the same code loaded twice) are added up.
    """
    if cap is None or not cap.stats:
        return {}, None
    names = {p.id: p.functions[0].name for p in cap.programs if p.functions}
    by_id: dict[int, list[Any]] = {}
    for x in cap.stats:
        by_id.setdefault(x.prog_id, []).append(x)
    out: dict[str, ProgRuntime] = {}
    for prog_id, xs in by_id.items():
        name = names.get(prog_id)
        if name is None:
            continue
        xs.sort(key=lambda x: x.time)
        first, last = xs[0], xs[-1]
        wall = last.time - first.time
        runs = last.run_cnt - first.run_cnt
        ns = last.run_time_ns - first.run_time_ns
        cpu = 100.0 * ns / wall if wall > 0 else 0.0
        r = out.get(name)
        if r is None:
            out[name] = ProgRuntime(runs, ns, cpu)
        else:
            r.runs += runs
            r.run_time_ns += ns
            r.cpu_percent += cpu
    times = sorted({x.time for x in cap.stats})
    # the sampler sleeps the interval after each sample: the shortest gap is the closest
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    every = float(f"{min(gaps) / 1e9:.2g}") if gaps else None
    return out, every


def analyze(
    path: str,
    side: str | None = None,
    keys: list[str] | None = None,
    callchains: bool = False,
    bpf_only: bool = False,
    kallsyms: str | None = None,
    stream: Any = None,
    accelerate: bool | None = None,
    parallel: bool | None = None,
    host: HostKallsyms | None = None,
) -> Analysis:
    """analyze_query with the query's fields as parameters (tests call it so)."""
    query = ReportQuery(
        path=path,
        stream=stream,
        side=side,
        keys=tuple(keys or DEFAULT_KEYS),
        callchains=callchains,
        bpf_only=bpf_only,
        kallsyms=kallsyms,
        accelerate=accelerate,
        parallel=parallel,
        host=host,
    )
    return analyze_query(query)


def analyze_query(query: ReportQuery) -> Analysis:
    """Stream a perf.data file and aggregate its samples by the sort keys.

    query.host: the host's /proc/kallsyms being read beside (the command line starts one
    before its imports); made here when needed and not given.

    query.accelerate: use numpy for the bulk of the samples (None: when it is installed);
    query.parallel: with numpy, share the samples between two processes (None: for large
    files when a second CPU is there). The result is the same either way.
    """
    with gc_paused():  # numpy's import and the side file's objects too
        pending = None
        if query.side:
            from bpfsym.read.sidefile import CaptureBeside

            # read while numpy loads; its kallsyms not inflated when --kallsyms names others
            pending = CaptureBeside(query.side, kallsyms=not query.kallsyms)
        np = _numpy_for(query)
        cap = pending.result() if pending is not None else None
        host = query.host
        if (
            not query.kallsyms
            and (cap is None or not cap.has_kallsyms())
            and sys.platform == "linux"
        ):
            if host is None:
                host = HostKallsyms()  # not started by the command line: read from here on
        elif host is not None:
            host = None  # not needed after all: its thread finishes on its own
        query = replace(query, host=host)
        try:
            return _read(query, cap, np)
        finally:
            if host is not None:
                host.close()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a report makes its many small objects.

    They hold no cycles, and the collector would scan them again and again. When it is
    switched back on, what was made meanwhile is frozen first (gc.freeze: kept out of
    every later collection): else the next collection scans all of it at once, a third
    of a second after a large call-graph report."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.freeze()
            gc.enable()


def _numpy_for(query: ReportQuery) -> Any:
    """numpy when the query may use it (not asked off, not a small file), else None."""
    stream = query.stream
    small = query.accelerate is None and stream is None and file_size(query.path) < NUMPY_MIN_BYTES
    return load_numpy() if query.accelerate is not False and not small else None


def _read(query: ReportQuery, cap: Any, np: Any) -> Analysis:
    """The analysis of one pass over the file, opened once: the bulk (numpy) pass when
    the file allows it (np: numpy), else (or when it refuses the file mid-way) the
    record-by-record pass, which then reports any real format error."""
    stream = query.stream
    pd = PerfData(query.path, stream)
    with pd:
        if np is not None and stream is None:
            an = _bulk_analysis(pd, query, cap, np)
            if an is not None:
                return an
        from bpfsym.report.ordered import OrderedPass  # not imported for the bulk pass

        ordered = OrderedPass(pd, query, cap, np)
        ordered.run()
        return _with_runtime(_analysis(pd, ordered.sideband.sym, ordered.agg, query), cap)


def _bulk_analysis(pd: PerfData, query: ReportQuery, cap: Any, np: Any) -> Analysis | None:
    """The analysis by the bulk pass, or None (pd rewound) for the record-by-record one."""
    from bpfsym.report.bulk import BulkPass
    from bpfsym.report.window import bulk_refusal

    if bulk_refusal(pd) is not None:  # the header says so
        return None
    if query.callchains and has_user_stacks(pd.attrs, pd.little):
        return None  # user stacks are unwound in the record-by-record pass (report.dwarf)
    data = pd.bulk(np)  # None: not a regular file's whole words
    if data is None:
        return None
    try:
        bulk = BulkPass(pd, query, cap, np, data)
        bulk.run()
    except (NotBulk, FormatError):
        _rewind(pd)  # the record-by-record reader says what is wrong, or copes
        return None
    an = _analysis(pd, bulk.sideband.sym, bulk.agg, query)
    an.accelerated = True
    return _with_runtime(an, cap)


def _rewind(pd: PerfData) -> None:
    """Back to the start of the data section for another pass (records() reads from the
    file's position; the bulk pass reads through its own mapping)."""
    pd._f.seek(pd.data_offset)


def _with_runtime(an: Analysis, cap: Any) -> Analysis:
    an.runtime, an.stats_every = prog_runtime(cap)
    return an


def latest_comms(agg: Aggregates, layout: KeyLayout, comms: dict[int, str]) -> None:
    """--sort pid: every thread's rows and stacks under its comm at the end of the file.
    perf keys those rows by thread and prints the thread's comm when it prints them
    (sort.c hist_entry__thread_snprintf: thread__comm_str), "lsattr" for samples taken
    while it was still "perf-exec"; --sort comm keeps each sample's own."""
    i = 1 if layout.cpu else 0  # the comm's place in a key (and a stack's head)
    for st in agg.events.values():
        rows: dict[tuple, list[int]] = {}
        for key, (p, n) in st.rows.items():
            c = comms.get(key[i + 1])
            add_to(rows, key if c is None else (*key[:i], c, *key[i + 1 :]), p, n)
        st.rows = rows
        stacks: dict[tuple, list[int]] = {}
        for (head, chain), (p, n) in st.stacks.items():
            c = comms.get(head[i + 1])
            head = head if c is None else (*head[:i], c, *head[i + 1 :])
            add_to(stacks, (head, chain), p, n)
        st.stacks = stacks


def _analysis(pd: PerfData, sym: Symbolizer, agg: Aggregates, query: ReportQuery) -> Analysis:
    sym.demangle()  # before anything renders a name
    layout = query.layout
    if layout.tid and "comm" not in query.keys:  # with a comm column: each sample's comm
        latest_comms(agg, layout, sym.comms)
    origins: dict[str, int] = {}
    unresolved: dict[str, int] = {}
    for st in agg.events.values():
        for key, (_period, n) in st.rows.items():
            s = layout.unpack(key)[3]
            origins[s.origin] = origins.get(s.origin, 0) + n
            if s.origin == UNRESOLVED:
                unresolved[s.reason] = unresolved.get(s.reason, 0) + n
    notes: list[str] = []
    if sym.kernel is not None:
        notes.append(f"kernel symbols: {sym.kernel.note}")
    elif sym.kernel_note:
        notes.append(sym.kernel_note)
    return Analysis(
        path=pd.path,
        pipe=pd.pipe,
        little=pd.little,
        header=pd.header,
        events=dict(sorted(agg.events.items())),  # in attr order, as perf lists them
        keys=list(query.keys),
        layout=layout,
        origins=dict(sorted(origins.items(), key=lambda x: (-x[1], x[0]))),
        unresolved=dict(sorted(unresolved.items(), key=lambda x: (-x[1], x[0]))),
        notes=notes,
        lost=agg.lost,
        records=agg.records,
        compressed=pd.compressed_records,
        bpf_only=query.bpf_only,
        callchains=query.callchains,
        total_samples=agg.total,
        unwind_samples=agg.unwind_samples,
        unwind_stops=dict(sorted(agg.unwind_stops.items(), key=lambda x: (-x[1], x[0]))),
    )
