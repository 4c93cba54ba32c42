"""bpfsym.unwind on `perf record --call-graph dwarf` recordings made now, against perf.

dwarfdemo (tests/fixtures/dwarf) is built here with -O2 -fomit-frame-pointer, recorded
by the installed perf on the running kernel, and unwound with the files of this machine
(the binaries at their paths, perf's build-id cache). perf's own unwinding of the same
file is the reference: its `perf script` chains sample by sample and its `perf report
--children` totals.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from elftools.elf.elffile import ELFFile
from kit.unwindkit import perf_children, perf_script_chains, record_cpu, record_under_sysenter

from bpfsym.symbolize import unwind as U


def perf_out(data: Path, *args: str) -> str:
    return subprocess.run(
        ["perf", *args, "-i", str(data)], capture_output=True, text=True, check=True
    ).stdout


def script(data: Path) -> dict:
    return perf_script_chains(
        perf_out(data, "script", "-F", "tid,time,ip,sym", "--ns", "--no-inline")
    )


def functions(prog: Path) -> list[tuple[int, int, str]]:
    with open(prog, "rb") as f:
        tab = ELFFile(f).get_section_by_name(".symtab")
        return [
            (s["st_value"], s["st_value"] + s["st_size"], s.name)
            for s in tab.iter_symbols()
            if s["st_info"]["type"] == "STT_FUNC" and s["st_size"]
        ]


def our_names(s: U.UnwoundSample, prog: Path, funcs: list) -> list[str]:
    """The dwarfdemo functions of an unwound chain, leaf first (pyelftools symbols)."""
    out = []
    for ip in s.user.ips:
        m = s.maps(ip)
        if m is None or os.path.realpath(m.filename) != str(prog):
            continue
        rel = ip - m.start + m.pgoff
        out += [n for lo, hi, n in funcs if lo <= rel < hi]
    return out


def perf_view(s: U.UnwoundSample) -> list[int]:
    out = list(s.kernel)
    for ip in s.user.ips:
        m = s.maps(ip)
        out.append(ip - m.start + m.pgoff if m is not None else ip)
    return out


def test_children_and_chains_equal_perfs(tmp_path):
    prog, data = record_cpu(tmp_path)
    perf = script(data)
    funcs = functions(prog)
    mine = {name for _lo, _hi, name in funcs}
    total = 0
    children: dict[str, int] = {}
    n = 0
    for s in U.unwind_samples(str(data)):
        theirs = perf[(s.tid, s.time)]
        assert s.user is not None
        names = our_names(s, prog, funcs)
        # the caller chain of dwarfdemo's functions, sample by sample
        assert names == [sym for _ip, sym in theirs if sym in mine], (s.time, s.user)
        if s.user.reason is None:
            assert perf_view(s) == [ip for ip, _ in theirs]
        total += s.period
        for f in set(names):
            children[f] = children.get(f, 0) + s.period
        n += 1
    assert n > 300
    want = perf_children(perf_out(data, "report", "--stdio", "--children", "--sort", "sym",
                                  "-g", "none", "--no-inline"))  # fmt: skip
    for f in (
        "hot_leaf",
        "stage_three",
        "side_path",
        "stage_two",
        "stage_one",
        "run_outer",
        "main",
    ):
        assert abs(100.0 * children.get(f, 0) / total - want[f][0]) <= 0.5, f
    assert want["stage_one"][0] > 90 and want["side_path"][0] > 3


def test_bpf_program_under_a_system_call(tmp_path):
    """Samples in a raw_tp/sys_enter program: the kernel chain, then the user path that
    entered the system call, unwound; equal to perf's."""
    prog, data = record_under_sysenter(tmp_path)
    perf = script(data)
    funcs = functions(prog)
    n = 0
    for s in U.unwind_samples(str(data)):
        theirs = perf[(s.tid, s.time)]
        if not theirs[0][1].startswith("bpf_prog_"):
            continue
        n += 1
        assert s.kernel and s.user is not None and s.user.reason is None
        assert perf_view(s) == [ip for ip, _ in theirs]
        assert our_names(s, prog, funcs)[:6] == [
            "syscall_leaf", "stage_three", "stage_two", "stage_one", "run_outer", "main"
        ]  # fmt: skip
    assert n > 100
