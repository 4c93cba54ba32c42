"""tests/fixtures/dwarf's programs built and recorded with --call-graph dwarf (the live
tests), and perf's own readings of them (perf script chains, children totals)."""

from __future__ import annotations

import collections
import lzma
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from bpfsym.formats import perf as K
from bpfsym.read.perfdata import PerfData

HERE = Path(__file__).resolve().parent


FIX = HERE.parent / "fixtures" / "dwarf"
# the binaries the offline fixtures' chains run through, by the base name perf recorded
BINARIES = {
    "dwarfdemo": "dwarfdemo",
    "dwarfdemo_df": "dwarfdemo_df",
    "libc.so.6": "libc.so.6.cfi.xz",
    "ld-linux-x86-64.so.2": "ld-linux-x86-64.so.2.cfi.xz",
}


def fixture_file(base: str, dest: Path) -> Path:
    """The fixture's copy of the binary perf recorded as .../base, written to dest."""
    src = FIX / BINARIES[base]
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.suffix == ".xz":
        with lzma.open(src) as f:
            dest.write_bytes(f.read())
    else:
        shutil.copyfile(src, dest)
    return dest


def recorded_files(data: Path) -> list[str]:
    """The file names of a perf.data's MMAP2 records."""
    with PerfData(str(data)) as pd:
        return sorted(
            {
                pd.L.mmap2.parse(bytes(buf[start + 8 : start + size])).filename
                for rtype, _m, buf, start, size, _o in pd.records()
                if rtype == K.RECORD_MMAP2
            }
        )


def symfs_root(tmp: Path, data: Path, skip: tuple[str, ...] = ()) -> Path:
    """A --symfs root (tmp/root) holding the fixture's binaries at the paths data recorded,
    but those in skip."""
    root = tmp / "root"
    root.mkdir(parents=True, exist_ok=True)
    for f in recorded_files(data):
        base = os.path.basename(f)
        if base in BINARIES and base not in skip:
            fixture_file(base, root / f.lstrip("/"))
    return root


def build(out: Path, *targets: str) -> None:
    """make the fixture's targets (dwarfdemo: "all"; "tp_attach") into out."""
    subprocess.run(["make", "-s", "-C", str(FIX), f"OUTPUT={out}", *targets], check=True)


def record(data: Path, *cmd: str) -> None:
    """perf record -e cpu-clock -F 999 --call-graph dwarf of cmd into data."""
    subprocess.run(
        ["perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf",
         "-o", str(data), "--", *cmd],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def record_cpu(tmp: Path) -> tuple[Path, Path]:
    """dwarfdemo built in tmp and recorded burning CPU: (the program, its perf.data)."""
    build(tmp, "all")
    prog = (tmp / "dwarfdemo").resolve()
    data = tmp / "perf.data"
    record(data, str(prog), "cpu", "2500")
    return prog, data


def record_under_sysenter(tmp: Path) -> tuple[Path, Path]:
    """dwarfdemo making system calls while tp_attach holds the raw_tp/sys_enter program
    sysenter_burn attached: (the program, its perf.data)."""
    build(tmp, "all", "tp_attach")
    prog = (tmp / "dwarfdemo").resolve()
    data = tmp / "perf.data"
    att = subprocess.Popen(
        [str(tmp / "tp_attach"), str(tmp / "sysenter_burn.bpf.o")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert att.stdout is not None and att.stdout.readline().strip() == "ready"
        record(data, str(prog), "syscall", "25")
    finally:
        assert att.stdin is not None
        att.stdin.close()
        att.wait(60)
    return prog, data


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
