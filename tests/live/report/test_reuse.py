"""Address reuse: program A runs and is unloaded, program B is then loaded at the same
JIT address and runs. Every sample must go to the program that really ran then.

The truth comes from outside bpfsym: BPF_PROG_TEST_RUN runs a program in the
caller's context, so samples in A carry the comm of the process that ran A
("run_a"), samples in B that of the one that ran B ("run_b")."""

from __future__ import annotations

import json
import os

from kit.livekit import DEMO, REPO, bpfsym_run, ensure_loader

from bpfsym.read.sidefile import read_capture
from bpfsym.report.analysis import analyze
from bpfsym.report.render import render_stdio

B_OBJ = REPO / "tests/fixtures/reuse/reuse_b.bpf.o"


def _record(tmp_path, attempt):
    loader = ensure_loader()
    for name in ("run_a", "run_b"):
        link = tmp_path / name
        if not link.exists():
            os.symlink(loader, link)
    out = tmp_path / f"reuse{attempt}.data"
    script = (
        f"{tmp_path}/run_a run {DEMO} xdp_demo --seconds 1 >/dev/null && sleep 0.5 && "
        f"{tmp_path}/run_b run {B_OBJ} xdp_reuse_b --seconds 1 >/dev/null"
    )
    r = bpfsym_run(
        "record", "-e", "cpu-clock", "-F", "2000", "-a", "-o", str(out), "--", "sh", "-c", script
    )
    assert r.returncode == 0, r.stderr
    cap = read_capture(str(out) + ".bpfsym")
    a = next(p for p in cap.programs if p.name == "xdp_demo" and p.origin != "snapshot")
    b = next(p for p in cap.programs if p.name == "xdp_reuse_b")
    return out, a, b


def _overlap(f, g):
    return f.addr < g.addr + g.size and g.addr < f.addr + f.size


def test_recycled_address_is_attributed_by_time(tmp_path):
    # the JIT puts each image at a random offset inside its bpf_prog_pack slot, so B
    # reuses A's addresses without starting at the same byte: require the ranges to overlap
    for attempt in range(5):
        out, a, b = _record(tmp_path, attempt)
        if _overlap(a.functions[0], b.functions[0]):
            break
    else:
        raise AssertionError("the kernel never reused A's addresses for B in 5 tries")
    assert a.unload_time is not None and a.unload_time <= b.load_time
    r = bpfsym_run("report", "-i", str(out), "--sort", "comm,prog", "--bpf-only", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["events"][0]["rows"]
    got = {(row["comm"], row["prog"]): row["samples"] for row in rows}
    a_name, b_name = a.functions[0].name, b.functions[0].name
    assert a_name != b_name
    assert got.get(("run_a", a_name), 0) > 50 and got.get(("run_b", b_name), 0) > 50
    # nothing crossed over: no A samples named B, no B samples named A
    assert ("run_a", b_name) not in got and ("run_b", a_name) not in got
    # the bulk pass (numpy, in one process and in two) names them as the record-by-record
    # one does: each sample at a reused address by the program alive at its time
    side = str(out) + ".bpfsym"
    keys = ["comm", "prog", "sym"]
    ordered = render_stdio(analyze(str(out), side, keys, False, True, accelerate=False), None, 0.0)
    for parallel in (False, True):
        an = analyze(str(out), side, keys, False, True, accelerate=True, parallel=parallel)
        assert an.accelerated
        assert render_stdio(an, None, 0.0) == ordered
