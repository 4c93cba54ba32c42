"""report.render's call-graph view: children overhead and callee graphs against their
definitions, computed here from the stacks themselves (not the stack tree render uses)."""

from __future__ import annotations

import os

import pytest
from kit.perftext import fixture_kallsyms

from bpfsym.report import render as R
from bpfsym.report.analysis import analyze

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
FILES = [  # call chains: a BPF workload recorded here, and two of other projects' suites
    "perfdata/bpf.data",
    "perfdata-corpus/quipper__perf.data.callgraph-3.8",
    "perfdata-corpus/pp__fork_static_gcc_perf.data.zstd",
]


def _definition(an: object, st: object) -> tuple[dict, dict]:
    """Per entry (its cells): the period of the stacks it appears in, and its callee
    tree: what follows its outermost occurrence on each stack, merged by name, from the
    caller side (name -> [period, children])."""
    children: dict = {}
    trees: dict = {}
    for (head, syms), (period, _n) in st.stacks.items():
        path = list(reversed(syms))  # outermost caller first
        seen = set()
        for i, s in enumerate(path):
            c = R._cells_for(an, head, s)
            if c in seen:
                continue
            seen.add(c)
            children[c] = children.get(c, 0) + period
            place = trees.setdefault(c, {})
            for below in path[i + 1 :]:
                got = place.setdefault(below.name, [0, {}])
                got[0] += period
                place = got[1]
    return children, trees


def _lines(tree: dict, total: int, graph_min: float, indent: str) -> list[str]:
    shown = [(name, p, kids) for name, (p, kids) in tree.items() if 100.0 * p / total >= graph_min]
    shown.sort(key=lambda x: (-x[1], x[0]))
    out = []
    for i, (name, p, kids) in enumerate(shown):
        last = i == len(shown) - 1
        out.append(f"{indent}{'`' if last else '|'}--{100.0 * p / total:.2f}%-- {name}")
        out += _lines(kids, total, graph_min, indent + ("    " if last else "|   "))
    return out


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("keys", [["comm", "dso", "sym"], ["sym"], ["pid", "sym"]])
@pytest.mark.parametrize("graph_min", [0.0, 0.5, 3.0])
def test_children_and_callee_graphs_are_their_definitions(
    name: str, keys: list[str], graph_min: float
) -> None:
    path = os.path.join(FIXTURES, name)
    an = analyze(path, None, keys, True, False, fixture_kallsyms(), None, True, False)
    st = next(s for s in an.events.values() if s.samples)
    children, trees = _definition(an, st)
    assert R._children(an, st) == children
    total = st.period
    lines = [(c, p, 0) for c, p in children.items()]
    got = R._graphs(an, st, lines, total, graph_min)
    want = {}
    for c, p in children.items():
        if 100.0 * p / total >= graph_min:
            want[c] = _lines(trees[c], total, graph_min, "            ")
    assert {c: g for c, g in got.items() if g} == {c: g for c, g in want.items() if g}
    assert sum(len(g) for g in want.values()) >= 4  # graphs with lines
