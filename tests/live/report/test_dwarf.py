"""`bpfsym report` on `perf record --call-graph dwarf` recordings made now, against perf's
own report and script of the same file, with this machine's binaries.

dwarfdemo (tests/fixtures/dwarf/dwarfdemo.c) is built here with -O2 -fomit-frame-pointer:
_start -> __libc_start_call_main -> main -> run_outer -> stage_one -> stage_two ->
stage_three | side_path -> hot_leaf (a call depth of 6 in the program itself), and in
"syscall" mode syscall_leaf -> getppid, under which sysenter_burn.bpf.o (raw_tp/sys_enter,
attached by tp_attach) burns CPU for dwarfdemo's calls only.
"""

from __future__ import annotations

import collections
import re
import subprocess
from pathlib import Path

from kit import perfcompat as P
from kit.livekit import bpfsym_run
from kit.unwindkit import record_cpu, record_under_sysenter, script_stacks

OURS = {"hot_leaf", "syscall_leaf", "stage_three", "side_path", "stage_two", "stage_one",
        "run_outer", "main", "_start"}  # fmt: skip
DEEP = ["_start", "main", "run_outer", "stage_one", "stage_two"]  # root first
LIMIT = 0.5  # percentage points


def perf(data: Path, *args: str) -> bytes:
    return subprocess.run(
        ["perf", *args, "-i", str(data)], capture_output=True, check=True, timeout=300
    ).stdout


def report(data: Path, *args: str) -> bytes:
    r = bpfsym_run("report", "-i", str(data), "--no-side", *args, text=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def children_table(text: bytes) -> dict[str, tuple[float, float]]:
    (sec,) = P.parse_report(text)
    return {
        r.key[0].split("] ", 1)[1].strip(): (r.percents["Children"], r.percents["Self"])
        for r in sec.rows
    }


def frame(name: str) -> str:
    """dwarfdemo's functions and BPF functions (without the tag, which perf takes from
    the program's first function) by name; the rest, each tool's naming of the C library
    and the kernel aside, as '?'."""
    if name.startswith("bpf_prog_"):
        return re.sub(r"^bpf_prog_[0-9a-f]{16}", "bpf_prog", name)
    return name if name in OURS else "?"


def perf_stacks(data: Path) -> collections.Counter:
    """perf script's chain of every sample, root first, as frame() names them."""
    text = perf(data, "script", "-F", "comm,ip,sym", "--no-inline").decode("utf-8", "replace")
    return script_stacks(text, frame)


def folded(data: Path) -> list[tuple[list[str], int]]:
    out = []
    for line in report(data, "--folded").decode("utf-8", "replace").splitlines():
        stack, n = line.rsplit(" ", 1)
        out.append((stack.split(";")[1:], int(n)))
    return out


def bpfsym_stacks(data: Path) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for frames, n in folded(data):
        out[tuple(frame(f) for f in frames)] += n
    return out


def unwind_header(text: bytes) -> tuple[int, int]:
    m = re.search(rb"# user stacks not unwound to their outermost frame: (\d+) of (\d+)", text)
    assert m, text[:2000]
    return int(m.group(1)), int(m.group(2))


def assert_chains_equal(got: collections.Counter, want: collections.Counter, stopped: int) -> None:
    """Every sample's chain equals perf's, but for at most the stacks bpfsym's header says
    it could not unwind to their outermost frame (seen: one sample in the dynamic loader's
    entry code, which has no CFI, where perf's unwinder still found _start)."""
    assert sum(got.values()) == sum(want.values())
    differ = sum((got - want).values())
    assert differ <= stopped, (differ, stopped, got - want, want - got)


def test_children_totals_and_chains_equal_perfs(tmp_path):
    prog, data = record_cpu(tmp_path)
    theirs = children_table(
        perf(data, "report", "--stdio", "--children", "--sort", "sym", "-g", "none", "--no-inline")
    )
    text = report(data, "--stdio", "-g", "--sort", "sym")
    ours = children_table(text)
    compared = 0
    for f, (children, self_) in theirs.items():
        if f not in OURS or children < 0.5:
            continue
        assert abs(ours[f][0] - children) <= LIMIT, (f, ours[f], theirs[f])
        assert abs(ours[f][1] - self_) <= LIMIT, (f, ours[f], theirs[f])
        compared += 1
    assert compared >= 7
    assert theirs["stage_one"][0] > 90 and theirs["side_path"][0] > 3
    # every sample's chain, frame by frame
    want = perf_stacks(data)
    got = bpfsym_stacks(data)
    assert sum(want.values()) > 300
    stopped, of = unwind_header(text)
    assert_chains_equal(got, want, stopped)
    deep = [*DEEP, "stage_three", "hot_leaf"]  # a call depth of 7 below _start
    assert any([f for f in s if f in OURS] == deep for s in got)
    assert of == sum(want.values()) and stopped <= of / 100  # this machine has the binaries


def test_bpf_program_under_the_unwound_system_call(tmp_path):
    """Samples in the raw_tp/sys_enter program: the user call path that entered the
    system call, then the kernel chain up to the program, as perf shows them."""
    prog, data = record_under_sysenter(tmp_path)
    want = perf_stacks(data)
    got = bpfsym_stacks(data)
    assert_chains_equal(got, want, unwind_header(report(data, "--stdio", "-g"))[0])
    n = entered = 0
    for frames, count in folded(data):
        bpf = [i for i, f in enumerate(frames) if f.startswith("bpf_prog_")]
        if not bpf:
            continue
        n += count
        # the program's main function, or its sub-program when the kernel's unwinder
        # skipped the main function's frame in the JIT code
        assert frames[bpf[0]].endswith(("_dwarf_sysenter", "_burn")), frames
        user = [f for f in frames[: bpf[0]] if f in OURS]
        assert user == [*DEEP, "stage_three", "syscall_leaf"], frames
        # the user part ends in the C library's wrapper; the kernel's entry follows it
        # (but for the kernel's own unwinder stopping in the JIT code now and then, as
        # perf's chains show: they are equal above)
        k = frames.index("syscall_leaf") + 1
        assert "getppid" in frames[k]
        entered += count * ("entry_SYSCALL_64_after_hwframe" in frames[k + 1 : bpf[0]])
    assert n > 100 and entered > 0.9 * n
