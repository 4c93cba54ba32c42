"""Two reports compared like perf diff, BPF code matched across rebuilds (see the
command's docstring, bpfsym.commands.diff, for the matching rules)."""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from typing import Any

from bpfsym.report.analysis import Analysis
from bpfsym.report.render import HEADINGS
from bpfsym.symbolize.symbols import Sym, source_text

_BPF_NAME = re.compile(r"bpf_prog_([0-9a-f]{16})(?:_(.*))?$")  # kernel/bpf/core.c

ONLY_BASE = "only in base"

ONLY_NEW = "only in new"


def split_name(ksym: str) -> tuple[str, str]:
    """(tag, name) of a BPF function's kallsyms name; name "" when unnamed."""
    m = _BPF_NAME.match(ksym)
    if m is None:
        return "", ksym
    return m.group(1), m.group(2) or ""


@dataclass
class Prog:
    """The programs of one capture sharing a program name and tag (the same code, loaded
    once or more), as far as the samples show them."""

    name: str  # program name, or bpf_prog_<tag> when unnamed
    tag: str
    ksym: str  # the main function's kallsyms name
    ids: set[int] = field(default_factory=set)
    funcs: set[str] = field(default_factory=set)  # names of sampled functions
    texts: set[tuple[str, str]] = field(default_factory=set)  # (file base name, line text)
    period: int = 0
    match: str = ""  # the name both sides show; "" until matched
    status: str = ""  # "matched", ONLY_BASE or ONLY_NEW


def _prog_key(s: Sym) -> tuple[str, str, str]:
    """(program name, tag, main kallsyms name) of a BPF symbol."""
    f = s.bpf
    assert f is not None
    main = f.prog.main_name if f.prog is not None and f.prog.main_name else s.name
    tag, name = split_name(main)
    if f.prog is not None and f.prog.tag:
        tag = f.prog.tag
    return (name or f"bpf_prog_{tag}"), tag, main


class Side:
    """One capture: its analysis and its BPF programs."""

    def __init__(self, label: str, path: str, side: str | None, an: Analysis) -> None:
        self.label = label
        self.path = path
        self.side = side
        self.an = an
        self.progs: dict[tuple[str, str], Prog] = {}
        self.by_sym: dict[Sym, Prog] = {}
        self.occ: dict[int, dict[int, tuple[str, str, int]]] = {}  # id(BpfFunc) -> by line
        self.keys = an.keys
        self.nhead = (1 if "cpu" in self.keys else 0) + (
            2 if ("comm" in self.keys or "pid" in self.keys) else 0
        )
        for st in an.events.values():
            for key, (period, _n) in st.rows.items():
                s = key[self.nhead]
                if s.bpf is not None:
                    self.prog(s).period += period

    def prog(self, s: Sym) -> Prog:
        p = self.by_sym.get(s)
        if p is None:
            name, tag, main = _prog_key(s)
            p = self.progs.get((name, tag))
            if p is None:
                p = self.progs[name, tag] = Prog(name, tag, main)
            assert s.bpf is not None
            f = s.bpf
            if f.prog is not None:
                p.ids.add(f.prog.id)
                p.texts.update(
                    (os.path.basename(e.file), source_text(e.text)) for e in f.prog.lines
                )
            p.funcs.add(split_name(s.name)[1])
            self.by_sym[s] = p
        return p

    def line_of(self, s: Sym, ip: int) -> tuple[str, str, int, int] | None:
        """(file base name, text, occurrence of the text in the function, line) at ip."""
        f = s.bpf
        if f is None or f.prog is None or not f.prog.lines:
            return None
        pl = f.lines_by_addr()  # the lines the report's srcline column uses
        e = pl.at(ip)
        if e is None:
            return None
        by_line = self.occ.get(id(f))
        if by_line is None:
            by_line = self.occ[id(f)] = _occurrences(pl.lines, pl.addrs, f.addr, f.addr + f.size)
        got = by_line.get(e.line)
        if got is None:  # a line of another function the address fell into
            return os.path.basename(e.file), source_text(e.text), 0, e.line
        return got[0], got[1], got[2], e.line


def _occurrences(
    lines: list[Any], addrs: list[int], lo: int, hi: int
) -> dict[int, tuple[str, str, int]]:
    """Per source line of a function: (file base name, text, how many lines of the same
    text come before it in the function)."""
    seen: dict[int, tuple[str, str]] = {}
    for k in range(bisect.bisect_left(addrs, lo), bisect.bisect_left(addrs, hi)):
        e = lines[k]
        seen.setdefault(e.line, (os.path.basename(e.file), source_text(e.text)))
    count: dict[tuple[str, str], int] = {}
    out = {}
    for line in sorted(seen):
        ft = seen[line]
        out[line] = (ft[0], ft[1], count.get(ft, 0))
        count[ft] = count.get(ft, 0) + 1
    return out


def match_programs(base: Side, new: Side) -> list[tuple[Prog | None, Prog | None]]:
    """Pairs of programs, matched by name; several of one name by tag, then by the overlap
    of their sampled function names, then by their samples; the rest unmatched."""
    names = sorted({p.name for p in base.progs.values()} | {p.name for p in new.progs.values()})
    pairs: list[tuple[Prog | None, Prog | None]] = []
    for name in names:
        bs = sorted((p for p in base.progs.values() if p.name == name), key=_by_period)
        ns = sorted((p for p in new.progs.values() if p.name == name), key=_by_period)
        got: list[tuple[Prog | None, Prog | None]] = []
        for b in list(bs):  # the same code in both captures
            n = next((n for n in ns if n.tag == b.tag), None)
            if n is not None:
                got.append((b, n))
                bs.remove(b)
                ns.remove(n)
        while bs and ns:
            b, n = max(
                ((b, n) for b in bs for n in ns),
                key=lambda bn: (_overlap(bn[0].funcs, bn[1].funcs), -_rank(bs, ns, bn)),
            )
            got.append((b, n))
            bs.remove(b)
            ns.remove(n)
        got += [(b, None) for b in bs] + [(None, n) for n in ns]
        for k, (pb, pn) in enumerate(got):
            shown = name if len(got) == 1 else f"{name}#{k + 1}"
            if pb is not None:
                pb.match, pb.status = shown, ONLY_BASE if pn is None else "matched"
            if pn is not None:
                pn.match, pn.status = shown, ONLY_NEW if pb is None else "matched"
        pairs += got
    return pairs


def _by_period(p: Prog) -> tuple[int, str]:
    return (-p.period, p.tag)


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def _rank(bs: list[Prog], ns: list[Prog], bn: tuple[Prog, Prog]) -> int:
    """Programs of one name and equal overlap: the busiest with the busiest."""
    return abs(bs.index(bn[0]) - ns.index(bn[1]))


@dataclass
class Row:
    cells: tuple[str, ...]
    base: int | None = None  # period
    new: int | None = None
    status: str = ""  # "" or ONLY_BASE / ONLY_NEW
    prog: str = ""  # the matched name of its BPF program


def _row_key(side: Side, key: tuple) -> tuple[tuple, tuple[str, ...], Prog | None]:
    """(match key, cells, BPF program) of an analysis row."""
    keys = side.keys
    s: Sym = key[side.nhead]
    i = 0
    cpu, comm, tid = -1, "", 0
    if "cpu" in keys:
        cpu = key[0]
        i = 1
    if "comm" in keys or "pid" in keys:
        comm, tid = key[i], key[i + 1]
    prog = side.prog(s) if s.bpf is not None else None
    fname = split_name(s.name)[1] if prog is not None else s.name
    fshown = (fname or prog.match) if prog is not None else s.name
    match: list[Any] = []
    cells: list[str] = []
    for k in keys:
        if k == "comm":
            match.append(comm)
            cells.append(comm)
        elif k == "pid":
            match.append((tid, comm))
            cells.append(f"{tid:>7}:{comm}")
        elif k == "cpu":
            match.append(cpu)
            cells.append(f"{cpu:03d}")
        elif k == "dso":
            match.append(("bpf", prog.match) if prog is not None else s.dso)
            cells.append(prog.match if prog is not None else s.dso)
        elif k == "sym":
            match.append(("bpf", prog.match, fname) if prog is not None else (s.kind, s.name))
            cells.append(f"[{s.kind}] {fshown}")
        elif k == "prog":
            match.append(prog.match if prog is not None else "")
            cells.append(prog.match if prog is not None else "[not bpf]")
        elif k == "func":
            match.append((prog.match, fname) if prog is not None else s.name)
            cells.append(fshown)
        elif k == "srcline":
            where = side.line_of(s, key[side.nhead + 1]) if prog is not None else None
            if where is None or prog is None:
                match.append("??:0")
                cells.append("??:0")
                continue
            base_name, text, occ, line = where
            match.append((prog.match, fname, base_name, text, occ))
            cells.append(f"{base_name}:{line}\0{text}")  # the line number is side's own
    return tuple(match), tuple(cells), prog


def diff_rows(base: Side, new: Side, ev: str) -> list[Row]:
    """The rows of one event: both captures' rows paired by their match keys."""
    rows: dict[tuple, Row] = {}
    for side, which in ((base, "base"), (new, "new")):
        st = next((x for x in side.an.events.values() if x.attr.name == ev), None)
        if st is None:
            continue
        for key, (period, _n) in st.rows.items():
            mk, cells, prog = _row_key(side, key)
            r = rows.get(mk)
            if r is None:
                r = rows[mk] = Row(cells)
                if prog is not None:
                    r.prog = prog.match
                    r.status = "" if prog.status == "matched" else prog.status
            elif which == "new":
                r.cells = _merge_cells(r.cells, cells)
            if which == "base":
                r.base = (r.base or 0) + period
            else:
                r.new = (r.new or 0) + period
    for r in rows.values():
        _mark_lines(base, new, r)
    return list(rows.values())


def _merge_cells(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """Cells of a row both sides have: a source line that moved shows both numbers."""
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and "\0" in x and "\0" in y:
            (lx, tx), (ly, _ty) = x.split("\0", 1), y.split("\0", 1)
            out.append(f"{lx}->{ly.rsplit(':', 1)[1]}\0{tx}")
        else:
            out.append(x)
    return tuple(out)


def _mark_lines(base: Side, new: Side, r: Row) -> None:
    """A source line of a matched program that the other build has no line of the same
    text for cannot be on the other side."""
    if r.status or not r.prog or (r.base is not None and r.new is not None):
        return
    there, status = (new, ONLY_BASE) if r.new is None else (base, ONLY_NEW)
    texts = set().union(*(p.texts for p in there.progs.values() if p.match == r.prog))
    for c in r.cells:
        if "\0" in c:
            loc, text = c.split("\0", 1)
            if (loc.rsplit(":", 1)[0], text) not in texts:
                r.status = status


def _pct(v: int | None, total: int) -> float | None:
    return None if v is None else 100.0 * v / (total or 1)


def events_of(base: Side, new: Side) -> tuple[list[str], list[str], list[str]]:
    """Event names in both (base order), only in base, only in new."""
    b = [st.attr.name for st in base.an.events.values() if st.samples]
    n = [st.attr.name for st in new.an.events.values() if st.samples]
    return [e for e in b if e in n], [e for e in b if e not in n], [e for e in n if e not in b]


def _total(side: Side, ev: str) -> tuple[int, int]:
    st = next(x for x in side.an.events.values() if x.attr.name == ev)
    return st.samples, st.period


def table(base: Side, new: Side, ev: str, limit: float) -> list[dict[str, Any]]:
    """The rows of an event with their percentages, largest change first."""
    bt, nt = _total(base, ev)[1], _total(new, ev)[1]
    out: list[dict[str, Any]] = []
    for r in diff_rows(base, new, ev):
        pb, pn = _pct(r.base, bt), _pct(r.new, nt)
        delta = (pn or 0.0) - (pb or 0.0)
        if max(pb or 0.0, pn or 0.0, abs(delta)) < limit:
            continue
        out.append({"cells": r.cells, "base": pb, "new": pn, "delta": delta, "status": r.status})
    out.sort(key=lambda x: (-abs(x["delta"]), -(x["base"] or 0.0), x["cells"]))
    return out


def _side_note(side: Side) -> str:
    what = f"side file {side.side}" if side.side else "no side file: BPF from perf.data records"
    return f"{side.path} ({what})"


def _prog_line(b: Prog | None, n: Prog | None) -> str:
    p = b or n
    assert p is not None

    def ids(x: Prog) -> str:
        return ",".join(str(i) for i in sorted(x.ids)) or "?"

    if b is not None and n is not None:
        funcs = ", ".join(sorted((b.funcs | n.funcs) - {""})) or "-"
        return (
            f"#   {p.match:<16} tag {b.tag} -> {n.tag} (id {ids(b)} -> {ids(n)}); "
            f"functions sampled: {funcs}"
        )
    status = ONLY_BASE if n is None else ONLY_NEW
    return f"#   {p.match:<16} {status}: {p.ksym} (id {ids(p)})"


def render(base: Side, new: Side, pairs: list, limit: float) -> str:
    out = [
        "# bpfsym diff",
        f"# base: {_side_note(base)}",
        f"# new:  {_side_note(new)}",
    ]
    if pairs:
        out.append("# BPF programs with samples, matched by program name, then function names:")
        out += [_prog_line(b, n) for b, n in pairs]
    both, only_b, only_n = events_of(base, new)
    for e in only_b:
        out.append(f"# event '{e}' only in base")
    for e in only_n:
        out.append(f"# event '{e}' only in new")
    if base.an.bpf_only:
        out.append("# --bpf-only: percentages are of all samples of the event")
    out.append("#")
    heads = [HEADINGS[k] for k in base.keys]
    for ev in both:
        (bs, _), (ns, _) = _total(base, ev), _total(new, ev)
        out.append(f"# Event '{ev}' (base {bs} samples, new {ns} samples)")
        out.append("#")
        rows = table(base, new, ev, limit)
        shown = [tuple(c.replace("\0", "  ") for c in r["cells"]) for r in rows]
        widths = [len(h) for h in heads]
        for i in range(len(widths) - 1):
            widths[i] = max([widths[i], *(len(c[i]) for c in shown)])
        out.append(
            "# Baseline       New     Delta  "
            + "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()
        )
        out.append("# ........  ........  ........  " + "  ".join("." * w for w in widths))
        out.append("#")
        for r, cells in zip(rows, shown, strict=True):
            b = f"{r['base']:9.2f}%" if r["base"] is not None else " " * 10
            n = f"{r['new']:9.2f}%" if r["new"] is not None else " " * 10
            line = f"{b}{n}{r['delta']:+9.2f}%  " + "  ".join(
                c.ljust(w) for c, w in zip(cells, widths, strict=True)
            )
            if r["status"]:
                line = line.rstrip() + f"  [{r['status']}]"
            out.append(line.rstrip())
        out.append("")
    return "\n".join(out) + "\n"


def to_json(base: Side, new: Side, pairs: list, limit: float) -> dict[str, Any]:
    def prog(p: Prog | None) -> dict[str, Any] | None:
        if p is None:
            return None
        return {
            "kallsyms": p.ksym,
            "tag": p.tag,
            "ids": sorted(p.ids),
            "functions": sorted(p.funcs),
        }

    both, only_b, only_n = events_of(base, new)
    doc: dict[str, Any] = {
        "base": {"input": base.path, "side_file": base.side},
        "new": {"input": new.path, "side_file": new.side},
        "sort": base.keys,
        "bpf_only": base.an.bpf_only,
        "programs": [
            {
                "name": (b or n).match,
                "status": "matched" if b is not None and n is not None else (b or n).status,
                "base": prog(b),
                "new": prog(n),
            }
            for b, n in pairs
        ],
        "events_only_in_base": only_b,
        "events_only_in_new": only_n,
        "events": [],
    }
    for ev in both:
        (bs, bp), (ns, np_) = _total(base, ev), _total(new, ev)
        rows = []
        for r in table(base, new, ev, limit):
            row: dict[str, Any] = {}
            for k, c in zip(base.keys, r["cells"], strict=True):
                if "\0" in c:
                    row[k], row["source"] = c.split("\0", 1)
                else:
                    row[k] = c
            row.update(
                base=_round(r["base"]),
                new=_round(r["new"]),
                delta=round(r["delta"], 4),
                status=r["status"] or _presence(r),
            )
            rows.append(row)
        doc["events"].append(
            {
                "name": ev,
                "base": {"samples": bs, "period": bp},
                "new": {"samples": ns, "period": np_},
                "rows": rows,
            }
        )
    return doc


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _presence(r: dict[str, Any]) -> str:
    if r["base"] is not None and r["new"] is not None:
        return "both"
    return "no samples in new" if r["new"] is None else "no samples in base"
