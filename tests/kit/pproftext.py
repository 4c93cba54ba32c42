"""Reading pprof profiles in tests: google/pprof's own CLI output, and the protobuf runtime.

The CLI is built from Debian's packages by scripts/setup-pprof (CI runs it in setup).
"""

from __future__ import annotations

import collections
import gzip
import os
import re
import shutil
import subprocess
from typing import Any

from bpfsym.report import profile_pb2

PPROF = shutil.which("pprof") or "/usr/local/bin/pprof"
BPF_FUNC = re.compile(r"bpf_prog_[0-9a-f]{16}(?:_|$)")  # a JIT-ed BPF function's kallsyms name
TOP_ROW = re.compile(
    r"^\s*(\S+)\s+([\d.]+)%\s+([\d.]+)%\s+(\S+)\s+([\d.]+)%\s+(\S+)(?:\s+(\S+))?\s*$"
)
MAPPING = re.compile(
    r"^\s*\d+: (0x[0-9a-f]+)/(0x[0-9a-f]+)/0x[0-9a-f]+ (\S+)(?: ([0-9a-f]+))?(?: ((?:\[\w+\])+))?$"
)


def pprof(*args: str) -> str:
    """stdout of the pprof CLI, which must succeed."""
    assert os.access(PPROF, os.X_OK), f"no pprof CLI at {PPROF}: run bash scripts/setup-pprof"
    r = subprocess.run([PPROF, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def top(path: str, *opts: str) -> dict[str, tuple[float, float]]:
    """`pprof -top` with nothing dropped: {entry: (flat %, cum %)}; with -lines the entry
    is "function file:line" (the file's base name)."""
    out = pprof("-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0", *opts, path)
    rows: dict[str, tuple[float, float]] = {}
    started = False
    for line in out.splitlines():
        if line.split()[:2] == ["flat", "flat%"]:
            started = True
            continue
        m = TOP_ROW.match(line) if started else None
        if m:
            name = m.group(6)
            if m.group(7):
                name += " " + os.path.basename(m.group(7))
            rows[name] = (float(m.group(2)), float(m.group(5)))
    assert started, out
    return rows


def raw_mappings(path: str) -> list[dict[str, Any]]:
    """The Mappings section of `pprof -raw`: start, limit, file, build id, flags."""
    out = pprof("-raw", path)
    lines = out.split("\nMappings\n", 1)[1].splitlines()
    got = []
    for line in lines:
        m = MAPPING.match(line)
        if m is None:
            break
        got.append(
            {
                "start": int(m.group(1), 16),
                "limit": int(m.group(2), 16),
                "file": m.group(3),
                "build_id": m.group(4) or "",
                "flags": m.group(5) or "",
            }
        )
    return got


def traces(path: str, *opts: str) -> list[tuple[str, list[str]]]:
    """`pprof -traces` (function granularity): (value, frames leaf first) per sample."""
    out = pprof("-traces", *opts, path)
    got: list[tuple[str, list[str]]] = []
    for block in out.split("-----------+-")[1:]:
        value = ""
        frames: list[str] = []
        for line in block.splitlines():
            parts = line.split()
            if not parts or parts[0].endswith(":") or set(parts[0]) == {"-"}:
                continue  # a label line ("      comm:  bpftool") or the rule's tail
            if len(parts) == 2:  # the value, then the leaf
                value, frames = parts[0], [parts[1]]
            elif value:
                frames.append(parts[0])
        if value:
            got.append((value, frames))
    return got


def bpf_prefix(frames: list[str]) -> tuple[str, ...]:
    """The BPF frames a call chain starts with, by names without their tags."""
    out = []
    for f in frames:
        if not BPF_FUNC.match(f):
            break
        out.append(f.split("_", 3)[3] if f.count("_") >= 3 else "")
    return tuple(out)


def bpf_chains(path: str) -> collections.Counter:
    """Samples per BPF chain start (bpf_prefix) of `pprof -traces`, BPF leaves only."""
    got: collections.Counter = collections.Counter()
    for value, frames in traces(path, "-sample_index=samples"):
        if BPF_FUNC.match(frames[0]):
            got[bpf_prefix(frames)] += int(value)
    return got


def perf_script_bpf_chains(data: str) -> collections.Counter:
    """The same from `perf script`, perf's own reading of the call chains (perf names
    some main functions after prog_tags[0]: the tags are left out)."""
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "ip,sym"], capture_output=True, text=True, check=True
    ).stdout
    got: collections.Counter = collections.Counter()
    for block in out.split("\n\n"):
        frames = [ln.split()[1] for ln in block.strip().splitlines() if len(ln.split()) >= 2]
        if frames and BPF_FUNC.match(frames[0]):
            got[bpf_prefix(frames)] += 1
    return got


def tags(path: str, *opts: str) -> dict[str, dict[str, float]]:
    """`pprof -tags`: {label: {value: percent}}."""
    out = pprof("-tags", *opts, path)
    got: dict[str, dict[str, float]] = {}
    cur: dict[str, float] = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\S+): Total", line)
        if m:
            cur = got.setdefault(m.group(1), {})
            continue
        m = re.match(r"^\s*\S+ \(\s*([\d.]+)%\): (.*)$", line)
        if m:
            cur[m.group(2)] = float(m.group(1))
    return got


def read_profile(path: str) -> Any:
    """The profile as the protobuf runtime parses it."""
    with gzip.open(path, "rb") as f:
        prof = profile_pb2.Profile()
        prof.ParseFromString(f.read())
    return prof


def leaf_values(prof: Any, index: int) -> dict[str, int]:
    """Sum of value[index] per leaf function name (the flat view), from the parsed profile."""
    st = prof.string_table
    funcs = {f.id: st[f.name] for f in prof.function}
    locs = {loc.id: funcs[loc.line[0].function_id] for loc in prof.location}
    out: dict[str, int] = {}
    for s in prof.sample:
        name = locs[s.location_id[0]]
        out[name] = out.get(name, 0) + s.value[index]
    return out
