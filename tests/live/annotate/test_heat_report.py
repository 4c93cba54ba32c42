"""annotate and report agree on the demo recorded under load: every BPF sample falls on an
instruction boundary, and per-instruction counts add up to report's count per function."""

from __future__ import annotations

import json

from kit.livekit import bpfsym_run, record_demo

from bpfsym.annotate.heat import bpf_sample_counts
from bpfsym.read.sidefile import read_capture


def test_annotate_counts_match_report_and_fall_on_boundaries(tmp_path):
    out = tmp_path / "perf.data"
    record_demo(out, "-e", "cpu-clock", "-F", "4999", "-a", "-g", run=("--seconds", "2"))
    rep = bpfsym_run("report", "-i", str(out), "--sort", "func", "--bpf-only", "--json")
    assert rep.returncode == 0, rep.stderr
    by_func = {row["func"]: row["samples"] for row in json.loads(rep.stdout)["events"][0]["rows"]}
    ann = bpfsym_run("annotate", "-i", str(out), "--json")
    assert ann.returncode == 0, ann.stderr
    progs = json.loads(ann.stdout)
    demo = next(p for p in progs if p["name"] == "xdp_demo")
    assert len(demo["functions"]) == 4
    starts = set()
    for f in demo["functions"]:
        insns = f["instructions"]
        starts |= {i["address"] for i in insns}
        assert sum(i["samples"] for i in insns) == f["samples"] == by_func[f["name"]], f["name"]
        # the instructions cover the function's bytes exactly
        assert sum(len(i["bytes"]) // 2 for i in insns) == f["size"]
    assert sum(f["samples"] for f in demo["functions"]) > 500
    heat = bpf_sample_counts(str(out), read_capture(str(out) + ".bpfsym"))
    assert set(heat[demo["prog_id"]]) <= starts
