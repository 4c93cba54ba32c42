"""bpfsym diff across a rebuild: the demo recorded, rebuilt with changed constants, recorded
again, with a program only the second recording runs.

The rebuilt xdp_demo has another tag (the loader's bpf_prog_info says so), so does
hash_mix, whose multiplier's line reads differently; the names stay. The diff must pair
the programs and functions by name, mark the changed line and the extra program as only
in one capture, and give deltas equal to the difference of the two flat reports.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kit.livekit import BPF, BPFSYM, DEMO, ENV, REPO, ensure_loader

OLD_LINE = "h *= 16777619u;"
NEW_LINE = "h *= 16777613u;"
SPIN = REPO / "tests" / "fixtures" / "perfdata" / "xdp_spin.bpf.o"


def run_bpfsym(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BPFSYM, *args], env=ENV, capture_output=True, text=True, timeout=300)


def diff(*args: str) -> subprocess.CompletedProcess[str]:
    """`bpfsym diff ARGS`."""
    return run_bpfsym("diff", *args)


def rebuilt(tmp: Path) -> Path:
    """demo.bpf.o built by bpf/Makefile from demo.bpf.c with two constants changed."""
    src = (BPF / "demo.bpf.c").read_text()
    assert OLD_LINE in src and "#define VERDICT_ROUNDS 256" in src
    src = src.replace(OLD_LINE, NEW_LINE).replace(
        "#define VERDICT_ROUNDS 256", "#define VERDICT_ROUNDS 384"
    )
    d = tmp / "rebuilt"
    d.mkdir()
    (d / "demo.bpf.c").write_text(src)  # same file name: the same BTF file name
    shutil.copy(BPF / "Makefile", d / "Makefile")
    subprocess.run(["make", "-s", "-C", str(d), "demo.bpf.o"], check=True)
    return d / "demo.bpf.o"


def record(out: Path, script: str) -> list[dict]:
    r = run_bpfsym(
        "record", "-e", "cpu-clock", "-F", "4999", "-a", "-g", "-o", str(out), "--",
        "sh", "-c", script,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> tuple[Path, Path, dict, dict, dict]:
    tmp = tmp_path_factory.mktemp("diff_live")
    loader = ensure_loader()
    new_obj = rebuilt(tmp)
    base, new = tmp / "base.data", tmp / "new.data"
    (b,) = record(base, f"{loader} run {DEMO} xdp_demo --seconds 2")
    n, spin = record(
        new,
        f"{loader} run {new_obj} xdp_demo --seconds 2; {loader} run {SPIN} xdp_spin --seconds 1",
    )
    assert b["name"] == n["name"] == "xdp_demo" and spin["name"] == "xdp_spin"
    assert b["tag"] != n["tag"]  # rebuilt: another program tag
    return base, new, b, n, spin


def report_shares(data: Path, keys: str) -> dict[tuple, float]:
    r = run_bpfsym("report", "-i", str(data), "--json", "--sort", keys, "--bpf-only")
    assert r.returncode == 0, r.stderr
    out: dict[tuple, float] = {}
    for row in json.loads(r.stdout)["events"][0]["rows"]:
        if row["prog"].count("_") < 3 or row["func"].count("_") < 3:
            continue  # an unnamed program of the machine's (-a): bpf_prog_<tag>
        prog = row["prog"].split("_", 3)[3]
        func = row["func"].split("_", 3)[3]
        k = (prog, func, row.get("source")) if "srcline" in keys else (prog, func)  # none: ??:0
        out[k] = out.get(k, 0.0) + row["overhead"]
    return out


def test_rebuilt_program_matched_by_names(captures):
    base, new, b, n, spin = captures
    r = diff(str(base), str(new), "--sort", "prog,func", "--bpf-only", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    progs = {p["name"]: p for p in doc["programs"]}
    demo = progs["xdp_demo"]
    assert demo["status"] == "matched"
    assert demo["base"]["tag"] == b["tag"] and b["prog_id"] in demo["base"]["ids"]
    assert demo["new"]["tag"] == n["tag"] and n["prog_id"] in demo["new"]["ids"]
    assert progs["xdp_spin"]["status"] == "only in new"
    assert spin["prog_id"] in progs["xdp_spin"]["new"]["ids"]
    rows = doc["events"][0]["rows"]
    by = {(x["prog"], x["func"]): x for x in rows}
    for f in ("xdp_demo", "parse_ipv4", "hash_mix", "count_bytes"):
        x = by[("xdp_demo", f)]
        assert x["status"] == "both" and x["base"] and x["new"], x
    assert by[("xdp_spin", "spin_mix")]["status"] == "only in new"
    # deltas: the difference of the two flat reports, names without tags
    old, cur = report_shares(base, "prog,func"), report_shares(new, "prog,func")
    for (prog, func), x in by.items():
        if prog in ("xdp_demo", "xdp_spin"):
            want = cur.get((prog, func), 0.0) - old.get((prog, func), 0.0)
            assert x["delta"] == pytest.approx(want, abs=0.01), (prog, func)
    # perf-like text: the rows, and the unmatched ones marked
    text = diff(str(base), str(new), "--sort", "prog,func", "--bpf-only").stdout
    assert "xdp_demo" in text and f"tag {b['tag']} -> {n['tag']}" in text
    assert any(
        ln.rstrip().endswith("[only in new]") and "spin_mix" in ln for ln in text.splitlines()
    )


def test_source_lines_matched_by_text(captures):
    base, new, _b, _n, _spin = captures
    r = diff(str(base), str(new), "--sort", "prog,func,srcline", "--bpf-only", "--json")
    assert r.returncode == 0, r.stderr
    rows = [x for x in json.loads(r.stdout)["events"][0]["rows"] if x["prog"] == "xdp_demo"]
    # a sample on an instruction without line info (a prologue, ??:0) has no source text
    changed = [x for x in rows if x.get("source") in (OLD_LINE, NEW_LINE)]
    assert {x["source"]: x["status"] for x in changed} == {
        OLD_LINE: "only in base",
        NEW_LINE: "only in new",
    }
    both = [x for x in rows if x["status"] == "both"]
    assert len(both) >= 8  # the unchanged lines of all four functions, paired
    old, cur = report_shares(base, "prog,func,srcline"), report_shares(new, "prog,func,srcline")
    got: dict[tuple, list[float]] = {}
    for x in rows:  # a text that is on several lines of a function: added up, as below
        g = got.setdefault(("xdp_demo", x["func"], x.get("source")), [0.0, 0.0])
        g[0] += x["base"] or 0.0
        g[1] += x["delta"]
    assert set(got) == {k for k in set(old) | set(cur) if k[0] == "xdp_demo"}
    for k, (b, d) in got.items():
        assert b == pytest.approx(old.get(k, 0.0), abs=0.01), k
        assert d == pytest.approx(cur.get(k, 0.0) - old.get(k, 0.0), abs=0.01), k
