"""bpfsym report reads every corpus perf.data as the installed perf does (perfcompat's rules).

tests/fixtures/perfdata-corpus/ holds public perf.data files of other projects' test suites
(SOURCES.tsv: origin and commit of each). For every file and every key set (`dso`,
`dso,sym`, `comm,dso,sym`, and the call-graph totals on files whose events have call
chains), perf and bpfsym read it now and must agree: same events, names, order and sample
counts; every perf row of >= 0.5 % matched within 0.05 points; a file perf cannot read
answered with exit 0, or exit 2 and one line. docs/perf-compat.md explains each file that
does not agree yet, and how perf computes what it prints.
"""

from __future__ import annotations

import os

import perfcompat as P
import pytest

FILES = P.corpus_files()
CHAINED = [f for f in FILES if P.has_callchains(f)]


def _id(path: str) -> str:
    return os.path.basename(path)


def test_the_corpus_is_whole() -> None:
    # every file SOURCES.tsv names is there, and nothing else is
    here = {
        n
        for n in os.listdir(P.CORPUS)
        if n not in ("SOURCES.tsv", "README.md") and not n.startswith(".")
    }
    assert here == {os.path.basename(f) for f in FILES}
    assert len(FILES) == 67


@pytest.mark.parametrize("keys", P.KEY_SETS)
@pytest.mark.parametrize("path", FILES, ids=_id)
def test_report_agrees_with_perf(path: str, keys: str) -> None:
    c = P.check(path, keys)
    assert c.verdict.ok, P.describe(c)


@pytest.mark.parametrize("path", CHAINED, ids=_id)
def test_children_totals_agree_with_perf(path: str) -> None:
    c = P.check(path, P.CHILDREN_KEYS, children=True)
    assert c.verdict.ok, P.describe(c)


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_perf_tables_parse(path: str) -> None:
    # the parser against perf's own numbers: per event, the -n column adds up to the
    # "# Samples:" count and the Overhead column to 100 % (each row rounded to 0.01)
    perf = P.perf_report(path, "comm,dso,sym")
    if not perf.readable:
        assert perf.returncode != 0 or not perf.sections
        return
    for s in perf.sections:
        assert s.key_headings() == ["Command", "Shared Object", "Symbol"]
        assert P.convert_unit(sum(r.samples or 0 for r in s.rows)) == s.samples
        total = sum(r.percents["Overhead"] for r in s.rows)
        if s.event_count:
            assert abs(total - 100.0) <= 0.005 * len(s.rows) + 1e-6
        assert all(r.key[2][:4] in ("[k] ", "[.] ", "[H] ", "[g] ", "[u] ") for r in s.rows)
