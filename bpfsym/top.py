"""bpfsym top: live run time per BPF program, from run_time_ns / run_cnt deltas.

Statistics stay on through a BPF_ENABLE_RUNTIME_STATS fd held for as long as
top runs (kernel.bpf_stats_enabled is never written). Every refresh reads all
programs' counters and subtracts the previous refresh's: a program that loaded
after the previous refresh counts from zero; one that existed then but was not
seen (a race with the previous pass) is shown from the next refresh. Output:
a curses view on a terminal, or batch text, JSON lines or CSV (docs/top.md).
"""

from __future__ import annotations

import argparse
import csv
import errno
import io
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from bpfsym.formats.bpf import PROG_TYPES, prog_type_name
from bpfsym.live.stats import (
    RuntimeStats,
    Sampler,
    Snapshot,
    StatsUnavailable,
    prog_holders,
)

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
    for pid, s in cur.progs.items():
        p = prev.progs.get(pid)
        if p is not None and p.load_time == s.load_time:
            base, since, fresh = (p.run_time_ns, p.run_cnt, p.recursion_misses), p.time_ns, False
        elif s.load_time > prev.start_ns:
            base, since, fresh = (0, 0, 0), prev.start_ns, True
            new.append(pid)
        else:
            continue  # there before the previous pass began, but not in it: next time
        rows.append(
            Row(
                id=s.id,
                type=prog_type_name(s.type),
                name=s.name,
                ksym=s.ksym,
                tag=s.tag,
                interval_ns=max(0, s.time_ns - since),
                runs=max(0, s.run_cnt - base[1]),
                run_ns=max(0, s.run_time_ns - base[0]),
                misses=max(0, s.recursion_misses - base[2]),
                run_time_ns=s.run_time_ns,
                run_cnt=s.run_cnt,
                recursion_misses=s.recursion_misses,
                ncpus=ncpus,
                holders=sorted(holders.get(pid, [])),
                new=fresh,
            )
        )
    vanished = [
        i
        for i, p in prev.progs.items()
        if i not in cur.progs or cur.progs[i].load_time != p.load_time
    ]
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


# ---- formatting --------------------------------------------------------------------------


def fmt_si(x: float, digits: int = 3) -> str:
    """A count or rate with `digits` significant digits: 0.5, 999, 12.3k, 123k, 1.23M (12k, 1.2M)."""
    if x < 10 and x != int(x):
        return f"{x:.1f}"
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div * (1 - 0.5 * 10**-digits):
            v = float(f"{x / div:.{digits}g}")
            return f"{v:.{max(0, digits - len(str(int(v))))}f}{unit}"
    return f"{x:.0f}"


def fmt_duration(ns: int) -> str:
    """A total run time in at most 6 characters: 850us, 999ms, 59.9s, 59m59s, 99h59m, 9d23h, 400d."""
    if ns < 1_000_000:
        return f"{ns // 1000}us"
    if ns < NS:
        return f"{ns // 1_000_000}ms"
    s = ns / NS
    if s < 59.95:
        return f"{s:.1f}s"
    whole = int(s)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 100 * 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole < 100 * 86400:
        return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"
    return f"{whole // 86400}d"


def fmt_pct(x: float) -> str:
    return f"{x:.1f}" if x < 999.95 else f"{x:.0f}"


def fmt_pids(holders: list[tuple[int, str]]) -> str:
    if not holders:
        return "-"
    return f"{holders[0][0]}+{len(holders) - 1}" if len(holders) > 1 else str(holders[0][0])


# (header, width, right-aligned, sort key, cell) of the default table: 79 columns
_COLUMNS: list[tuple[str, int, bool, str, Callable[[Row], str]]] = [
    ("ID", 6, True, "id", lambda r: str(r.id)),
    ("TYPE", 10, False, "type", lambda r: SHORT_TYPES.get(r.type, r.type)[:10]),
    ("NAME", 15, False, "name", lambda r: r.name or "-"),
    ("RUNS/S", 6, True, "runs", lambda r: fmt_si(r.runs_per_s)),
    ("AVG_NS", 6, True, "avg", lambda r: "-" if r.avg_ns is None else fmt_si(round(r.avg_ns))),
    ("%1CPU", 5, True, "cpu", lambda r: fmt_pct(r.cpu_one)),
    ("%ALL", 5, True, "cpu", lambda r: fmt_pct(r.cpu_all)),
    ("RUNTIME", 6, True, "time", lambda r: fmt_duration(r.run_time_ns)),
    ("MISS", 4, True, "misses", lambda r: fmt_si(r.recursion_misses, 2)),
    ("PIDS", 7, False, "pids", lambda r: fmt_pids(r.holders)),
]
_WIDE_COLUMNS: list[tuple[str, bool, str, Callable[[Row], str]]] = [
    ("ID", True, "id", lambda r: str(r.id)),
    ("TYPE", False, "type", lambda r: r.type),
    ("KSYM", False, "name", lambda r: r.ksym),
    ("RUNS/S", True, "runs", lambda r: f"{r.runs_per_s:.1f}"),
    ("AVG_NS", True, "avg", lambda r: "-" if r.avg_ns is None else f"{r.avg_ns:.1f}"),
    ("%1CPU", True, "cpu", lambda r: f"{r.cpu_one:.2f}"),
    ("%ALL", True, "cpu", lambda r: f"{r.cpu_all:.2f}"),
    ("RUN_TIME_NS", True, "time", lambda r: str(r.run_time_ns)),
    ("RUN_CNT", True, "time", lambda r: str(r.run_cnt)),
    ("MISSES", True, "misses", lambda r: str(r.recursion_misses)),
    ("PROCESSES", False, "pids", lambda r: ",".join(f"{p}/{c}" for p, c in r.holders) or "-"),
]


def sort_column(key: str) -> tuple[int, int]:
    """Start and width in the default table of the first column sorted by key."""
    x = 0
    for _, width, _, k, _ in _COLUMNS:
        if k == key:
            return x, width
        x += width + 1
    return 0, 0


def _cell(text: str, width: int, right: bool) -> str:
    return text.rjust(width) if right else text.ljust(width)


def table(rows: list[Row], wide: bool = False) -> list[str]:
    """Header line and one line per row."""
    if not wide:
        heads = [_cell(h, w, right) for h, w, right, _, _ in _COLUMNS]
        lines = [" ".join(heads).rstrip()]
        for r in rows:
            cells = [_cell(f(r), w, right) for _, w, right, _, f in _COLUMNS]
            lines.append(" ".join(cells).rstrip())
        return lines
    grid = [[h for h, *_ in _WIDE_COLUMNS]]
    grid += [[f(r) for *_, f in _WIDE_COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in grid) for i in range(len(_WIDE_COLUMNS))]
    aligned = [right for _, right, _, _ in _WIDE_COLUMNS]
    return [
        " ".join(_cell(c, w, a) for c, w, a in zip(line, widths, aligned, strict=True)).rstrip()
        for line in grid
    ]


def summary(ref: Refresh, shown: int) -> str:
    """The line above the table."""
    clock = time.strftime("%H:%M:%S", time.localtime(ref.time))
    return (
        f"{clock}  {ref.interval_ns / NS:.2f}s  {ref.total} progs ({shown} shown)"
        f" +{len(ref.new)} -{len(ref.vanished)}  %ALL of {ref.ncpus} CPUs"
    )


def row_json(r: Row) -> dict[str, Any]:
    return {
        "id": r.id,
        "type": r.type,
        "name": r.name,
        "ksym": r.ksym,
        "tag": r.tag,
        "new": r.new,
        "interval_s": r.interval_ns / NS,
        "runs": r.runs,
        "runs_per_s": r.runs_per_s,
        "run_ns": r.run_ns,
        "avg_ns": r.avg_ns,
        "cpu_pct_one_cpu": r.cpu_one,
        "cpu_pct_all_cpus": r.cpu_all,
        "run_time_ns": r.run_time_ns,
        "run_cnt": r.run_cnt,
        "recursion_misses": r.recursion_misses,
        "recursion_misses_delta": r.misses,
        "holders": [{"pid": p, "comm": c} for p, c in r.holders],
    }


def refresh_json(ref: Refresh, rows: list[Row], sort: str) -> str:
    """One JSON line for one refresh."""
    return json.dumps(
        {
            "time": round(ref.time, 6),
            "interval_s": ref.interval_ns / NS,
            "ncpus": ref.ncpus,
            "sort": sort,
            "programs_total": ref.total,
            "new": ref.new,
            "vanished": ref.vanished,
            "programs": [row_json(r) for r in rows],
        },
        separators=(",", ":"),
    )


CSV_FIELDS = [
    "time", "id", "type", "name", "ksym", "tag", "new", "interval_s", "runs", "runs_per_s",
    "run_ns", "avg_ns", "cpu_pct_one_cpu", "cpu_pct_all_cpus", "run_time_ns", "run_cnt",
    "recursion_misses", "recursion_misses_delta", "holders",
]  # fmt: skip


def csv_lines(ref: Refresh, rows: list[Row], header: bool) -> str:
    """CSV rows of one refresh (with the header line first when header is set)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    if header:
        w.writerow(CSV_FIELDS)
    for r in rows:
        d = row_json(r)
        d["time"] = f"{ref.time:.6f}"
        d["new"] = int(r.new)
        d["avg_ns"] = "" if r.avg_ns is None else r.avg_ns
        d["holders"] = ";".join(f"{p}/{c}" for p, c in r.holders)
        w.writerow([d[k] for k in CSV_FIELDS])
    return out.getvalue()


# ---- the live loop -----------------------------------------------------------------------


def online_cpus() -> int:
    return int(os.sysconf("SC_NPROCESSORS_ONLN")) or 1


class Top:
    """Consecutive snapshots of every program; each refresh yields the interval since the last."""

    def __init__(self, ncpus: int | None = None) -> None:
        self.ncpus = ncpus or online_cpus()
        self.sampler = Sampler()
        self.prev = self.sampler.snapshot()

    def refresh(self) -> Refresh:
        wall = time.time()
        cur = self.sampler.snapshot()
        holders = prog_holders()
        rows, new, vanished = compute_rows(self.prev, cur, holders, self.ncpus)
        ref = Refresh(wall, cur.start_ns - self.prev.start_ns, self.ncpus, rows, len(cur.progs))
        ref.new, ref.vanished = new, vanished
        self.prev = cur
        return ref


def _batch(args: argparse.Namespace, view: View, out: TextIO) -> int:
    top = Top()
    n = 0
    deadline = time.monotonic()
    while args.count is None or n < args.count:
        deadline += args.interval
        time.sleep(max(0.0, deadline - time.monotonic()))
        ref = top.refresh()
        rows = view.apply(ref.rows)
        if args.json:
            out.write(refresh_json(ref, rows, view.sort) + "\n")
        elif args.csv:
            out.write(csv_lines(ref, rows, header=n == 0))
        else:
            if n:
                out.write("\n")
            out.write(summary(ref, len(rows)) + "\n")
            out.write("\n".join(table(rows, view.wide)) + "\n")
        out.flush()
        n += 1
    return 0


def _tty(args: argparse.Namespace, view: View) -> int:
    import curses

    def prompt(scr: Any, text: str) -> str | None:
        h, w = scr.getmaxyx()
        buf = ""
        scr.timeout(-1)
        while True:
            scr.move(h - 1, 0)
            scr.clrtoeol()
            scr.addnstr(h - 1, 0, text + buf, w - 1)
            scr.refresh()
            ch = scr.get_wch()
            if ch in ("\n", "\r", curses.KEY_ENTER):
                return buf
            if ch == "\x1b":
                return None
            if ch in ("\x7f", "\b", curses.KEY_BACKSPACE):
                buf = buf[:-1]
            elif isinstance(ch, str) and ch.isprintable():
                buf += ch

    def draw(scr: Any, ref: Refresh | None, waiting: int) -> None:
        scr.erase()
        h, w = scr.getmaxyx()
        keys = "q quit  space refresh  s/< > sort  r reverse  / filter  w wide"
        order = "descending" if (view.sort in _DESCENDING) != view.reverse else "ascending"
        top_line = f"bpfsym top - every {args.interval:g}s - sort {view.sort} {order}"
        if view.filter.describe():
            top_line += f" - filter {view.filter.describe()}"
        scr.addnstr(0, 0, top_line, w - 1, curses.A_BOLD)
        if ref is None:
            scr.addnstr(1, 0, f"{waiting} programs; first figures after one interval", w - 1)
            scr.addnstr(2, 0, keys, w - 1)
            scr.refresh()
            return
        rows = view.apply(ref.rows)
        scr.addnstr(1, 0, summary(ref, len(rows)), w - 1)
        scr.addnstr(2, 0, keys, w - 1)
        lines = table(rows, view.wide)
        scr.addnstr(3, 0, lines[0].ljust(w - 1), w - 1, curses.A_REVERSE)
        if not view.wide:
            x, width = sort_column(view.sort)
            if x < w - 1:
                scr.chgat(
                    3,
                    x,
                    min(width, w - 1 - x),
                    curses.A_REVERSE | curses.A_BOLD | curses.A_UNDERLINE,
                )
        for y, line in enumerate(lines[1 : max(0, h - 4) + 1], start=4):
            scr.addnstr(y, 0, line, w - 1)
        scr.refresh()

    def main(scr: Any) -> int:
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        top = Top()
        ref: Refresh | None = None
        n = 0
        due = time.monotonic() + args.interval
        while args.count is None or n < args.count:
            try:
                draw(scr, ref, len(top.prev.progs))
            except curses.error:
                pass  # a terminal too small for the lines drawn so far: show what fits
            scr.timeout(max(0, int((due - time.monotonic()) * 1000)))
            ch = scr.getch()
            if ch == -1 or ch == ord(" "):
                if ch == -1 and time.monotonic() < due:
                    continue
                ref = top.refresh()
                n += 1
                due = time.monotonic() + args.interval
            elif ch in (ord("q"), ord("Q")):
                break
            elif ch in (ord("s"), ord(">"), curses.KEY_RIGHT):
                view.sort = SORT_KEYS[(SORT_KEYS.index(view.sort) + 1) % len(SORT_KEYS)]
            elif ch in (ord("<"), curses.KEY_LEFT):
                view.sort = SORT_KEYS[(SORT_KEYS.index(view.sort) - 1) % len(SORT_KEYS)]
            elif ch == ord("r"):
                view.reverse = not view.reverse
            elif ch == ord("w"):
                view.wide = not view.wide
            elif ch == ord("/"):
                text = prompt(scr, "filter by name (empty: none): ")
                if text is not None:
                    view.filter.names = [text] if text else []
        return 0

    return int(curses.wrapper(main))


# ---- command line ------------------------------------------------------------------------


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return v


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return int(text)


def _prog_type(text: str) -> str:
    t = _LONG_TYPES.get(text, text)
    if t not in PROG_TYPES:
        raise argparse.ArgumentTypeError(
            f"unknown program type {text!r} (bpftool's names: xdp, ...)"
        )
    return t


def _ids(text: str) -> list[int]:
    parts = [p for p in text.split(",") if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"not an id list: {text!r}")
    return [int(p) for p in parts]


EPILOG = """\
examples:
  bpfsym top                     # full-screen view, refreshed every second
  bpfsym top -s avg --type xdp   # XDP programs, slowest per run first
  bpfsym top -b 5 3              # batch text: three refreshes, five seconds apart
  bpfsym top -b -n 3 --json      # JSON lines (fields: docs/top.md)
  bpfsym top --csv --pid 1234    # CSV rows of the programs process 1234 holds

%1CPU is the share of one CPU a program used (can exceed 100); %ALL is the share
of all online CPUs. Keys: s or < > change the sort column, r reverses it,
/ filters by name, w toggles the wide view, space refreshes now, q quits.
"""


def configure(p: argparse.ArgumentParser) -> None:
    p.description = "Live run time per BPF program (BPF_ENABLE_RUNTIME_STATS)."
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "-b", "--batch", action="store_true", help="batch mode: print, no screen control"
    )
    p.add_argument(
        "-n", "--iterations", type=_positive_int, metavar="COUNT", help="stop after COUNT refreshes"
    )
    p.add_argument(
        "-d",
        "--delay",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds between refreshes (default 1)",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="batch: one JSON object per refresh")
    fmt.add_argument(
        "--csv", action="store_true", help="batch: one CSV row per program and refresh"
    )
    p.add_argument(
        "-w", "--wide", action="store_true", help="all columns, kallsyms names, processes"
    )
    p.add_argument(
        "-s",
        "--sort",
        choices=SORT_KEYS,
        default="cpu",
        metavar="KEY",
        help=f"sort by {', '.join(SORT_KEYS)} (default cpu)",
    )
    p.add_argument("-r", "--reverse", action="store_true", help="reverse the sort order")
    p.add_argument(
        "--name",
        action="append",
        default=[],
        metavar="SUBSTR",
        help="programs whose name contains SUBSTR",
    )
    p.add_argument(
        "--type",
        action="append",
        default=[],
        type=_prog_type,
        metavar="TYPE",
        help="programs of this type (xdp, socket_filter, ...)",
    )
    p.add_argument(
        "--id",
        action="append",
        default=[],
        type=_ids,
        metavar="ID[,ID]",
        help="only these program ids",
    )
    p.add_argument(
        "--pid",
        action="append",
        default=[],
        type=_positive_int,
        metavar="PID",
        help="programs held open by process PID",
    )
    p.add_argument("interval", nargs="?", type=_positive_float, help="seconds between refreshes")
    p.add_argument("count", nargs="?", type=_positive_int, help="number of refreshes")


def _settle(args: argparse.Namespace) -> str:
    """Merge -d/-n with the positional [interval [count]]; an error message or ""."""
    if args.delay is not None and args.interval is not None:
        return "give the interval either as -d or as a positional argument"
    if args.iterations is not None and args.count is not None:
        return "give the count either as -n or as a positional argument"
    args.interval = args.interval or args.delay or 1.0
    args.count = args.count or args.iterations
    return ""


class _Stop(Exception):
    pass


def _on_term(signum: int, frame: object) -> None:
    raise _Stop


def run(args: argparse.Namespace) -> int:
    problem = _settle(args)
    if problem:
        print(f"bpfsym top: {problem}", file=sys.stderr)
        return 2
    view = View(
        Filter(args.name, args.type, [i for ids in args.id for i in ids], args.pid),
        args.sort,
        args.reverse,
        args.wide,
    )
    batch = args.batch or args.json or args.csv or not (sys.stdout.isatty() and sys.stdin.isatty())
    old = signal.signal(signal.SIGTERM, _on_term)
    try:
        with RuntimeStats():
            return _batch(args, view, sys.stdout) if batch else _tty(args, view)
    except StatsUnavailable as e:
        print(f"bpfsym top: {e}", file=sys.stderr)
        return 1
    except PermissionError:
        print("bpfsym top: listing BPF programs needs CAP_SYS_ADMIN (run as root)", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, _Stop):
        return 0
    except BrokenPipeError:
        # the reader went away (| head): stop quietly, and keep Python's exit flush quiet too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        if e.errno == errno.EPERM:
            print(
                "bpfsym top: listing BPF programs needs CAP_SYS_ADMIN (run as root)",
                file=sys.stderr,
            )
            return 1
        raise
    finally:
        signal.signal(signal.SIGTERM, old)
