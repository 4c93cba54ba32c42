"""Which kernel symbols name a perf.data's kernel samples when it comes without a side file:
the host's kallsyms only when the host runs the recorded kernel (same build id), moved by
the recorded ref-reloc symbol (KASLR), as perf does; else none, and the header says why.

The "host" here is a kallsyms file and an ELF notes file made from the fixtures' own
recorded kallsyms, so the test reads no /proc or /sys file of the machine it runs on.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess

import pytest
from kit.perftext import FIXTURES, fixture_kallsyms

from bpfsym.live.host import HostKallsyms, kernel_build_id
from bpfsym.read.perfdata import PerfData
from bpfsym.report.analysis import analyze
from bpfsym.report.render import render_stdio

DATA = os.path.join(FIXTURES, "bpf.data")
SHIFT = 0x2E00000  # a KASLR slide: what a reboot moves the kernel by


def recorded_build_id() -> str:
    with PerfData(DATA) as pd:
        return next(b.build_id for b in pd.header.build_ids if b.filename == "[kernel.kallsyms]")


def notes_file(path: str, build_id: str) -> str:
    """/sys/kernel/notes as the kernel gives it: a Xen-style note first, then GNU's."""
    desc = bytes.fromhex(build_id)
    other = struct.pack("=III", 4, 4, 6) + b"Xen\0" + b"\1\0\0\0"
    gnu = struct.pack("=III", 4, len(desc), 3) + b"GNU\0" + desc + bytes(-len(desc) % 4)
    with open(path, "wb") as f:
        f.write(other + gnu)
    return path


def shifted_kallsyms(path: str, shift: int) -> str:
    with open(fixture_kallsyms()) as f, open(path, "w") as out:
        for line in f:
            addr, rest = line.split(" ", 1)
            out.write(f"{int(addr, 16) + shift:016x} {rest}")
    return path


def kernel_rows(text: str) -> dict[str, float]:
    """[k] rows that are not BPF functions: {symbol: percent}."""
    out: dict[str, float] = {}
    for pct, name in re.findall(r"^\s+([\d.]+)%\s+\[k\] (\S+)\s*$", text, re.M):
        if not name.startswith("bpf_prog_"):
            out[name] = out.get(name, 0.0) + float(pct)
    return out


def ours(host: HostKallsyms) -> str:
    an = analyze(DATA, None, ["sym"], host=host)
    return render_stdio(an, None, 0.0)


def perfs() -> dict[str, float]:
    r = subprocess.run(
        ["perf", "report", "-i", DATA, f"--kallsyms={fixture_kallsyms()}", "--stdio",
         "--no-children", "-g", "none", "--sort", "sym"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return kernel_rows(r.stdout)


def test_notes_give_the_gnu_build_id(tmp_path: object) -> None:
    bid = "24a3598fd700114d0a1b1a4871badcee75d0acac"
    assert kernel_build_id(notes_file(os.path.join(str(tmp_path), "n"), bid)) == bid
    assert kernel_build_id(os.path.join(str(tmp_path), "absent")) == ""


@pytest.mark.parametrize("shift", [0, SHIFT, -SHIFT])
def test_same_build_id_names_kernel_samples_as_perf_does(tmp_path: object, shift: int) -> None:
    d = str(tmp_path)
    ks = shifted_kallsyms(os.path.join(d, "kallsyms"), shift)
    host = HostKallsyms(ks, notes_file(os.path.join(d, "notes"), recorded_build_id()))
    text = ours(host)
    want = perfs()
    got = kernel_rows(text)
    assert len(want) > 10
    assert got.keys() == want.keys()
    for name, pct in want.items():
        assert abs(got[name] - pct) < 0.011, name
    assert "kernel symbols: host /proc/kallsyms (build id" in text
    assert ("relocated by" in text) == (shift != 0)


def test_another_build_id_leaves_kernel_samples_unnamed(tmp_path: object) -> None:
    d = str(tmp_path)
    ks = shifted_kallsyms(os.path.join(d, "kallsyms"), 0)  # the very same symbols
    other = "00" * 20
    host = HostKallsyms(ks, notes_file(os.path.join(d, "notes"), other))
    text = ours(host)
    rows = kernel_rows(text)
    assert rows and all(re.fullmatch(r"0x[0-9a-f]+", name) for name in rows)  # addresses only
    assert re.search(r"# no kallsyms: recorded on kernel build id [0-9a-f]{16}, this host", text)
