"""A report rendered: perf-report-like tables (--stdio, with -g children and callee
trees), --json and --folded."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from bpfsym.report.aggregates import EventStats
from bpfsym.report.analysis import GRAPH_MIN_PERCENT, Analysis
from bpfsym.report.query import ReportQuery
from bpfsym.symbolize.symbols import UNRESOLVED, SourceLine, Sym

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


def _cell(key: str, comm: str, tid: int, cpu: int, s: Sym, ip: int) -> str:
    if key == "comm":
        return comm
    if key == "pid":
        return f"{tid:>7}:{comm}"
    if key == "cpu":
        return f"{cpu:03d}"
    cell = SYM_CELLS.get(key)
    return cell(s) if cell is not None else s.srcline(ip)


HEAD_KEYS = ("comm", "pid")

STACK_HEAD_KEYS = ("comm", "pid", "cpu")  # the columns a stack's head gives

SYM_KEYS = ("dso", "sym", "prog", "func")

SYM_CELLS: dict[str, Callable[[Sym], str]] = {  # _cell of the symbol's columns, by key
    "dso": operator.attrgetter("dso"),
    "sym": operator.attrgetter("label"),
    "prog": lambda s: s.prog or "[not bpf]",
    "func": operator.attrgetter("name"),
}


def table(an: Analysis, st: EventStats) -> list[tuple[tuple[str, ...], int, int]]:
    """Rows (cells, period, samples) merged by their displayed cells, largest first."""
    merged: dict[tuple[str, ...], list[int]] = {}
    keys = an.keys
    nhead = sum(1 for k in keys if k in HEAD_KEYS)
    if all(k in HEAD_KEYS for k in keys[:nhead]) and all(k in SYM_KEYS for k in keys[nhead:]):
        # cells of the comm/pid columns, then of the symbol's: each part made once
        heads: dict[tuple, tuple[str, ...]] = {}
        tails: dict[Sym, tuple[str, ...]] = {}
        hkeys, skeys = keys[:nhead], keys[nhead:]
        cell_of = [SYM_CELLS[k] for k in skeys]
        for key, (period, n) in st.rows.items():
            s = key[-1]
            tail = tails.get(s)
            if tail is None:
                tail = tails[s] = tuple([f(s) for f in cell_of])
            if nhead:
                hk = key[:2]
                head = heads.get(hk)
                if head is None:
                    head = heads[hk] = tuple(_cell(k, hk[0], hk[1], -1, s, 0) for k in hkeys)
                cells = head + tail
            else:
                cells = tail
            r = merged.get(cells)
            if r is None:
                merged[cells] = [period, n]
            else:
                r[0] += period
                r[1] += n
        return _sorted_rows(merged)
    for key, (period, n) in st.rows.items():
        comm, tid, cpu, s, ip = an.layout.unpack(key)
        cells = tuple(_cell(k, comm, tid, cpu, s, ip) for k in an.keys)
        r = merged.get(cells)
        if r is None:
            merged[cells] = [period, n]
        else:
            r[0] += period
            r[1] += n
    return _sorted_rows(merged)


def _sorted_rows(
    merged: dict[tuple[str, ...], list[int]],
) -> list[tuple[tuple[str, ...], int, int]]:
    rows = [(c, p, n) for c, (p, n) in merged.items()]
    rows.sort(key=_FIRST)  # then largest first; stable, so cells order ties
    rows.sort(key=_SECOND, reverse=True)
    return rows


_FIRST = operator.itemgetter(0)

_SECOND = operator.itemgetter(1)


def _children(an: Analysis, st: EventStats) -> dict[tuple[str, ...], int]:
    """Children overhead: the period of every stack an entry appears in (once per stack).

    On the stack tree: an entry's period is that of the nodes where it first appears on
    the way from a root (each stack passes through one such node)."""
    cells, firsts = _first_nodes(an, st)
    return {c: sum(node[2] for node in nodes) for c, nodes in zip(cells, firsts, strict=True)}


def _first_nodes(an: Analysis, st: EventStats) -> tuple[list[tuple[str, ...]], list[list]]:
    """The cells of each id and, per id, the stack tree's nodes where its entry first
    appears on the way from a root (children overhead adds their periods up, the callee
    graphs merge what lies below them). Made once per event."""
    got = an.stack_cells.get(("first", id(st)))
    if got is not None:
        return got
    roots, cells = _stack_tree(an, st)
    firsts: list[list] = [[] for _ in cells]
    on_path = [False] * len(cells)

    def walk(kids: dict) -> None:
        for node in kids.values():
            c = node[0]
            if on_path[c]:
                if node[3]:
                    walk(node[3])
                continue
            firsts[c].append(node)
            if node[3]:
                on_path[c] = True
                walk(node[3])
                on_path[c] = False

    for kids in roots.values():
        walk(kids)
    got = an.stack_cells["first", id(st)] = (cells, firsts)
    return got


def _stack_tree(an: Analysis, st: EventStats) -> tuple[dict[tuple, dict], list[tuple[str, ...]]]:
    """The event's stacks as a tree per head (the stack's comm, pid, cpu), from the
    outermost caller to the leaf: node = [cell id, name, period of the stacks through
    it, children by symbol]; and the cells of each id. Made once per event (children and
    graphs share it). Stacks share their callers' paths, so the tree has a third or less
    of the nodes the stacks have entries."""
    got = an.stack_cells.get(("tree", id(st)))
    if got is not None:
        return got
    cell_id: dict[tuple[str, ...], int] = {}
    cells: list[tuple[str, ...]] = []
    roots: dict[tuple, dict] = {}
    keys = an.keys
    nhead = sum(1 for k in keys if k in STACK_HEAD_KEYS)
    split = all(k in STACK_HEAD_KEYS for k in keys[:nhead])  # head columns, then symbol's
    tails: dict[Sym, tuple[str, ...]] = {}
    tail_keys = keys[nhead:]
    sym_cells = (
        [SYM_CELLS[k] for k in tail_keys] if all(k in SYM_CELLS for k in tail_keys) else None
    )

    def cell_of(head: tuple, head_cells: tuple[str, ...] | None, s: Sym) -> int:
        if head_cells is not None:
            tail = tails.get(s)
            if tail is None:
                if sym_cells is not None:  # the symbol's own columns: straight from it
                    tail = tuple([f(s) for f in sym_cells])
                else:
                    tail = tuple(_cell(x, "", 0, -1, s, s.start) for x in tail_keys)
                tails[s] = tail
            c = head_cells + tail
        else:
            c = _cells_for(an, head, s)
        i = cell_id.get(c)
        if i is None:
            i = cell_id[c] = len(cells)
            cells.append(c)
        return i

    # per head: its root's children, its cells (split) and the cell id of each symbol
    head_of: dict[tuple, tuple[dict, tuple[str, ...] | None, dict[Sym, int]]] = {}
    for (head, syms), (period, _n) in st.stacks.items():
        got = head_of.get(head)
        if got is None:
            head_cells = None
            if split:
                comm, tid, cpu, _, _ = an.layout.unpack((*head, None, 0))
                head_cells = tuple(_cell(k, comm, tid, cpu, None, 0) for k in keys[:nhead])  # type: ignore[arg-type]
            got = head_of[head] = (roots.setdefault(head, {}), head_cells, {})
        kids, head_cells, ids = got
        for s in reversed(syms):
            node = kids.get(s)
            if node is None:
                c = ids.get(s)
                if c is None:
                    c = ids[s] = cell_of(head, head_cells, s)
                node = kids[s] = [c, s.name, period, {}]
            else:
                node[2] += period
            kids = node[3]
    got = an.stack_cells["tree", id(st)] = (roots, cells)
    return got


def _cells_for(an: Analysis, head: tuple, s: Sym) -> tuple[str, ...]:
    got = an.cells.get((head, s))
    if got is None:
        comm, tid, cpu, _, _ = an.layout.unpack((*head, s, 0))
        got = an.cells[head, s] = tuple(_cell(k, comm, tid, cpu, s, s.start) for k in an.keys)
    return got


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
    out.extend(unwind_lines(an))
    if an.stats_every is not None:
        out.append(f"# BPF runtime stats (record --stats) sampled every {an.stats_every:g} s:")
        out.append(
            "#   Runs, ns/run and CPU% (of one CPU) between a program's first and last sample"
        )
    for w in h.warnings:
        out.append(f"# warning: {w}")
    if an.bpf_only:
        out.append("# --bpf-only: percentages are of all samples of the event")
    out.append("#")
    out.append(f"# Total Lost Samples: {an.lost}")
    out.append("#")
    return out


def unwind_lines(an: Analysis) -> list[str]:
    """--call-graph dwarf: how many user stacks did not unwind to their outermost frame,
    and why (their samples keep the frames found, at least the leaf)."""
    if not an.unwind_samples:
        return []
    n = sum(an.unwind_stops.values())
    out = [
        f"# user stacks not unwound to their outermost frame: {n} of {an.unwind_samples}"
        f" samples ({100.0 * n / an.unwind_samples:.2f}%, --call-graph dwarf)"
    ]
    for why, count in an.unwind_stops.items():
        out.append(f"#   {count:>9}  {why}")
    return out


def render_stdio(an: Analysis, side: str | None, limit: float, slices: str | None = None) -> str:
    out = header_lines(an, side)
    after = f" (time slices: {slices})" if slices is not None else ""  # --time, as perf
    for st in an.events.values():
        if not st.samples:
            continue
        out.append(f"# Samples: {_si(st.samples)} of event '{st.attr.name}'{after}")
        out.append(f"# Event count (approx.): {st.period}")
        out.append("#")
        rows = table(an, st)
        total = st.period or 1
        heads = [HEADINGS[k] for k in an.keys]
        children = _children(an, st) if an.callchains and st.stacks else None
        if children is not None:
            selfp = {c: p for c, p, _ in rows}
            overall = dict(selfp)  # children overhead, else (no stack) the self
            overall.update(children)
            entries = sorted(overall)  # by cells, then (stable) largest first
            entries.sort(key=overall.__getitem__, reverse=True)
            sget = selfp.get
            lines = [(c, overall[c], sget(c, 0)) for c in entries]
        else:
            lines = [(c, p, p) for c, p, _ in rows]
        lines = [x for x in lines if 100.0 * x[1] / total >= limit]
        widths = [len(h) for h in heads]
        for i in range(len(widths) - 1):
            column = {c[i] for c, _, _ in lines}
            widths[i] = max(widths[i], max(map(len, column), default=0))
        pct_cols = "# Children      Self" if children is not None else "# Overhead"
        dots = "# ........  ........" if children is not None else "# ........"
        runtime = _runtime_cells(an)
        if runtime is not None:
            pct_cols += "  " + "  ".join(("Runs".rjust(10), "ns/run".rjust(9), "CPU%".rjust(6)))
            dots += "  " + "  ".join(("." * 10, "." * 9, "." * 6))
        out.append(
            pct_cols + "  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=False))
        )
        out.append(dots + "  " + "  ".join("." * w for w in widths))
        out.append("#")
        # perf's --percent-limit is also its callchain threshold (builtin-report.c
        # parse_percent_limit sets callchain_param.min_percent)
        graph_min = limit if limit > 0 else GRAPH_MIN_PERCENT
        graphs = _graphs(an, st, lines, total, graph_min) if children is not None else {}
        if children is None and runtime is None:
            # the plain overhead table: one format string for every line
            fmt = "{:9.2f}%  " + "".join(f"{{:<{w}}}  " for w in widths[:-1]) + "{}"
            out.extend(fmt.format(100.0 * p / total, *c).rstrip() for c, p, _ in lines)
            out.append("")
            continue
        # one format for the cells of every line
        fmt = "".join(f"{{:<{w}}}  " for w in widths[:-1]) + "{:<" + str(widths[-1]) + "}"
        append, extend, get = out.append, out.extend, graphs.get
        for c, p_children, p_self in lines:
            cells = fmt.format(*c)
            if runtime is not None:
                cells = runtime(c) + "  " + cells
            pc = 100.0 * p_children / total
            if children is None:
                append(f"{pc:9.2f}%  {cells.rstrip()}")
                continue
            append(f"{pc:9.2f}% {100.0 * p_self / total:9.2f}%  {cells.rstrip()}")
            g = get(c)
            if g:
                extend(g)
                append("")
        out.append("")
    return "\n".join(out) + "\n"


def _runtime_cells(an: Analysis) -> Any:
    """With stats and a prog column: cells -> the Runs, ns/run and CPU% columns."""
    if not an.runtime or "prog" not in an.keys:
        return None
    at = an.keys.index("prog")

    def cells(c: tuple[str, ...]) -> str:
        r = an.runtime.get(c[at])
        if r is None:
            return " " * 29
        return f"{r.runs:>10}  {r.ns_per_run:>9.1f}  {r.cpu_percent:>5.2f}%"

    return cells


def _graphs(
    an: Analysis, st: EventStats, lines: list, total: int, graph_min: float = GRAPH_MIN_PERCENT
) -> dict[tuple, list[str]]:
    """Callee trees under each entry with enough children overhead.

    An entry's callee tree merges, by name, what lies below each node of the stack tree
    where the entry first appears on the way from a root. It is merged level by level,
    only where it is shown: a place under graph_min percent is not, nor anything below
    it (a place's period is at least its children's), so it is not merged further."""
    cells, firsts = _first_nodes(an, st)
    want = {c for c, pc, _ in lines if 100.0 * pc / total >= graph_min}
    out = {}
    for c, nodes in zip(cells, firsts, strict=True):
        if c in want:
            lines_: list[str] = []
            _render_merged(nodes, total, graph_min, "            ", lines_)
            out[c] = lines_
    return out


def _by_period_name(x: tuple[str, int, list]) -> tuple[int, str]:
    return (-x[1], x[0])


def _render_merged(nodes: list, total: int, graph_min: float, indent: str, out: list[str]) -> None:
    """The callee tree below nodes (stack tree nodes at one place of it): their children
    merged by name, those of graph_min percent or more (by period, then name) with theirs."""
    by_name: dict[str, list] = {}
    for node in nodes:
        for child in node[3].values():
            got = by_name.get(child[1])
            if got is None:
                by_name[child[1]] = [child[2], [child]]
            else:
                got[0] += child[2]
                got[1].append(child)
    items = [(n, p, kids) for n, (p, kids) in by_name.items() if 100.0 * p / total >= graph_min]
    items.sort(key=_by_period_name)  # the filter first: fewer to sort
    for i, (name, period, kids) in enumerate(items):
        last = i == len(items) - 1
        out.append(f"{indent}{'`' if last else '|'}--{100.0 * period / total:.2f}%-- {name}")
        _render_merged(kids, total, graph_min, indent + ("    " if last else "|   "), out)


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
    if an.unwind_samples:  # --call-graph dwarf samples were unwound
        doc["user_stacks"] = {"samples": an.unwind_samples, "stopped": an.unwind_stops}
    if an.stats_every is not None:
        doc["stats_every_s"] = an.stats_every
        doc["runtime"] = {
            name: {"runs": r.runs, "run_time_ns": r.run_time_ns, "cpu_percent": r.cpu_percent}
            for name, r in sorted(an.runtime.items())
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
        rows = table(an, st)
        if children is not None:  # entries only callers have (no self samples) too, as -g
            shown = {c for c, _, _ in rows}
            extra = sorted((c for c in children if c not in shown), key=lambda c: (-children[c], c))
            rows = [*rows, *((c, 0, 0) for c in extra)]
        for cells, period, n in rows:
            row: dict[str, Any] = dict(zip(an.keys, cells, strict=False))
            if "srcline" in row:
                c = row["srcline"]
                if isinstance(c, SourceLine):  # BPF: file:line and the text from BTF apart
                    row["srcline"], row["source"] = c.location, c.source
                else:
                    row["source"] = ""
            row.update(overhead=round(100.0 * period / total, 4), period=period, samples=n)
            if children is not None:
                row["children"] = round(100.0 * children.get(cells, period) / total, 4)
            r = an.runtime.get(row["prog"]) if "prog" in row else None
            if r is not None:
                row.update(
                    runs=r.runs,
                    ns_per_run=round(r.ns_per_run, 1),
                    cpu_percent=round(r.cpu_percent, 4),
                )
            ev["rows"].append(row)
        doc["events"].append(ev)
    import json  # here: the text report does without (3 ms of every start-up)

    return json.dumps(doc, indent=1) + "\n"


def render_folded(an: Analysis) -> str:
    """One line per distinct stack: comm;root;...;leaf count (flamegraph.pl input)."""
    agg: dict[str, int] = {}
    for st in an.events.values():
        if st.stacks:
            for (head, syms), (_p, n) in st.stacks.items():
                comm = an.layout.unpack((*head, syms[0] if syms else None, 0))[0]
                names = [s.name for s in reversed(syms)]
                line = ";".join([comm or st.attr.name, *names])
                agg[line] = agg.get(line, 0) + n
        else:
            for key, (_p, n) in st.rows.items():
                comm, _tid, _cpu, s, _ip = an.layout.unpack(key)
                line = ";".join([comm or st.attr.name, s.name])
                agg[line] = agg.get(line, 0) + n
    return "".join(f"{k} {v}\n" for k, v in sorted(agg.items()))


def render(an: Analysis, query: ReportQuery) -> str:
    """The report in the query's output format."""
    if query.output == "json":
        return render_json(an, query.side)
    if query.output == "folded":
        return render_folded(an)
    return render_stdio(an, query.side, query.percent_limit, query.filters.time)
