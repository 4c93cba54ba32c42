"""perf's own readings (perf script chains, children totals) of tests/fixtures/dwarf."""

from __future__ import annotations

import collections
import re
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent


FIX = HERE.parent / "fixtures" / "dwarf"


def perf_script_chains(text: str) -> dict[tuple[int, int], list[tuple[int, str]]]:
    """`perf script -F tid,time,ip,sym --ns` text -> {(tid, time ns): [(ip, sym), ...]},
    leaf first; user addresses are relative to their DSO, as perf prints them."""
    out: dict[tuple[int, int], list[tuple[int, str]]] = {}
    cur: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = re.match(r"\s*(\d+)\s+(\d+)\.(\d{9}):\s*$", line)
        if m:
            cur = out.setdefault((int(m.group(1)), int(m.group(2)) * 10**9 + int(m.group(3))), [])
            continue
        m = re.match(r"\t\s*([0-9a-f]+) (.*)$", line)
        if m:
            cur.append((int(m.group(1), 16), m.group(2)))
    return out


def perf_children(text: str) -> dict[str, tuple[float, float]]:
    """`perf report --children --sort sym -g none` text -> {symbol: (children %, self %)}."""
    out = {}
    for m in re.finditer(r"^\s+([\d.]+)%\s+([\d.]+)%\s+\[.\] (\S+)\s*$", text, re.M):
        out[m.group(3)] = (float(m.group(1)), float(m.group(2)))
    return out


def script_stacks(text: str, frame: Callable[[str], str]) -> collections.Counter:
    """`perf script -F comm,ip,sym` text -> how many samples had each chain, root first,
    each frame named by frame()."""
    out: collections.Counter = collections.Counter()
    cur: list[str] | None = None
    for line in [*text.splitlines(), ""]:
        m = re.match(r"\t\s*[0-9a-f]+ (.*)$", line)
        if m and cur is not None:
            cur.append(frame(m.group(1).strip()))
        elif cur is not None and not line.strip():
            out[tuple(reversed(cur))] += 1
            cur = None
        elif line.strip():
            cur = []
    return out
