"""perf recorded with --no-bpf-event plus bpfsym's side file: samples in a program unloaded
long before are named as kallsyms did, with their source lines."""

from __future__ import annotations

import json

from kit.livekit import DEMO, Held, bpfsym_run, kallsyms_bpf, record_demo


def test_no_bpf_event_plus_side_file_names_unloaded_programs(tmp_path):
    with Held(DEMO) as held:  # only to learn the names kallsyms gives the demo
        ks = set(kallsyms_bpf().values())
        names = {f["ksym_name"] for p in held.progs for f in p["funcs"]}
    assert names <= ks
    out = tmp_path / "perf.data"
    record_demo(out, "--no-bpf-event", "-e", "cpu-clock", "-F", "4999", "-a")
    # the program is gone now; perf.data has no KSYMBOL/BPF_EVENT records for it
    assert not names & set(kallsyms_bpf().values())
    rep = bpfsym_run("report", "-i", str(out), "--sort", "sym", "--bpf-only", "--json")
    assert rep.returncode == 0, rep.stderr
    rows = json.loads(rep.stdout)["events"][0]["rows"]
    got = {row["sym"].removeprefix("[k] ") for row in rows if row["samples"] > 0}
    xdp_funcs = {n for n in names if not n.endswith("_tp_demo")}
    assert xdp_funcs <= got, (xdp_funcs, got)
    # perf 6.1 keeps KSYMBOL records with --no-bpf-event (names), but drops BPF_EVENT and
    # bpf_prog_info: source lines exist only through the side file
    lines = {}
    for extra in ([], ["--no-side"]):
        rep = bpfsym_run(
            "report", "-i", str(out), *extra, "--sort", "func,srcline", "--bpf-only", "--json"
        )
        assert rep.returncode == 0, rep.stderr
        rows = json.loads(rep.stdout)["events"][0]["rows"]
        lines[bool(extra)] = {row["srcline"] for row in rows if row["func"] in xdp_funcs}
    assert lines[False] and all(x.startswith("demo.bpf.c:") for x in lines[False])
    assert lines[True] == {"??:0"}
