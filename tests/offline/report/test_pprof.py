"""pprof profiles written from the recorded perf.data fixtures, read back by google/pprof.

The profile is parsed by the protobuf runtime and read by the real pprof CLI; what they
say is checked against bpfsym's own flat report (--json), perf's readings of the same
files (perf script, perf buildid-list), the /proc/kallsyms BPF lines record.py saved
and the BPF programs' C sources kept beside the fixtures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kit.perftext import fixture_kallsyms, is_bpf_func
from kit.pproftext import (
    bpf_chains,
    leaf_values,
    perf_script_bpf_chains,
    pprof,
    raw_mappings,
    read_profile,
    tags,
    top,
)

from bpfsym.report.analysis import analyze
from bpfsym.report.pprof import write_pprof
from bpfsym.symbolize.symbols import source_text

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "perfdata")
LINES = ["comm", "dso", "sym", "srcline"]


def report_json(name: str, *args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "bpfsym", "report", "-i", os.path.join(FIX, name), "--no-side",
         "--kallsyms", fixture_kallsyms(), "--json", *args],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def profile(tmp_path, name: str, keys: list[str], g: bool = False, bpf_only: bool = False) -> str:
    an = analyze(os.path.join(FIX, name), None, keys, g, bpf_only, fixture_kallsyms())
    out = str(tmp_path / f"{name}.{'g' if g else 'flat'}.pb.gz")
    write_pprof(an, out)
    return out


def kallsyms_bpf(name: str) -> dict[str, list[int]]:
    """name -> addresses of the fixture's own BPF functions in /proc/kallsyms then."""
    out: dict[str, list[int]] = {}
    with open(os.path.join(FIX, f"{name}.kallsyms-bpf.txt")) as f:
        for line in f:
            addr, _t, sym = line.split()[:3]
            out.setdefault(sym, []).append(int(addr, 16))
    return out


def bpf_shares(doc: dict, event: int = 0) -> dict[str, float]:
    rows = doc["events"][event]["rows"]
    return {r["sym"][4:]: r["overhead"] for r in rows if is_bpf_func(r["sym"])}


def source_line(path: str, line: int) -> str:
    with open(os.path.join(FIX, os.path.basename(path))) as f:
        return f.read().splitlines()[line - 1]


@pytest.fixture(scope="module")
def flat(tmp_path_factory) -> str:
    return profile(tmp_path_factory.mktemp("pprof"), "bpf.data", LINES)


def test_pprof_top_equals_the_flat_report(flat):
    doc = report_json("bpf.data", "--sort", "sym")
    want = bpf_shares(doc)
    assert len(want) >= 3  # spin_mix, xdp_burn, burn_mix (xdp_spin has hardly a sample)
    got = top(flat)
    for name, pct in want.items():
        assert got[name][0] == pytest.approx(pct, abs=0.006), name  # pprof prints 2 decimals
    # and the profile as the protobuf runtime reads it: the periods exactly
    prof = read_profile(flat)
    st = prof.string_table
    assert [(st[t.type], st[t.unit]) for t in prof.sample_type] == [
        ("samples", "count"),
        ("cpu", "nanoseconds"),
    ]
    assert st[prof.default_sample_type] == "cpu"
    periods = leaf_values(prof, 1)
    counts = leaf_values(prof, 0)
    for r in doc["events"][0]["rows"]:
        if is_bpf_func(r["sym"]):
            assert periods[r["sym"][4:]] == r["period"]
            assert counts[r["sym"][4:]] == r["samples"]
    assert sum(periods.values()) == doc["events"][0]["period"]
    assert sum(counts.values()) == doc["events"][0]["samples"]


def test_bpf_names_mappings_and_addresses_are_the_kernels(flat):
    ksyms = kallsyms_bpf("bpf")
    prof = read_profile(flat)
    st = prof.string_table
    funcs = {f.id: f for f in prof.function}
    maps = {m.id: m for m in prof.mapping}
    bpf_maps = 0
    for m in prof.mapping:
        name = st[m.filename]
        if not name.startswith("bpf_prog_"):
            continue
        bpf_maps += 1
        assert name in ksyms  # the main function's kallsyms name
        assert name.startswith(f"bpf_prog_{st[m.build_id]}_")  # build id: the program tag
        assert m.has_functions and m.has_filenames and m.has_line_numbers
    assert bpf_maps >= 3  # xdp_spin twice (ids 912, 924), xdp_burn
    sizes = perf_header_sizes()
    for loc in prof.location:
        fn = funcs[loc.line[0].function_id]
        name = st[fn.name]
        if name not in ksyms:
            continue
        # inside the function that kallsyms listed under that name
        assert any(a <= loc.address < a + sizes[a] for a in ksyms[name]), name
        m = maps[loc.mapping_id]
        assert m.memory_start <= loc.address < m.memory_limit
    # pprof itself sees the program mappings with their tags, and the recorded build ids
    bids = dict(
        reversed(line.split(None, 1))
        for line in subprocess.run(
            ["perf", "buildid-list", "-i", os.path.join(FIX, "bpf.data")],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()
    )  # fmt: skip
    seen = raw_mappings(flat)
    assert {"[kernel.kallsyms]", "/usr/bin/dd"} <= {m["file"] for m in seen}
    for m in seen:
        if m["file"].startswith("bpf_prog_"):
            assert m["build_id"] == m["file"].split("_")[2]
        elif m["file"] in bids:
            assert m["build_id"] == bids[m["file"]]
    assert seen[0]["file"] == "[kernel.kallsyms]"  # pprof's "main binary"


def perf_header_sizes() -> dict[int, int]:
    """address -> size of every BPF function in perf's header dump (bpf_prog_info)."""
    out = {}
    with open(os.path.join(FIX, "bpf.perf-header.txt")) as f:
        for line in f:
            parts = line.split()
            if "addr" in parts and "size" in parts:
                out[int(parts[parts.index("addr") + 1], 16)] = int(parts[parts.index("size") + 1])
    return out


def test_pprof_lines_are_the_btf_source_lines(flat):
    doc = report_json("bpf.data", "--sort", "sym,srcline")
    got = top(flat, "-lines")
    n = 0
    for r in doc["events"][0]["rows"]:
        if not is_bpf_func(r["sym"]) or r["srcline"] == "??:0":
            continue
        key = f"{r['sym'][4:]} {r['srcline']}"
        assert got[key][0] == pytest.approx(r["overhead"], abs=0.006), key
        file, line = r["srcline"].rsplit(":", 1)
        # the text BTF carried is the line of the C source the object was built from
        assert r["source"] == source_text(source_line(file, int(line)))
        n += 1
    assert n >= 6
    # a BPF line's column (0: none, as clang gives a function's first line) points into
    # that source line, at the start of something
    prof = read_profile(flat)
    st = prof.string_table
    funcs = {f.id: f for f in prof.function}
    cols = 0
    for loc in prof.location:
        ln = loc.line[0]
        fn = funcs[ln.function_id]
        if not st[fn.filename] or not ln.line:
            continue
        text = source_line(st[fn.filename], ln.line)
        assert 0 <= ln.column <= len(text)
        if ln.column:
            assert not text[ln.column - 1].isspace()
            cols += 1
        # the function's first line (its first line info) and this one are in its body:
        # after the line that declares it
        short = st[fn.name].split("_", 3)[3]
        with open(os.path.join(FIX, os.path.basename(st[fn.filename]))) as f:
            decl = next(i for i, x in enumerate(f, 1) if f" {short}(" in x)
        assert decl <= fn.start_line and decl <= ln.line
    assert cols >= 5


def test_pprof_traces_are_perfs_call_chains(tmp_path):
    g = profile(tmp_path, "bpf.data", ["comm", "dso", "sym"], g=True)
    got = bpf_chains(g)
    assert got == perf_script_bpf_chains(os.path.join(FIX, "bpf.data"))
    assert got[("spin_mix", "xdp_spin")] > 100  # through the sub-program, up to its caller
    # the flat view of the call-graph profile is the flat report too; cum has the callees
    flat_doc = bpf_shares(report_json("bpf.data", "--sort", "sym"))
    tops = top(g)
    for name, pct in flat_doc.items():
        assert tops[name][0] == pytest.approx(pct, abs=0.006), name
    children = report_json("bpf.data", "--sort", "sym", "-g")["events"][0]["rows"]
    for r in children:
        if is_bpf_func(r["sym"]):
            assert tops[r["sym"][4:]][1] == pytest.approx(r["children"], abs=0.006)


def test_comm_and_pid_keys_become_labels(tmp_path):
    path = profile(tmp_path, "bpf.data", ["comm", "pid", "sym"])
    want = {
        r["comm"]: r["overhead"]
        for r in report_json("bpf.data", "--sort", "comm")["events"][0]["rows"]
    }
    got = tags(path)
    assert set(got["comm"]) == set(want)
    for comm, pct in want.items():
        assert got["comm"][comm] == pytest.approx(pct, abs=0.006)
    pids = {
        int(r["pid"].split(":")[0])
        for r in report_json("bpf.data", "--sort", "pid")["events"][0]["rows"]
    }
    prof = read_profile(path)
    st = prof.string_table
    seen = {lb.num for s in prof.sample for lb in s.label if st[lb.key] == "tid"}
    assert seen == pids


def test_bpf_only_keeps_the_bpf_samples(tmp_path):
    path = profile(tmp_path, "bpf.data", LINES, bpf_only=True)
    doc = report_json("bpf.data", "--sort", "sym", "--bpf-only")
    prof = read_profile(path)
    st = prof.string_table
    maps = {m.id: st[m.filename] for m in prof.mapping}
    locs = {loc.id: maps[loc.mapping_id] for loc in prof.location}
    assert all(locs[s.location_id[0]].startswith("bpf_prog_") for s in prof.sample)
    assert sum(s.value[0] for s in prof.sample) == sum(
        r["samples"] for r in doc["events"][0]["rows"]
    )
    assert any("--bpf-only" in st[c] for c in prof.comment)


def test_two_events_are_two_pairs_of_sample_types(tmp_path):
    path = profile(tmp_path, "multi.data", ["comm", "dso", "sym"])
    prof = read_profile(path)
    st = prof.string_table
    assert [(st[t.type], st[t.unit]) for t in prof.sample_type] == [
        ("cpu-clock_samples", "count"),
        ("cpu-clock", "nanoseconds"),
        ("task-clock_samples", "count"),
        ("task-clock", "nanoseconds"),
    ]
    doc = report_json("multi.data", "--sort", "sym")
    for i, ev in enumerate(doc["events"]):
        got = top(path, f"-sample_index={ev['name']}")
        for name, pct in bpf_shares(doc, i).items():
            assert got[name][0] == pytest.approx(pct, abs=0.006), (ev["name"], name)


@pytest.mark.parametrize("name", ["pipe.data", "z.data"])
def test_pipe_and_compressed_files(tmp_path, name):
    path = profile(tmp_path, name, LINES)
    got = top(path)
    for sym, pct in bpf_shares(report_json(name, "--sort", "sym")).items():
        assert got[sym][0] == pytest.approx(pct, abs=0.006), sym
    # lines where the file has line info (pipe mode carries no bpf_prog_info)
    lines = report_json(name, "--sort", "sym,srcline")["events"][0]["rows"]
    has = any(r["srcline"] == "xdp_spin.c:10" for r in lines)
    assert ("xdp_spin.c:10" in pprof("-top", "-lines", path)) == has
    assert has == (name == "z.data")


def test_profile_to_stdout(tmp_path):
    path = str(tmp_path / "p.pb.gz")
    cmd = [sys.executable, "-P", "-m", "bpfsym", "report", "-i", os.path.join(FIX, "bpf.data"),
           "--no-side", "--kallsyms", fixture_kallsyms(), "--sort", ",".join(LINES), "--pprof", "-"]  # fmt: skip
    with open(path, "wb") as f:
        subprocess.run(cmd, stdout=f, check=True, cwd=ROOT)
    assert top(path) == top(profile(tmp_path, "bpf.data", LINES))
