"""`bpfsym report` on `perf record --call-graph dwarf` files: user stacks unwound, against
perf's own reading made now, with the same binaries (tests/fixtures/dwarf, recorded by its
record.py: dwarfdemo built -O2 -fomit-frame-pointer, the C library and loader it mapped
as CFI-and-symbols copies) laid out under a private --symfs root for both tools, and
perf's build-id cache and HOME pointed at empty directories.

Compared: the children totals of dwarfdemo's functions (within 0.5 points), every
sample's caller chain (bpfsym --folded against perf script, frame by frame), the same
through --json and --pprof, and what the header says of stacks that could not be unwound
(a binary missing, a truncated stack copy, the corpus files without their binaries).
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kit import perfcompat as P
from kit import pproftext
from kit.unwindkit import FIX, script_stacks, symfs_root

from bpfsym.formats import perf as K
from bpfsym.read.perfdata import PerfData
from bpfsym.report.analysis import analyze_query
from bpfsym.report.query import ReportQuery

# dwarfdemo.c's functions, and crt1.o's _start (in dwarfdemo too)
OURS = {"hot_leaf", "syscall_leaf", "stage_three", "side_path", "stage_two", "stage_one",
        "run_outer", "main", "signal_work", "on_signal", "_start"}  # fmt: skip
FIXTURES = ("cpu", "signal", "bpf")
LIMIT = 0.5  # percentage points


# ---- the binaries under a --symfs root ----------------------------------------------------


# ---- running both -----------------------------------------------------------------------


def perf(*args: str) -> bytes:
    r = subprocess.run(
        ["perf", *args], capture_output=True, env=P.perf_env(), timeout=300, check=False
    )
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def bpfsym(*args: str) -> bytes:
    r = subprocess.run(
        [sys.executable, "-P", "-m", "bpfsym", "report", "--no-side", *args],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def children_table(text: bytes) -> dict[str, tuple[float, float]]:
    """A `--children --sort sym` table -> {symbol: (children %, self %)}."""
    (sec,) = P.parse_report(text)
    out = {}
    for r in sec.rows:
        name = r.key[0].split("] ", 1)[1].strip()
        out[name] = (r.percents["Children"], r.percents["Self"])
    return out


def perf_children(data: Path, root: Path) -> dict[str, tuple[float, float]]:
    return children_table(
        perf(
            "report",
            "-i",
            str(data),
            "--stdio",
            "--children",
            "--sort",
            "sym",
            "-g",
            "none",
            "--no-inline",
            "--symfs",
            str(root),
        )  # fmt: skip
    )


def bpfsym_children(data: Path, root: Path, *more: str) -> dict[str, tuple[float, float]]:
    return children_table(
        bpfsym("-i", str(data), "--stdio", "-g", "--sort", "sym", "--symfs", str(root), *more)
    )


def frame(name: str) -> str:
    """A frame as both tools are compared: dwarfdemo's functions and BPF functions by
    name (without their tag: perf tags a program's main function with the program's first
    tag, bpfsym with the function's own, as /proc/kallsyms does: docs/design.md), the
    rest (kernel addresses neither names without kallsyms; the C library, whose symbols
    each tool finds in its own way) as '?'."""
    if name.startswith("bpf_prog_"):
        return re.sub(r"^bpf_prog_[0-9a-f]{16}", "bpf_prog", name)
    return name if name in OURS else "?"


def perf_stacks(data: Path, root: Path) -> collections.Counter:
    """perf script's chain of every sample, root first, as frame() names them."""
    text = perf("script", "-i", str(data), "-F", "comm,ip,sym", "--no-inline", "--symfs",
                str(root)).decode("utf-8", "surrogateescape")  # fmt: skip
    return script_stacks(text, frame)


def bpfsym_stacks(data: Path, root: Path, *more: str) -> collections.Counter:
    """bpfsym --folded's stacks (comm dropped), root first, as frame() names them."""
    out: collections.Counter = collections.Counter()
    text = bpfsym("-i", str(data), "--folded", "--symfs", str(root), *more).decode()
    for line in text.splitlines():
        stack, n = line.rsplit(" ", 1)
        out[tuple(frame(f) for f in stack.split(";")[1:])] += int(n)
    return out


def header(text: bytes) -> dict[str, int]:
    """The header's lines about user stacks: {reason: samples}, and 'of' the total."""
    got: dict[str, int] = {}
    lines = text.decode().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"# user stacks not unwound to their outermost frame: (\d+) of (\d+)", line)
        if m:
            got["stopped"], got["of"] = int(m.group(1)), int(m.group(2))
            for more in lines[i + 1 :]:
                r = re.match(r"#\s+(\d+)  (.*)$", more)
                if not r:
                    break
                got[r.group(2)] = int(r.group(1))
    return got


def compare_children(theirs: dict, ours: dict, names: set[str] | None = None) -> int:
    """Every perf row of >= 0.5 % (of names, when given) in ours within LIMIT; returns the
    rows compared."""
    n = 0
    for name, (children, self_) in theirs.items():
        if children < 0.5 or (names is not None and name not in names):
            continue
        assert name in ours, (name, sorted(ours))
        assert abs(ours[name][0] - children) <= LIMIT, (name, ours[name], children)
        assert abs(ours[name][1] - self_) <= LIMIT, (name, ours[name], self_)
        n += 1
    return n


# ---- the fixtures, all binaries there ----------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_children_totals_equal_perfs(tmp_path, name):
    data = FIX / f"{name}.data"
    root = symfs_root(tmp_path, data)
    theirs = perf_children(data, root)
    ours = bpfsym_children(data, root)
    assert compare_children(theirs, ours, OURS) >= 5
    # and perf's reading when the file was recorded, with the recording machine's files
    text = (FIX / f"{name}.perf-children.txt").read_bytes()
    assert P.parse_report(text)
    recorded = children_table(text)
    assert compare_children(recorded, ours, OURS) >= 5


@pytest.mark.parametrize("name", FIXTURES)
def test_caller_chains_equal_perfs(tmp_path, name):
    """Every sample's chain, frame by frame (kernel part, then the unwound user part)."""
    data = FIX / f"{name}.data"
    root = symfs_root(tmp_path, data)
    theirs = perf_stacks(data, root)
    ours = bpfsym_stacks(data, root)
    assert sum(theirs.values()) > 200
    assert ours == theirs
    deepest = max(len([f for f in s if f in OURS]) for s in ours)
    assert deepest >= 6  # _start, main, run_outer, stage_one, stage_two, ... leaf


def test_bpf_samples_show_the_user_path_into_the_syscall(tmp_path):
    """Samples in the BPF program (raw_tp/sys_enter under dwarfdemo's getppid calls):
    root first, the user path that made the system call, then the kernel chain to the
    program, as perf script shows them."""
    data = FIX / "bpf.data"
    root = symfs_root(tmp_path, data)
    text = bpfsym("-i", str(data), "--folded", "--symfs", str(root)).decode()
    n = 0
    for line in text.splitlines():
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")[1:]
        bpf = [i for i, f in enumerate(frames) if f.startswith("bpf_prog_")]
        if not bpf:
            continue
        n += int(count)
        ours = [f for f in frames[: bpf[0]] if f in OURS]
        assert ours == ["_start", "main", "run_outer", "stage_one", "stage_two", "stage_three",
                        "syscall_leaf"]  # fmt: skip
        user_end = frames.index("syscall_leaf") + 1
        assert "getppid" in frames[user_end]  # the C library's wrapper, then the kernel
        assert all(f.startswith("0xffff") for f in frames[user_end + 1 : bpf[0]])
    assert n > 100


def test_json_and_pprof_carry_the_unwound_stacks(tmp_path):
    data = FIX / "cpu.data"
    root = symfs_root(tmp_path, data)
    theirs = perf_children(data, root)
    doc = json.loads(bpfsym("-i", str(data), "--json", "-g", "--sort", "sym", "--symfs", str(root)))
    assert doc["user_stacks"] == {"samples": 312, "stopped": {}}
    rows = {r["sym"].split("] ", 1)[1]: r for r in doc["events"][0]["rows"]}
    for f in ("stage_one", "stage_two", "stage_three", "side_path", "run_outer", "main"):
        assert abs(rows[f]["children"] - theirs[f][0]) <= LIMIT, f
    prof = tmp_path / "cpu.pb.gz"
    bpfsym("-i", str(data), "-g", "--pprof", str(prof), "--symfs", str(root))
    top = pproftext.top(str(prof))
    for f in ("hot_leaf", "stage_one", "stage_two", "stage_three", "side_path", "main"):
        assert abs(top[f][1] - theirs[f][0]) <= LIMIT, (f, top[f], theirs[f])


def test_bulk_pass_leaves_dwarf_files_to_the_ordered_one(tmp_path):
    """With a call graph asked, numpy's pass does not take the file (it would not unwind);
    without one it may, and the flat rows are the same."""
    data = str(FIX / "cpu.data")
    root = str(symfs_root(tmp_path, FIX / "cpu.data"))
    q = ReportQuery(path=data, keys=("sym",), accelerate=True, parallel=False, symfs=root)
    flat = analyze_query(q)
    graph = analyze_query(ReportQuery(**{**q.__dict__, "callchains": True}))
    assert flat.accelerated and not graph.accelerated
    assert graph.unwind_samples == 312 and not graph.unwind_stops
    assert flat.unwind_samples == 0  # nothing unwound for a flat report
    rows = lambda an: {k: v for st in an.events.values() for k, v in st.rows.items()}  # noqa: E731
    assert {k[0].name: v for k, v in rows(flat).items()} == {
        k[0].name: v for k, v in rows(graph).items()
    }


# ---- stacks that cannot be unwound ------------------------------------------------------


def test_missing_binary_is_counted_and_the_leaf_kept(tmp_path):
    """Without the C library: chains stop at its first frame (perf's too), the samples say
    so in the header and in --json, and dwarfdemo's totals are still perf's."""
    data = FIX / "cpu.data"
    full = perf_stacks(data, symfs_root(tmp_path / "full", data))
    root = symfs_root(tmp_path / "nolibc", data, skip=("libc.so.6",))
    theirs = perf_children(data, root)
    ours = bpfsym_children(data, root)
    assert compare_children(theirs, ours, OURS) >= 5
    assert bpfsym_stacks(data, root) == perf_stacks(data, root)
    text = bpfsym("-i", str(data), "--stdio", "-g", "--symfs", str(root))
    h = header(text)
    # every sample whose full chain runs through the C library (below main) stopped there
    through_libc = sum(n for s, n in full.items() if s[:2] == ("_start", "?"))
    assert through_libc > 300
    assert h == {"stopped": through_libc, "of": 312, "binary missing (libc.so.6)": through_libc}
    doc = json.loads(bpfsym("-i", str(data), "--json", "-g", "--symfs", str(root)))
    assert doc["user_stacks"] == {"samples": 312, "stopped": {"binary missing (libc.so.6)": 312}}
    # without dwarfdemo itself: each sample keeps its leaf alone
    root = symfs_root(tmp_path / "noprog", data, skip=("dwarfdemo",))
    h = header(bpfsym("-i", str(data), "--stdio", "-g", "--symfs", str(root)))
    assert h["binary missing (dwarfdemo)"] >= 300
    stacks = bpfsym_stacks(data, root)
    assert all(len([f for f in s if f in OURS]) <= 1 for s in stacks)
    assert sum(stacks.values()) == 312
    # and the table is perf's: a stack stopped at its leaf adds no second, raw-address
    # node of that leaf (perf's unwinder gives no user entries when it fails)
    theirs, ours = perf_children(data, root), bpfsym_children(data, root)
    for table, other in ((theirs, ours), (ours, theirs)):
        for name, (children, self_) in table.items():
            if children >= 0.5:
                assert name in other, name
                assert other[name][0] == pytest.approx(children, abs=0.05), name
                assert other[name][1] == pytest.approx(self_, abs=0.05), name


def truncated_copy(src: Path, dest: Path, keep: int) -> int:
    """src with every sample's user stack copy cut to keep bytes (its dyn_size lowered, as
    the kernel does when the stack is shorter): returns the samples cut."""
    buf = bytearray(src.read_bytes())
    n = 0
    with PerfData(str(src)) as pd:
        ev = pd.attrs[0]
        # after STACK_USER, cpu.data's samples hold DATA_SRC only: dyn_size is 16 from the end
        assert ev.sample_type & ~((1 << 14) - 1) == K.SAMPLE_DATA_SRC
        for rtype, _misc, _buf, _start, size, off in pd.records():
            if rtype != K.RECORD_SAMPLE:
                continue
            at = off + size - 16
            dyn = int.from_bytes(buf[at : at + 8], "little")
            if dyn > keep:
                buf[at : at + 8] = keep.to_bytes(8, "little")
                n += 1
    dest.write_bytes(bytes(buf))
    return n


def test_truncated_stack_copies_are_counted(tmp_path):
    data = tmp_path / "cut.data"
    assert truncated_copy(FIX / "cpu.data", data, 96) > 300
    root = symfs_root(tmp_path, FIX / "cpu.data")
    h = header(bpfsym("-i", str(data), "--stdio", "-g", "--symfs", str(root)))
    # perf marks a chain whose stack read failed with a last entry of -1 (0 - 1, shown
    # as ffffffffffffffff [unknown]); it also cannot read the copy's last word, where
    # bpfsym can, so its count is at least bpfsym's
    text = perf("script", "-i", str(data), "-F", "ip", "--symfs", str(root)).decode()
    cut = len(re.findall(r"ffffffffffffffff\s*\n\s*\n", text + "\n"))
    assert h["stack copy truncated"] == h["stopped"] and h["of"] == 312
    assert 0 < h["stopped"] <= cut
    # the frames found are perf's, and so are the totals of those found by both
    theirs = perf_children(data, root)
    ours = bpfsym_children(data, root)
    for f in ("hot_leaf", "stage_three", "side_path"):  # in the copy's first 96 bytes
        assert abs(ours[f][0] - theirs[f][0]) <= LIMIT, (f, ours[f], theirs[f])


# ---- the corpus files with DWARF stacks, their binaries absent ----------------------------


def dwarf_corpus() -> list[str]:
    out = []
    for f in P.corpus_files():
        try:
            with PerfData(f) as pd:
                if pd.pipe:
                    for _ in pd.records():  # the attrs come in the data
                        pass
                if any(
                    a.sample_type & K.SAMPLE_REGS_USER and a.sample_type & K.SAMPLE_STACK_USER
                    for a in pd.attrs
                ):
                    out.append(f)
        except Exception:  # noqa: BLE001 - files perf cannot read either: judged elsewhere
            continue
    return out


DWARF_CORPUS = dwarf_corpus()


def test_the_corpus_has_dwarf_files():
    assert len(DWARF_CORPUS) >= 7


@pytest.mark.parametrize("path", DWARF_CORPUS, ids=os.path.basename)
def test_corpus_dwarf_files_agree_and_say_why(path, tmp_path):
    """perfcompat's children comparison (both tools with --symfs an empty directory: no
    binary to unwind with), and the header naming the missing binaries."""
    c = P.check(path, P.CHILDREN_KEYS, children=True)
    assert c.verdict.ok, P.describe(c)
    empty = tmp_path / "empty"
    empty.mkdir()
    text = bpfsym("-i", path, "--stdio", "-g", "--symfs", str(empty), "--sort", "dso,sym")
    h = header(text)
    assert h["of"] > 0 and h["stopped"] == h["of"]  # nothing unwinds without the binaries
    missing = {k: v for k, v in h.items() if k.startswith("binary missing (")}
    assert sum(missing.values()) >= h["of"] / 2
    mapped = {os.path.basename(f) for f in mmap_names(path)}
    assert all(k[len("binary missing (") : -1] in mapped for k in missing), (missing, mapped)
    doc = json.loads(bpfsym("-i", path, "--json", "-g", "--symfs", str(empty)))
    assert doc["user_stacks"]["samples"] == h["of"]
    assert sum(doc["user_stacks"]["stopped"].values()) == h["stopped"]


def mmap_names(path: str) -> set[str]:
    """The file names of a perf.data's MMAP and MMAP2 records (declared layouts)."""
    out = set()
    with PerfData(path) as pd:
        for rtype, _m, buf, start, size, _o in pd.records():
            if rtype in (K.RECORD_MMAP, K.RECORD_MMAP2):
                decl = pd.L.mmap2 if rtype == K.RECORD_MMAP2 else pd.L.mmap
                out.add(decl.parse(bytes(buf[start + 8 : start + size])).filename)
    return out
