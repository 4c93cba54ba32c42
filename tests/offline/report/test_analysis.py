"""bpfsym report on the recorded fixtures, checked against what perf and the kernel said then.

Expected values come from files record.py saved while recording: perf's own
report (*.perf-sym.txt), perf's header dump (*.perf-header.txt) and the BPF lines
of /proc/kallsyms (*.kallsyms-bpf.txt). Kernel and user-space names depend on the
machine the test runs on, so only BPF names and totals are compared here; kernel names
come from the kallsyms recorded with the fixtures (kallsyms.xz), never the host's.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.perftext import event_counts, fixture_kallsyms, is_bpf_func, sections

from bpfsym.formats.errors import FormatError
from bpfsym.report.analysis import analyze
from bpfsym.report.render import render_stdio

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "perfdata")


def bpfsym(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfsym", *args], cwd=ROOT, capture_output=True, text=True
    )


def report(name: str, *args: str) -> str:
    ks = ("--kallsyms", fixture_kallsyms())  # the fixtures' own kernel names, on any host
    r = bpfsym("report", "-i", os.path.join(FIX, name), "--no-side", *ks, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def kallsyms_names(name: str) -> dict[int, str]:
    with open(os.path.join(FIX, name)) as f:
        return {int(line.split()[0], 16): line.split()[2] for line in f}


def perf_misnamed() -> dict[str, str]:
    """perf's name for a BPF function -> the kallsyms name at the same address.

    perf names the main function of a program with sub-programs after prog_tags[0]
    when it synthesizes records for programs loaded before it started. The fixtures
    share that program (record.py loads it once), and pipe-mode files carry no
    bpf_prog_info, so every fixture's header dump counts.
    """
    out = {}
    for name in ("bpf", "pipe", "multi", "z"):
        ksyms = kallsyms_names(f"{name}.kallsyms-bpf.txt")
        text = open(os.path.join(FIX, f"{name}.perf-header.txt")).read()
        for perf_name, addr in re.findall(r"sub_prog \d+: (\S+) addr 0x([0-9a-f]+)", text):
            k = ksyms.get(int(addr, 16))
            if k and k != perf_name:
                out[perf_name] = k
    return out


@pytest.mark.parametrize("name", ["bpf", "pipe", "multi", "z"])
def test_bpf_symbols_and_totals_match_perf(name: str) -> None:
    ours = report(f"{name}.data", "--sort", "sym")
    perf = open(os.path.join(FIX, f"{name}.perf-sym.txt")).read()
    assert event_counts(ours) == event_counts(perf)
    rename = perf_misnamed()
    assert rename  # the fixtures show perf's misnaming
    kallsyms = set(kallsyms_names(f"{name}.kallsyms-bpf.txt").values())
    ours_s, perf_s = sections(ours), sections(perf)
    assert set(ours_s) == set(perf_s)
    seen = 0
    for ev, rows in perf_s.items():
        want: dict[str, float] = {}
        for sym, pct in rows.items():
            if is_bpf_func(sym):
                n = sym[4:]
                want[rename.get(n, n)] = want.get(rename.get(n, n), 0.0) + pct
        got = {s[4:]: p for s, p in ours_s[ev].items() if is_bpf_func(s)}
        assert set(got) == set(want)
        assert set(got) <= kallsyms  # every BPF name is exactly as /proc/kallsyms had it
        for sym, pct in want.items():
            assert abs(got[sym] - pct) <= 0.011 * (1 + list(rows).count(sym)), sym
            seen += 1
    assert seen >= 3


def test_programs_unloaded_during_recording_are_named() -> None:
    # xdp_burn was loaded and unloaded while perf recorded; no side file, host irrelevant
    ours = report("bpf.data", "--sort", "sym", "--bpf-only")
    assert re.search(r"\[k\] bpf_prog_939f8be8e38600b7_xdp_burn", ours)
    assert re.search(r"\[k\] bpf_prog_0ce981360ec78929_burn_mix", ours)


def _source_lines(path: str, func: str) -> range:
    """Lines of a C function's body in a fixture source, by reading the source."""
    lines = open(path).read().splitlines()
    first = next(i for i, line in enumerate(lines, 1) if re.search(rf"\b{func}\(", line))
    last = next(i for i, line in enumerate(lines, 1) if i > first and line == "}")
    return range(first, last + 1)


def test_sort_prog_func_srcline_uses_perfs_line_info_and_btf() -> None:
    doc = json.loads(report("bpf.data", "--json", "--bpf-only", "--sort", "prog,func,srcline"))
    rows = doc["events"][0]["rows"]
    assert rows
    for row in rows:
        func = row["func"].rsplit("_", 2)
        name = "_".join(func[-2:])  # spin_mix, xdp_burn, ...
        src = "xdp_burn.c" if "burn" in name else "xdp_spin.c"
        file, line = row["srcline"].split(":")
        assert file == src
        assert int(line) in _source_lines(os.path.join(FIX, src), name)
        assert row["prog"].endswith(("_xdp_spin", "_xdp_burn"))


def test_srcline_shows_the_source_text_from_btf() -> None:
    """Each BPF srcline carries the text of that line of the C source (from BTF line
    info, whitespace collapsed): checked against the fixture's own .c files."""
    doc = json.loads(report("bpf.data", "--json", "--bpf-only", "--sort", "func,srcline"))
    rows = doc["events"][0]["rows"]
    assert rows
    for row in rows:
        file, line = row["srcline"].split(":")
        with open(os.path.join(FIX, file)) as f:
            want = f.read().splitlines()[int(line) - 1]
        assert row["source"] and row["source"] == " ".join(want.split())
    text = report("bpf.data", "--bpf-only", "--sort", "func,srcline")
    for row in rows:
        cell = f"{row['srcline']}  {row['source']}"
        assert re.search(rf"\s{re.escape(row['func'])}\s+{re.escape(cell)}$", text, re.M), cell


def test_srcline_outside_bpf_has_no_source() -> None:
    doc = json.loads(report("bpf.data", "--json", "--sort", "dso,srcline"))
    rows = doc["events"][0]["rows"]
    other = [r for r in rows if not r["dso"].startswith("bpf_prog_")]  # perf: a DSO per program
    assert other and all(r["srcline"] == "??:0" and r["source"] == "" for r in other)


def test_json_and_folded_agree_with_the_samples() -> None:
    doc = json.loads(report("bpf.data", "--json"))
    ev = doc["events"][0]
    assert abs(sum(r["overhead"] for r in ev["rows"]) - 100.0) < 0.01
    assert sum(r["samples"] for r in ev["rows"]) == ev["samples"]
    assert sum(r["period"] for r in ev["rows"]) == ev["period"]
    folded = report("bpf.data", "--folded")
    counts = [int(line.rsplit(" ", 1)[1]) for line in folded.splitlines()]
    assert sum(counts) == ev["samples"]
    assert any(";bpf_prog_0ce981360ec78929_burn_mix " in line for line in folded.splitlines())
    # callers come first: the BPF function is called from bpf_test_run
    burn = [line for line in folded.splitlines() if line.endswith(tuple("0123456789"))]
    assert any(re.search(r"bpf_test_run;.*burn_mix \d+$", line) for line in burn)


def test_call_graph_view_has_children_and_self() -> None:
    out = report("bpf.data", "-g", "--stdio")
    assert "# Children      Self" in out
    m = re.search(r"^\s+([\d.]+)%\s+([\d.]+)%\s+\S+\s+\S+\s+\[k\] bpf_test_run$", out, re.M)
    assert m and float(m.group(1)) > float(m.group(2))  # it calls the BPF programs


def test_header_says_where_names_came_from() -> None:
    out = report("bpf.data", "--sort", "sym")
    assert "# side file: none" in out
    assert re.search(r"# samples named by: .*perf\.data records \d+", out)
    assert re.search(r"# unresolved: \d+ of \d+ samples", out)


@pytest.mark.parametrize("cut", [50, 300, 40000, -100])
def test_truncated_perf_data_exits_2_with_one_line(tmp_path: object, cut: int) -> None:
    blob = open(os.path.join(FIX, "bpf.data"), "rb").read()
    bad = os.path.join(str(tmp_path), "bad.data")
    with open(bad, "wb") as f:
        f.write(blob[:cut])
    r = bpfsym("report", "-i", bad, "--no-side")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and bad in lines[0] and "offset" in lines[0]


def test_default_side_file_is_input_dot_bpfsym(tmp_path: object) -> None:
    d = str(tmp_path)
    shutil.copy(os.path.join(FIX, "bpf.data"), os.path.join(d, "x.data"))
    with open(os.path.join(d, "x.data.bpfsym"), "wb") as f:
        f.write(b"not a side file")
    r = bpfsym("report", "-i", os.path.join(d, "x.data"))
    assert r.returncode == 2 and "x.data.bpfsym" in r.stderr  # it was picked up and refused
    assert bpfsym("report", "-i", os.path.join(d, "x.data"), "--no-side").returncode == 0


PIPE = open(os.path.join(FIX, "pipe.data"), "rb").read()[:30000]


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(16, len(PIPE) - 1), st.integers(0, 255)), max_size=6))
def test_mutated_records_through_the_whole_report_only_raise_format_error(
    muts: list[tuple[int, int]],
) -> None:
    blob = bytearray(PIPE)
    for pos, val in muts:
        blob[pos] = val
    empty = os.devnull  # an empty kallsyms file: no host lookups
    try:
        an = analyze("m.data", None, ["comm", "dso", "sym"], True, False, empty, io.BytesIO(blob))
        render_stdio(an, None, 0.0)
    except FormatError:
        pass
