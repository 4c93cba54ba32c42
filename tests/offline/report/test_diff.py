"""bpfsym diff on the recorded perf.data fixtures, against perf diff and bpfsym's reports.

The fixtures hold the same BPF programs (same tags), so perf diff, which pairs entries
by their names, is a reference for BPF functions here; programs that were rebuilt
(other tags) are the live test's (tests/live/diff/test_diff.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from kit.perftext import fixture_kallsyms, is_bpf_func

from bpfsym import cli

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "perfdata")


def diff(capsys, *args: str) -> str:
    code = cli.main(["diff", *args, "--kallsyms", fixture_kallsyms()])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def diff_json(capsys, base: str, new: str, *args: str) -> dict:
    return json.loads(
        diff(capsys, os.path.join(FIX, base), os.path.join(FIX, new), "--json", *args)
    )


def report_json(name: str, *args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "bpfsym", "report", "-i", os.path.join(FIX, name), "--no-side",
         "--kallsyms", fixture_kallsyms(), "--json", *args],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def short(ksym: str) -> str:
    """bpf_prog_<tag>_<name> -> name."""
    return ksym.split("_", 3)[3]


def perf_diff_bpf(base: str, new: str) -> dict[str, tuple[float, float]]:
    """perf diff (delta-abs): per BPF function name without its tag, (baseline %, delta)
    summed over perf's entries of that name."""
    out = subprocess.run(
        ["perf", "diff", os.path.join(FIX, base), os.path.join(FIX, new)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    got: dict[str, tuple[float, float]] = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(?:([\d.]+)%)?\s+([+-][\d.]+)%?\s+\S+\s+(\[k\] \S+)\s*$", line)
        if m and is_bpf_func(m.group(3)):
            name = short(m.group(3)[4:])
            b, d = got.get(name, (0.0, 0.0))
            got[name] = (b + float(m.group(1) or 0), d + float(m.group(2)))
    return got


def test_bpf_rows_equal_perf_diff(capsys):
    doc = diff_json(capsys, "bpf.data", "z.data")
    want = perf_diff_bpf("bpf.data", "z.data")
    assert {"spin_mix", "burn_mix"} <= set(want)
    rows = {
        r["sym"][4:]: r for r in doc["events"][0]["rows"] if r["dso"] in ("xdp_spin", "xdp_burn")
    }
    for name, (base, delta) in want.items():
        r = rows[name]
        assert (r["base"] or 0.0) == pytest.approx(base, abs=0.011), name
        assert r["delta"] == pytest.approx(delta, abs=0.011), name
    # same code in both files: every program matched, tags equal
    assert {p["name"] for p in doc["programs"]} == {"xdp_spin", "xdp_burn"}
    for p in doc["programs"]:
        assert p["status"] == "matched" and p["base"]["tag"] == p["new"]["tag"]


def test_deltas_are_the_difference_of_the_two_reports(capsys):
    keys = "prog,func,srcline"
    doc = diff_json(capsys, "bpf.data", "multi.data", "--sort", keys, "--bpf-only")
    assert doc["events_only_in_new"] == ["task-clock"]
    assert [e["name"] for e in doc["events"]] == ["cpu-clock"]

    def shares(name: str) -> dict[tuple, float]:
        rows = report_json(name, "--sort", keys, "--bpf-only")["events"][0]["rows"]
        out: dict[tuple, float] = {}
        for r in rows:
            k = (short(r["prog"]), short(r["func"]), r["srcline"].split(":")[0], r["source"])
            out[k] = out.get(k, 0.0) + r["overhead"]
        return out

    base, new = shares("bpf.data"), shares("multi.data")
    got: dict[tuple, tuple[float, float, float]] = {}
    for r in doc["events"][0]["rows"]:
        k = (r["prog"], r["func"], r["srcline"].split(":")[0], r["source"])
        b, n, d = got.get(k, (0.0, 0.0, 0.0))
        got[k] = (b + (r["base"] or 0.0), n + (r["new"] or 0.0), d + r["delta"])
    assert set(got) == set(base) | set(new)
    for k, (b, n, d) in got.items():
        assert b == pytest.approx(base.get(k, 0.0), abs=1e-3), k
        assert n == pytest.approx(new.get(k, 0.0), abs=1e-3), k
        assert d == pytest.approx(new.get(k, 0.0) - base.get(k, 0.0), abs=2e-3), k


def test_a_file_against_itself(capsys):
    doc = diff_json(capsys, "bpf.data", "bpf.data", "--sort", "prog,func,srcline")
    rows = doc["events"][0]["rows"]
    assert rows and all(r["delta"] == 0 and r["status"] == "both" for r in rows)
    text = diff(capsys, os.path.join(FIX, "bpf.data"), os.path.join(FIX, "bpf.data"))
    assert "only in" not in text
    assert re.search(r"^# Baseline\s+New\s+Delta\s+Shared Object\s+Symbol$", text, re.M)


def test_text_output_is_perf_diff_like(capsys):
    text = diff(capsys, os.path.join(FIX, "bpf.data"), os.path.join(FIX, "z.data"))
    assert "# Event 'cpu-clock'" in text
    # BPF entries without their tags: program and function names
    m = re.search(
        r"^\s+([\d.]+)%\s+([\d.]+)%\s+([+-][\d.]+)%\s+xdp_burn\s+\[k\] burn_mix$", text, re.M
    )
    assert m, text
    assert float(m.group(3)) == pytest.approx(float(m.group(2)) - float(m.group(1)), abs=0.011)
    assert re.search(r"^#   xdp_spin\s+tag b864bc1553a14369 -> b864bc1553a14369", text, re.M)


@pytest.mark.parametrize(
    "args, what",
    [
        (["/nonexistent/a.data", os.path.join(FIX, "bpf.data")], "/nonexistent/a.data"),
        ([os.path.join(FIX, "xdp_spin.c"), os.path.join(FIX, "bpf.data")], "xdp_spin.c"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, what):
    code = cli.main(["diff", *args])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and what in err and "Traceback" not in err
