"""Mutants of the corpus files: bit flips, extreme u64 sizes and offsets in headers and
records, truncation. `bpfsym report` gives exit 0, or one line and exit 2, within bounded
time and memory, whatever the bytes (issue 10: a file perf cannot read must not give a
traceback or hang)."""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st
from kit.perfcompat import corpus_files

FILES = [f for f in corpus_files() if os.path.getsize(f) <= 2 << 20]
SECONDS = 60  # per reading: corpus files read in well under 2 s
MEMORY = 2 << 30  # address space of the reading process
EXTREMES = [0, 1, 7, 8, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 40, (1 << 63) - 1, (1 << 64) - 1]


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run_report(blob: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    with tempfile.TemporaryDirectory(prefix="bpfsym-mutant-") as d:
        path = os.path.join(d, "m.data")
        with open(path, "wb") as f:
            f.write(blob)
        return subprocess.run(
            [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--no-side",
             "--symfs", d, *args],
            capture_output=True, timeout=SECONDS, preexec_fn=_limit,
        )  # fmt: skip


def assert_sane(r: subprocess.CompletedProcess[bytes]) -> None:
    err = r.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    assert r.returncode in (0, 2), (r.returncode, err[-500:])
    if r.returncode == 2:
        assert len(err.strip().splitlines()) == 1, err


@st.composite
def mutants(draw: st.DrawFn) -> bytes:
    path = draw(st.sampled_from(FILES))
    blob = bytearray(open(path, "rb").read())
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "u64", "u16", "cut"]))
        if kind == "cut":
            blob = blob[: draw(st.integers(0, len(blob)))]
            continue
        if len(blob) < 16:
            continue
        # mostly where the structure is: the header, the attrs, the first records
        hot = min(len(blob) - 8, 4096)
        at = draw(st.one_of(st.integers(0, hot), st.integers(0, len(blob) - 8)))
        if kind == "flip":
            blob[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "u64":
            blob[at : at + 8] = struct.pack("<Q", draw(st.sampled_from(EXTREMES)))
        else:
            blob[at : at + 2] = struct.pack("<H", draw(st.sampled_from([0, 8, 0xFFF8, 0xFFFF])))
    return bytes(blob)


@settings(max_examples=200)
@given(mutants(), st.sampled_from([(), ("-g",), ("--sort", "dso,sym"), ("--json",)]))
def test_mutated_corpus_files_give_a_report_or_one_line(blob: bytes, args: tuple) -> None:
    assert_sane(run_report(blob, *args))
