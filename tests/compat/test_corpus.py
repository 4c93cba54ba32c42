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

import json
import os
import subprocess

import pytest
from kit import perfcompat as P

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


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_json_and_folded_say_what_the_table_says(path: str) -> None:
    # bpfsym's other outputs of the same reading: --json rows equal the --stdio table's
    # (same events, rows and shares), --folded lines add up to each file's sample count
    table = P.bpfsym_report(path, "dso,sym")
    if table.returncode != 0:
        return  # a refusal: test_report_agrees_with_perf judges it
    argv = [*P.bpfsym_argv(path, "dso,sym"), "--json"]
    r = subprocess.run(argv, capture_output=True, timeout=P.TIMEOUT)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.decode("utf-8", "surrogateescape"))
    shown = [s for s in table.sections]
    events = [e for e in doc["events"] if e["samples"]]
    assert [e["name"] for e in events] == [s.event for s in shown]
    for e, s in zip(events, shown, strict=True):
        want = {k: v["Overhead"] for k, v in s.totals().items()}
        got: dict[tuple[str, ...], float] = {}
        for row in e["rows"]:
            k = (row["dso"], row["sym"])
            got[k] = got.get(k, 0.0) + row["overhead"]
        for k, pct in want.items():
            assert abs(got.get(k, 0.0) - pct) <= 0.006 * (1 + list(want).count(k)), k
    folded = [a for a in P.bpfsym_argv(path, "dso,sym") if a not in ("--stdio",)]
    folded = folded[: folded.index("--sort")] + ["--folded"]
    f = subprocess.run(folded, capture_output=True, timeout=P.TIMEOUT)
    assert f.returncode == 0, f.stderr
    counts = sum(int(line.rsplit(b" ", 1)[1]) for line in f.stdout.splitlines() if line)
    assert counts == sum(e["samples"] for e in doc["events"])
