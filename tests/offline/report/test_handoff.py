"""report.split.KernelHandoff: the second reading process takes the kernel symbols the
first one made after the fork (no kallsyms read or parsed twice), across a real fork, and
makes its own whenever it got none or another's."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from kit.perftext import fixture_kallsyms
from kit.splitkit import kernel_symbols_callers

from bpfsym.read.kallsyms import KernelSymbols
from bpfsym.report.analysis import analyze
from bpfsym.report.render import render_stdio
from bpfsym.report.split import KernelHandoff

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "perfdata")


def _fixture_table() -> KernelSymbols:
    with open(fixture_kallsyms(), "rb") as f:
        return KernelSymbols.from_text(f.read(), "kallsyms file k", "k note", np=np)


def _spread(ks: KernelSymbols) -> list[int]:
    """Addresses at, just below and just past 1001 symbols spread over the table, and
    below the first one."""
    a, n = ks.addrs, len(ks.addrs)
    at = [a[k * (n - 1) // 1000] for k in range(1001)]
    return [a[0] - 1, *(x + d for x in at for d in (-1, 0, 5))]


def _in_second(hand: KernelHandoff, key: object) -> tuple[int, int]:
    """What a forked process (the second reader) takes with key: the answers of the table
    it got to a spread of addresses, its origin and notes; or None."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            hand.second()
            got = hand.take(np, key)
            said = None
            if got is not None:
                ks, note = got
                said = (
                    [(s.addr, s.type, s.name, s.module) if s else None
                     for s in map(ks.lookup, _spread(ks))],
                    ks.origin, ks.note, note, len(ks),
                )  # fmt: skip
            os.write(w, pickle.dumps(said))
        finally:
            os._exit(0)
    os.close(w)
    hand.first()
    return r, pid


def _answer(r: int, pid: int) -> object:
    chunks = []
    while chunk := os.read(r, 1 << 20):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return pickle.loads(b"".join(chunks))


def test_the_second_process_takes_the_first_ones_table() -> None:
    ks = _fixture_table()
    assert ks.columns() is not None and len(ks) > 100000
    hand = KernelHandoff()
    r, pid = _in_second(hand, ("_text", 0x1000))
    hand.give(ks, "the note", ("_text", 0x1000))
    got = _answer(r, pid)
    assert got is not None
    answers, origin, note, kernel_note, n = got
    want = [(s.addr, s.type, s.name, s.module) if s else None
            for s in map(ks.lookup, _spread(ks))]  # fmt: skip
    assert answers == want and answers[0] is None and len(set(answers)) > 1000
    assert (origin, note, kernel_note, n) == ("kallsyms file k", "k note", "the note", len(ks))


@pytest.mark.parametrize(
    "how",
    ["other key", "no table", "not columns", "share read without one"],
)
def test_the_second_process_makes_its_own_unless_handed_a_table_of_its_key(how: str) -> None:
    hand = KernelHandoff()
    r, pid = _in_second(hand, ("_text", 0x1000))
    if how == "other key":  # the kernel map relocated otherwise in the first process
        hand.give(_fixture_table(), "", ("_text", 0x2000))
    elif how == "no table":
        hand.give(None, "no kallsyms", ("_text", 0x1000))
    elif how == "not columns":  # a table made of KernelSymbol objects (a side file's)
        listed = KernelSymbols(_fixture_table().syms[:50], "side")
        assert listed.columns() is None
        hand.give(listed, "", ("_text", 0x1000))
    else:
        hand.done()
    assert _answer(r, pid) is None
    hand.give(_fixture_table(), "", ("_text", 0x1000))  # after done: nothing more to do


def test_a_split_report_parses_the_kallsyms_once(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forced into two processes, the report is the one-process report, and only the
    first process chooses the kernel symbols (each call leaves its pid in a file: the
    forked process shares this patch)."""
    callers = kernel_symbols_callers(monkeypatch, str(tmp_path))
    path = os.path.join(FIX, "multi.data")
    ks = fixture_kallsyms()
    two = analyze(path, None, ["comm", "dso", "sym"], True, False, ks, None, True, True)
    assert callers() == [os.getpid()]
    one = analyze(path, None, ["comm", "dso", "sym"], True, False, ks, None, True, False)
    text = render_stdio(two, None, 0.0)
    assert text == render_stdio(one, None, 0.0)
    assert "[k] kallsyms_expand_symbol" in text  # kernel names from the handed-over table
