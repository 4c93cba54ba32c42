"""top's rows: per-program run time, runs and recursion misses between two refreshes,
sorted and filtered; the refresh loop over the kernel's counters (live.stats)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from bpfsym.formats.bpf import prog_type_name
from bpfsym.live.stats import Sampler, Snapshot
from bpfsym.top.holders import HolderSource, open_holders

NS = 1_000_000_000

# Table forms of type names longer than the 10-column TYPE field (wide output: bpftool's names).
SHORT_TYPES = {
    "socket_filter": "socket",
    "cgroup_sock": "cg_sock",
    "cgroup_device": "cg_device",
    "cgroup_sock_addr": "cg_sockadr",
    "cgroup_sysctl": "cg_sysctl",
    "cgroup_sockopt": "cg_sockopt",
    "raw_tracepoint": "raw_tp",
    "raw_tracepoint_writable": "raw_tp_w",
    "lwt_seg6local": "lwt_seg6",
    "sk_reuseport": "sk_reusep",
    "flow_dissector": "flow_dis",
}

_LONG_TYPES = {v: k for k, v in SHORT_TYPES.items()}


@dataclass
class Row:
    """One program over one interval."""

    id: int
    type: str  # bpftool's name of the program type
    name: str  # bpf_prog_info.name (up to 15 characters, may be empty)
    ksym: str  # bpf_prog_<tag>_<name> exactly as /proc/kallsyms
    tag: str
    interval_ns: int
    runs: int  # run_cnt delta
    run_ns: int  # run_time_ns delta
    misses: int  # recursion_misses delta
    run_time_ns: int  # totals since load (while statistics were on)
    run_cnt: int
    recursion_misses: int
    ncpus: int
    holders: list[tuple[int, str]] = field(default_factory=list)  # (pid, comm)
    new: bool = False  # loaded after the previous refresh: deltas count from zero

    @property
    def runs_per_s(self) -> float:
        return self.runs * NS / self.interval_ns if self.interval_ns > 0 else 0.0

    @property
    def avg_ns(self) -> float | None:
        return self.run_ns / self.runs if self.runs else None

    @property
    def cpu_one(self) -> float:
        """Percent of one CPU."""
        return 100.0 * self.run_ns / self.interval_ns if self.interval_ns > 0 else 0.0

    @property
    def cpu_all(self) -> float:
        """Percent of all online CPUs."""
        return self.cpu_one / self.ncpus if self.ncpus else 0.0


@dataclass
class Refresh:
    """The result of one refresh: every program that has an interval, unfiltered."""

    time: float  # wall clock (time.time()) when the refresh began reading counters
    interval_ns: int
    ncpus: int
    rows: list[Row]
    total: int  # programs alive at this refresh
    new: list[int] = field(default_factory=list)
    vanished: list[int] = field(default_factory=list)


def compute_rows(
    prev: Snapshot,
    cur: Snapshot,
    holders: dict[int, list[tuple[int, str]]],
    ncpus: int,
) -> tuple[list[Row], list[int], list[int]]:
    """Rows for the interval prev -> cur, the ids of new programs and of vanished ones."""
    rows: list[Row] = []
    new: list[int] = []
    before, prev_start, hold = prev.progs, prev.start_ns, holders.get
    type_names: dict[int, str] = {}
    for pid, s in cur.progs.items():
        # a refresh does this once per program: fields by unpacking, no calls it can spare
        sid, stype, tag, name, ksym, load_time, run_time, run_cnt, misses, at, _ = s
        p = before.get(pid)
        if p is not None and p.load_time == load_time:
            _, _, _, _, _, _, base_t, base_c, base_m, since, _ = p
            fresh = False
        elif load_time > prev_start:
            base_t, base_c, base_m, since, fresh = 0, 0, 0, prev_start, True
            new.append(pid)
        else:
            continue  # there before the previous pass began, but not in it: next time
        tname = type_names.get(stype)
        if tname is None:
            tname = type_names[stype] = prog_type_name(stype)
        d_time, d_cnt, d_miss, span = (
            run_time - base_t,
            run_cnt - base_c,
            misses - base_m,
            at - since,
        )
        h = hold(pid)
        rows.append(
            Row(
                sid, tname, name, ksym, tag,
                span if span > 0 else 0,
                d_cnt if d_cnt > 0 else 0,
                d_time if d_time > 0 else 0,
                d_miss if d_miss > 0 else 0,
                run_time, run_cnt, misses, ncpus,
                sorted(h) if h else [],
                fresh,
            )
        )  # fmt: skip
    now = cur.progs
    vanished = [i for i, p in before.items() if i not in now or now[i].load_time != p.load_time]
    return rows, sorted(new), sorted(vanished)


# Sort keys in column order; numeric ones sort largest first, text ones A-Z.
SORT_KEYS = ["id", "type", "name", "runs", "avg", "cpu", "time", "misses", "pids"]

_SORT_VALUE: dict[str, Callable[[Row], Any]] = {
    "id": lambda r: r.id,
    "type": lambda r: r.type,
    "name": lambda r: (r.name == "", r.name),
    "runs": lambda r: r.runs_per_s,
    "avg": lambda r: -1.0 if r.avg_ns is None else r.avg_ns,
    "cpu": lambda r: r.run_ns / r.interval_ns if r.interval_ns else 0.0,
    "time": lambda r: r.run_time_ns,
    "misses": lambda r: r.recursion_misses,
    "pids": lambda r: (not r.holders, r.holders[0][0] if r.holders else 0),
}

_DESCENDING = {"runs", "avg", "cpu", "time", "misses"}


def sort_rows(rows: Iterable[Row], key: str, reverse: bool = False) -> list[Row]:
    """Rows by key in its natural direction (reverse flips it); ties by id ascending."""
    by_id = sorted(rows, key=lambda r: r.id)
    return sorted(by_id, key=_SORT_VALUE[key], reverse=(key in _DESCENDING) != reverse)


@dataclass
class Filter:
    """Which programs to show: every given kind must match, any value within a kind."""

    names: list[str] = field(default_factory=list)  # substrings of the short name
    types: list[str] = field(default_factory=list)  # bpftool type names
    ids: list[int] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)

    def matches(self, r: Row) -> bool:
        if self.names and not any(n in r.name for n in self.names):
            return False
        if self.types and r.type not in self.types:
            return False
        if self.ids and r.id not in self.ids:
            return False
        return not self.pids or any(pid in self.pids for pid, _ in r.holders)

    def describe(self) -> str:
        parts = [f"name~{n}" for n in self.names] + [f"type={t}" for t in self.types]
        parts += [f"id={i}" for i in self.ids] + [f"pid={p}" for p in self.pids]
        return " ".join(parts)


@dataclass
class View:
    """Filter and sort order, changed from the keyboard in the full-screen view."""

    filter: Filter = field(default_factory=Filter)
    sort: str = "cpu"
    reverse: bool = False
    wide: bool = False

    def apply(self, rows: Iterable[Row]) -> list[Row]:
        return sort_rows((r for r in rows if self.filter.matches(r)), self.sort, self.reverse)


def online_cpus() -> int:
    return int(os.sysconf("SC_NPROCESSORS_ONLN")) or 1


class Top:
    """Consecutive snapshots of every program; each refresh yields the interval since the last.

    The API for anything that wants top's figures (the batch and full-screen views, an
    exporter): the caller keeps statistics on (live.stats.RuntimeStats) for as long as it
    uses a Top, calls refresh() once per interval and closes the Top when done (it holds
    the holders iterator's link fd). Each refresh reads every program once and the holders
    once; rows are unfiltered and unsorted (View.apply filters and sorts them).

        with RuntimeStats(), Top() as top:
            while True:
                time.sleep(interval)
                ref = top.refresh()  # Refresh: .rows, .new, .vanished, .total, ...

    An exporter of totals (top --serve), which needs no interval, calls snapshot() for every
    program's counters and reads `holders` when it wants them."""

    def __init__(self, ncpus: int | None = None, holders: HolderSource | None = None) -> None:
        self.ncpus = ncpus or online_cpus()
        self.holders: HolderSource = holders if holders is not None else open_holders()
        self.sampler = Sampler()
        if self.holders.prog_id:
            self.sampler.skip.add(self.holders.prog_id)  # top's own iterator is not listed
        try:
            self.prev = self.sampler.snapshot()
        except BaseException:
            self.holders.close()
            raise

    def snapshot(self) -> Snapshot:
        """Every program's counters now (one pass, top's own iterator left out); the next
        refresh() counts its interval from here."""
        self.prev = self.sampler.snapshot()
        return self.prev

    def refresh(self) -> Refresh:
        wall = time.time()
        prev = self.prev
        cur = self.snapshot()
        holders = self.holders.read()
        rows, new, vanished = compute_rows(prev, cur, holders, self.ncpus)
        ref = Refresh(wall, cur.start_ns - prev.start_ns, self.ncpus, rows, len(cur.progs))
        ref.new, ref.vanished = new, vanished
        return ref

    def close(self) -> None:
        self.holders.close()

    def __enter__(self) -> Top:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
