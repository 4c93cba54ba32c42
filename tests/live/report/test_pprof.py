"""bpfsym report --pprof on a fresh system-wide recording of the demo, read by pprof's CLI.

The demo's xdp_demo calls three sub-programs; the profile must give every one of the four
functions the share bpfsym's flat report gives it, BTF source lines that are the lines
of bpf/demo.bpf.c, and call chains from each sub-program through xdp_demo into the
kernel's BPF_PROG_TEST_RUN. Program names and tags are the loader's own reading
(bpf_prog_info through libbpf).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kit.livekit import BPF, DEMO, bpfsym_run, ensure_loader
from kit.perftext import is_bpf_func
from kit.pproftext import bpf_chains, perf_script_bpf_chains, read_profile, top, traces

from bpfsym.symbolize.symbols import source_text

SUBPROGS = ("parse_ipv4", "hash_mix", "count_bytes")


def write_profile(data: Path, out: Path, *args: str) -> None:
    """`bpfsym report -i DATA --pprof OUT ARGS`."""
    r = bpfsym_run("report", "-i", str(data), "--pprof", str(out), *args)
    assert r.returncode == 0, r.stderr


def report_json(data: Path, *args: str) -> dict:
    r = bpfsym_run("report", "-i", str(data), "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("pprof_live") / "perf.data"
    r = bpfsym_run(
        "record", "-e", "cpu-clock", "-F", "4999", "-a", "-g", "-o", str(out), "--",
        str(ensure_loader()), "run", str(DEMO), "xdp_demo", "--seconds", "2",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    prog = json.loads(r.stdout.strip().splitlines()[-1])  # the loader's bpf_prog_info
    assert prog["name"] == "xdp_demo"
    return out, prog


def test_every_bpf_function_has_the_flat_reports_share(recording, tmp_path):
    data, prog = recording
    prof_path = tmp_path / "flat.pb.gz"
    write_profile(data, prof_path, "--sort", "comm,dso,sym,srcline")
    doc = report_json(data, "--sort", "sym")
    want = {r["sym"][4:]: r["overhead"] for r in doc["events"][0]["rows"] if is_bpf_func(r["sym"])}
    got = top(str(prof_path))
    main = f"bpf_prog_{prog['tag']}_xdp_demo"
    ours = [n for n in want if n == main or n.endswith(SUBPROGS)]
    assert main in ours and len(ours) == 4, sorted(want)
    for name in want:
        assert got[name][0] == pytest.approx(want[name], abs=0.1), name
    # the program's mapping: its main function's kallsyms name, build id its tag
    p = read_profile(str(prof_path))
    st = p.string_table
    maps = {st[m.filename]: st[m.build_id] for m in p.mapping}
    assert maps[main] == prog["tag"]


def test_pprof_lines_are_the_demos_source_lines(recording, tmp_path):
    data, _prog = recording
    prof_path = tmp_path / "lines.pb.gz"
    write_profile(data, prof_path, "--sort", "comm,dso,sym,srcline")
    got = top(str(prof_path), "-lines")
    src = (BPF / "demo.bpf.c").read_text().splitlines()
    rows = report_json(data, "--sort", "sym,srcline", "--bpf-only")["events"][0]["rows"]
    for r in rows:
        if not r["sym"][4:].endswith(("xdp_demo", *SUBPROGS)) or r["srcline"] == "??:0":
            continue
        file, line = r["srcline"].rsplit(":", 1)
        assert file == "demo.bpf.c"
        # BTF's text is the file's; line 0 is code clang gives no line (its text is empty)
        assert r["source"] == (source_text(src[int(line) - 1]) if int(line) else "")
        # pprof names a location by file:line, by its file alone when the line is 0
        # (internal/graph/graph.go NodeInfo.NameComponents)
        key = f"{r['sym'][4:]} {r['srcline'] if int(line) else file}"
        assert got[key][0] == pytest.approx(r["overhead"], abs=0.1), key
    lines_out = [k for k in got if "demo.bpf.c:" in k]
    assert len(lines_out) >= 8
    # each of the four functions has lines of its own
    for f in ("xdp_demo", *SUBPROGS):
        assert any(k.split()[0].endswith(f"_{f}") for k in lines_out), f


def test_pprof_traces_go_through_the_sub_programs(recording, tmp_path):
    data, prog = recording
    prof_path = tmp_path / "g.pb.gz"
    write_profile(data, prof_path, "-g")
    main = f"bpf_prog_{prog['tag']}_xdp_demo"
    chains = bpf_chains(str(prof_path))
    # as perf itself reads the call chains
    assert chains == perf_script_bpf_chains(str(data))
    for sub in SUBPROGS:
        through = sum(n for c, n in chains.items() if c[:2] == (sub, "xdp_demo"))
        alone = sum(n for c, n in chains.items() if c == (sub,))
        # from xdp_demo; a sample on the sub-program's first instruction, before its
        # frame is set up, misses that caller (frame-pointer unwinding)
        assert through > 10 * alone, (sub, through, alone)
    full = [fr for _v, fr in traces(str(prof_path)) if fr[0].endswith(f"_{SUBPROGS[1]}")]
    assert full and all("bpf_test_run" in fr for fr in full)  # run by BPF_PROG_TEST_RUN
    assert any(fr[1] == main for fr in full)
    # the call-graph profile's cum is the report's children overhead
    rows = report_json(data, "--sort", "sym", "-g")["events"][0]["rows"]
    tops = top(str(prof_path))
    for r in rows:
        if r["sym"][4:] == main:
            assert tops[main][1] == pytest.approx(r["children"], abs=0.1)
            assert tops[main][1] > tops[main][0]  # the sub-programs' time is under it
