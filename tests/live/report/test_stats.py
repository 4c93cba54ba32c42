"""bpfsym report shows `record --stats` runtime per program, checked against the side file
and the loader's own run count (root, perf, bpf/loader)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LOADER = os.path.join(ROOT, "bpf", "loader")
DEMO = os.path.join(ROOT, "bpf", "demo.bpf.o")


def test_prog_rows_carry_runs_ns_per_run_and_cpu(tmp_path: object) -> None:
    subprocess.run(["make", "-C", os.path.join(ROOT, "bpf"), "loader"], check=True,
                   capture_output=True)  # fmt: skip
    data = os.path.join(str(tmp_path), "st.data")
    # long enough (about a second) for several samples 0.2 s apart while the program lives
    r = subprocess.run(
        [sys.executable, "-m", "bpfsym", "record", "--stats=0.2", "-e", "cpu-clock", "-a",
         "-o", data, "--", LOADER, "run", DEMO, "xdp_demo", "--repeat", "200000"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    loader = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("{")))
    assert loader["runs"] == 200000
    rep = subprocess.run(
        [sys.executable, "-m", "bpfsym", "report", "-i", data, "--sort", "prog", "--json"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    doc = json.loads(rep.stdout)
    assert abs(doc["stats_every_s"] - 0.2) <= 0.02  # sampling itself takes a little
    rows = [x for x in doc["events"][0]["rows"] if x["prog"].endswith("_xdp_demo")]
    assert len(rows) == 1
    row = rows[0]
    # the side file's samples of this program, read with the store reader
    from bpfsym.read.sidefile import read_capture

    cap = read_capture(data + ".bpfsym")
    ids = {p.id for p in cap.programs if p.functions and p.functions[0].name == row["prog"]}
    assert ids == {loader["prog_id"]}
    mine = sorted((x for x in cap.stats if x.prog_id in ids), key=lambda x: x.time)
    assert len(mine) >= 2
    runs = mine[-1].run_cnt - mine[0].run_cnt
    ns = mine[-1].run_time_ns - mine[0].run_time_ns
    assert row["runs"] == runs
    assert 0 < runs <= loader["runs"]
    assert abs(row["ns_per_run"] - ns / runs) <= 0.05
    assert abs(row["cpu_percent"] - 100.0 * ns / (mine[-1].time - mine[0].time)) < 1e-3
    # BPF_PROG_TEST_RUN counts its repeats in run_cnt and run_time_ns alike: the
    # per-run cost seen by stats is within the loader's own average and the test run's
    # overhead, so it is positive and not above the loader's wall-clock average by much
    assert 0 < row["ns_per_run"] < 50 * loader["run_time_ns_sum"] / loader["runs"]
    assert 0 < row["cpu_percent"] <= 100.0
    text = subprocess.run(
        [sys.executable, "-m", "bpfsym", "report", "-i", data, "--sort", "prog"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    every = f"{doc['stats_every_s']:g}"
    assert f"# BPF runtime stats (record --stats) sampled every {every} s:" in text
    line = next(x for x in text.splitlines() if x.rstrip().endswith(row["prog"]))
    assert f" {runs} " in line
