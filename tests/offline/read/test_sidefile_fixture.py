"""A `bpfsym record` capture read on any machine: tests/fixtures/sidefile (record.py made
it on a real kernel; what stock perf said of it then is stored beside it).

The side file carries the boot's kallsyms and every program's image, BTF and line info,
so kernel and BPF names, source lines and annotation need nothing of the host: CI runs
this with /proc/kallsyms unreadable. User-space names depend on the host's ELF files and
are not compared.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from kit.perftext import sections

from bpfsym.read.sidefile import read_capture

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "sidefile")
DATA = os.path.join(FIX, "side.data")


def bpfsym(*args: str) -> str:
    r = subprocess.run([sys.executable, "-P", "-m", "bpfsym", *args], capture_output=True,
                       text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def kernel_rows(text: str) -> dict[str, float]:
    rows = sections(text)
    assert len(rows) == 1
    return {k: v for k, v in next(iter(rows.values())).items() if k.startswith("[k] ")}


def test_kernel_and_bpf_names_are_what_perf_said_with_the_captured_kallsyms() -> None:
    ours = bpfsym("report", "-i", DATA, "--sort", "sym")
    assert "# side file: " in ours and "# kernel symbols: side-file kallsyms" in ours
    with open(os.path.join(FIX, "side.perf-sym.txt")) as f:
        perf = kernel_rows(f.read())
    got = kernel_rows(ours)
    big = {k: v for k, v in perf.items() if v >= 0.5}
    assert len(big) >= 5 and any("_burn_mix" in k for k in big)
    for name, pct in big.items():
        assert abs(got.get(name, 0.0) - pct) <= 0.05, name
    # every BPF function is named as /proc/kallsyms had it while loaded
    with open(os.path.join(FIX, "side.kallsyms-bpf.txt")) as f:
        kallsyms = {line.split()[2] for line in f}
    bpf = {k[4:] for k in got if re.match(r"\[k\] bpf_prog_[0-9a-f]{16}_", k)}
    assert bpf and bpf <= kallsyms


def test_a_program_unloaded_during_the_capture_keeps_its_image_and_lines() -> None:
    cap = read_capture(DATA + ".bpfsym")
    burn = [p for p in cap.programs if p.name == "xdp_burn"]
    assert len(burn) == 1 and burn[0].unload_time is not None and burn[0].has_image
    doc = json.loads(bpfsym("report", "-i", DATA, "--json", "--bpf-only", "--sort", "func,srcline"))
    lines = {r["srcline"] for r in doc["events"][0]["rows"] if r["func"].endswith("_burn_mix")}
    assert lines and all(x.startswith("xdp_burn.c:") for x in lines)


def test_annotate_shows_the_unloaded_programs_code_and_source() -> None:
    out = bpfsym("annotate", "-i", DATA, "--stdio", "bpf_prog_0ce981360ec78929_burn_mix")
    assert "acc = acc * 17 + (i ^ acc);" in out  # the source line, from BTF
    # JIT code with heat: the hottest instruction is the loop's multiply, in its source line
    hot = re.search(
        r"^\s+(\d+\.\d+)%\s+\d+\s+bpf_prog_\w+_burn_mix\+0x[0-9a-f]+\s+(\w+)", out, re.M
    )
    assert hot and float(hot.group(1)) > 10 and hot.group(2) == "imul"
