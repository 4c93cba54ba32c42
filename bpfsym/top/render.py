"""top's output: the table (80 columns, or --wide), JSON lines, CSV (docs/top.md)."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable
from typing import Any

from bpfsym.top.rows import NS, SHORT_TYPES, Refresh, Row


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


def line_of(r: Row) -> str:
    """A row of the default table, cell by cell from _COLUMNS."""
    return " ".join(_cell(f(r), w, right) for _, w, right, _, f in _COLUMNS).rstrip()


# The default table's line as one format: the same padding as _cell, column by column.
_LINE = " ".join(f"{{:{'>' if right else '<'}{w}}}" for _, w, right, _, _ in _COLUMNS).format
_IDLE = ("0", "-", "0.0", "0.0")  # RUNS/S .. %ALL of an interval without a run or run time


def fast_line(r: Row) -> str:
    """line_of(r), at a third of the cost: a refresh formats every program, most of them
    idle (the offline tests hold the two equal)."""
    if r.runs or r.run_ns:
        avg = r.avg_ns
        moving = (
            fmt_si(r.runs_per_s),
            "-" if avg is None else fmt_si(round(avg)),
            fmt_pct(r.cpu_one),
            fmt_pct(r.cpu_all),
        )
    else:
        moving = _IDLE
    misses = r.recursion_misses
    return _LINE(
        str(r.id),
        SHORT_TYPES.get(r.type, r.type)[:10],
        r.name or "-",
        *moving,
        fmt_duration(r.run_time_ns),
        fmt_si(misses, 2) if misses else "0",
        fmt_pids(r.holders),
    ).rstrip()


class LineCache:
    """Default-table lines of idle rows, kept from one table() to the next.

    An idle row's line (no run and no run time in the interval) depends only on the
    program's id, type, name, totals and holders, which rarely change, and most programs
    of a host are idle in most intervals. Holds the lines of the last table only."""

    def __init__(self) -> None:
        self.lines: dict[tuple[object, ...], str] = {}


_HEAD = " ".join(_cell(h, w, right) for h, w, right, _, _ in _COLUMNS).rstrip()


def table(rows: list[Row], wide: bool = False, cache: LineCache | None = None) -> list[str]:
    """Header line and one line per row (the same lines with or without a cache)."""
    if not wide:
        if cache is None:
            return [_HEAD, *map(fast_line, rows)]
        old, kept, out = cache.lines, {}, [_HEAD]
        for r in rows:
            if r.runs or r.run_ns:
                out.append(fast_line(r))
                continue
            key = (r.id, r.type, r.name, r.run_time_ns, r.recursion_misses, *r.holders)
            line = old.get(key)
            if line is None:
                line = fast_line(r)
            kept[key] = line
            out.append(line)
        cache.lines = kept
        return out
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
