"""Comms, file names and event names are bytes in perf.data, as to the kernel and perf: any
bytes are read and printed back as they came, never a refusal over their encoding."""

from __future__ import annotations

import os
import subprocess
import sys

from kit.perftext import FIXTURES, fixture_kallsyms

from bpfsym.formats import perf as K
from bpfsym.read.perfdata import PerfData

DATA = os.path.join(FIXTURES, "bpf.data")
ODD = b"\xffdd\xfe"  # not UTF-8


def with_odd_comm(tmp: str) -> tuple[str, bytes]:
    """bpf.data with the comm of its dd process (COMM records) made ODD, byte for byte."""
    blob = bytearray(open(DATA, "rb").read())
    n = 0
    with PerfData(DATA) as pd:
        for rtype, _misc, buf, start, _size, off in pd.records():
            if rtype == K.RECORD_COMM and bytes(buf[start + 16 : start + 19]) == b"dd\0":
                blob[off + 16 : off + 16 + len(ODD) + 1] = ODD + b"\0"  # fits: records are u64s
                n += 1
    assert n
    path = os.path.join(tmp, "odd.data")
    with open(path, "wb") as f:
        f.write(blob)
    return path, bytes(blob)


def comm_rows(out: bytes) -> dict[bytes, bytes]:
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].endswith(b"%"):
            rows[parts[1]] = parts[0]
    return rows


def test_a_comm_that_is_not_utf8_is_printed_as_perf_prints_it(tmp_path: object) -> None:
    path, _ = with_odd_comm(str(tmp_path))
    ours = subprocess.run(
        [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--no-side",
         "--kallsyms", fixture_kallsyms(), "--sort", "comm"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    perf = subprocess.run(
        ["perf", "report", "-i", path, "--stdio", "--sort", "comm", "--no-children"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    got, want = comm_rows(ours), comm_rows(perf)
    assert ODD in want and got[ODD] == want[ODD]
    json_out = subprocess.run(
        [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--no-side", "--json"],
        capture_output=True,
    )  # fmt: skip
    assert json_out.returncode == 0, json_out.stderr
