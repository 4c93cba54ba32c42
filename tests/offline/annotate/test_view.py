"""bpfsym annotate on programs recorded from a real kernel (tests/fixtures/annotate).

Expected values come from what bpftool printed for the same programs at record time
(`dump xlated`, `dump xlated linum`), from GNU objdump's decode of the same JIT images, or
are hand-derived (the arm64 encodings below).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
from typing import Any

import pytest
from kit.annotate_fixtures import (
    A64_FN,
    FIXTURE_NAMES,
    a64_capture,
    load_fixture,
    v4_only,
)

from bpfsym.annotate import bpfinsn
from bpfsym.annotate import view as annotate
from bpfsym.commands import annotate as annotate_cmd
from bpfsym.model import (
    Capture,
    CaptureHeader,
)


def bpftool_linum(dump: str) -> dict[int, tuple[str, str, int, int]]:
    """xlated index -> (text, file, line, col) of the `; ...` line bpftool printed above it."""
    out: dict[int, tuple[str, str, int, int]] = {}
    pending = None
    for ln in dump.splitlines():
        m = re.match(r"^; (.*) \[file:(.*) line_num:(\d+) line_col:(\d+)\]$", ln)
        if m:
            pending = (m.group(1), m.group(2), int(m.group(3)), int(m.group(4)))
            continue
        m = re.match(r"^ *(\d+): ", ln)
        if m and pending:
            out[int(m.group(1))] = pending
            pending = None
    return out


def view_of(name: str, samples: dict[int, int] | None = None) -> tuple[Any, annotate.ProgramView]:
    fx = load_fixture(name)
    v = annotate.build_view(fx["prog"], samples or {}, fx["ksyms"], fx["arch"])
    return fx, v


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_bytes_are_the_image(name: str) -> None:
    fx, v = view_of(name)
    assert [f.name for f in v.functions] == [f.name for f in fx["prog"].functions]
    for fn, fv in zip(fx["prog"].functions, v.functions, strict=True):
        rows = [r for b in fv.blocks for r in b.rows]
        assert b"".join(r.raw for r in rows) == fn.image
        assert [r.addr for r in rows] == sorted(r.addr for r in rows)
        assert rows[0].addr == fn.addr


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_boundaries_equal_objdump(name: str) -> None:
    fx, v = view_of(name)
    for fv, want in zip(v.functions, fx["objdump"], strict=True):
        got = [[r.addr, len(r.raw)] for b in fv.blocks for r in b.rows]
        assert got == want


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_source_and_bpf_equal_bpftool(name: str) -> None:
    fx, v = view_of(name)
    linum = bpftool_linum(fx["bpftool_xlated_linum"])
    plain = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"^ *(\d+): (.*)$", fx["bpftool_xlated"], re.M)
    }
    insns = {i.index: i for i in bpfinsn.decode(fx["prog"].xlated)}
    shown_lines = set()
    shown_insns = []
    for fv in v.functions:
        for b in fv.blocks:
            if b.line is None or b.bpf_range is None:
                continue
            start = b.bpf_range[0]
            text, file, line, col = linum[start]
            assert (b.line.text.lstrip(), b.line.file, b.line.line, b.line.col) == (
                text, file, line, col,
            )  # fmt: skip
            shown_lines.add(start)
            for i, t in b.bpf:
                shown_insns.append(i)
                if not v4_only(insns[i]):
                    assert t == plain[i]
    assert shown_lines == set(linum)  # every source line bpftool shows, and no other
    assert shown_insns == sorted(insns)  # every BPF instruction once, in order


def test_sub_program_calls_named_like_bpftool() -> None:
    fx, v = view_of("xdp_insns")
    called = re.findall(r"call pc[+-]\d+#(bpf_prog_\w+)", fx["bpftool_xlated"])
    assert len(called) == 3
    main = v.functions[0]
    calls = [r.text for b in main.blocks for r in b.rows if r.text.startswith("call")]
    named = [re.search(r"<(.*)>$", c).group(1) for c in calls]  # type: ignore[union-attr]
    assert named == called
    assert set(called) == {f.name for f in fx["prog"].functions[1:]}


def test_helper_calls_named() -> None:
    fx, v = view_of("tp_insns")
    calls = [r.text for fv in v.functions for b in fv.blocks for r in b.rows if "call" in r.text]
    named = [re.search(r"<(.*)>$", c).group(1) for c in calls]  # type: ignore[union-attr]
    # the same names bpftool printed for the BPF call instructions
    want = re.findall(r"call (bpf_\w+)#-?\d+", fx["bpftool_xlated"])
    assert [n for n in named if n in want] == [
        "bpf_rcu_read_lock",
        "bpf_ktime_get_ns",
        "bpf_rcu_read_unlock",
    ]
    assert set(want) >= {"bpf_rcu_read_lock", "bpf_ktime_get_ns", "bpf_tail_call"}


def test_samples_percent_and_summaries() -> None:
    fx0 = load_fixture("xdp_insns")
    main, alu = fx0["prog"].functions[0], fx0["prog"].functions[2]
    _, v0 = view_of("xdp_insns")
    alu_rows = [r for b in v0.functions[2].blocks for r in b.rows]
    hot, warm = alu_rows[30], alu_rows[40]
    samples = {
        hot.addr: 60,
        warm.addr + len(warm.raw) - 1: 20,  # inside the instruction, not at its start
        main.addr: 10,
        0x1234: 999,  # not this program
    }
    _, v = view_of("xdp_insns", samples)
    assert v.samples == 90
    fa = v.functions[2]
    assert fa.name == alu.name and fa.samples == 80
    rows = {r.addr: r for b in fa.blocks for r in b.rows}
    assert (rows[hot.addr].samples, rows[hot.addr].percent) == (60, 75.0)
    assert (rows[warm.addr].samples, rows[warm.addr].percent) == (20, 25.0)
    top = annotate.hottest_rows(v, 2)
    assert [(f.name, r.addr) for f, r in top] == [(alu.name, hot.addr), (alu.name, warm.addr)]
    lines = annotate.hottest_lines(v, 5)
    assert sum(n for _, n in lines) == 90
    out = annotate.render_text(v, top=5)
    assert "\033" not in out
    assert out.splitlines()[0] == (
        f"program {v.prog_id} xdp_insns, tag {v.tag}: 90 samples in 4 functions"
    )
    # summary: percent of the program; listing: percent of the function
    assert f" 66.67%      60  {alu.name}+{hot.addr - alu.addr:#x}  {hot.text}" in out
    assert f" 75.00%      60  {hot.addr:x}  {hot.text}\n" in out
    colored = annotate.render_text(v, top=5, color=True)
    assert f"\033[31m  75.00%      60  {hot.addr:x}  {hot.text}\033[0m" in colored


def test_json_records() -> None:
    fx, v = view_of("tp_insns")
    (fn,) = fx["prog"].functions
    rows = [r for b in v.functions[0].blocks for r in b.rows]
    _, v = view_of("tp_insns", {rows[5].addr: 3, rows[9].addr: 1})
    doc = json.loads(json.dumps(annotate.render_json(v)))
    assert doc["samples"] == 4
    (f,) = doc["functions"]
    assert (f["name"], f["address"], f["size"]) == (fn.name, fn.addr, fn.size)
    assert bytes.fromhex("".join(i["bytes"] for i in f["instructions"])) == fn.image
    hot = f["instructions"][5]
    assert (hot["samples"], hot["percent"], hot["address"]) == (3, 75.0, rows[5].addr)
    by_line = [i for i in f["instructions"] if i["source"]]
    assert by_line and all(
        set(i["source"]) == {"file", "line", "col", "text"} and i["bpf_insn"] is not None
        for i in by_line
    )
    assert doc["hottest_instructions"][0]["address"] == rows[5].addr


def test_missing_image_is_a_message() -> None:
    fx = load_fixture("tp_insns")
    prog = dataclasses.replace(
        fx["prog"],
        functions=[dataclasses.replace(f, image=None) for f in fx["prog"].functions],
        missing="EPERM on bpf_prog_info",
    )
    v = annotate.build_view(prog, {1: 1}, fx["ksyms"], "x86_64")
    out = annotate.render_text(v)
    assert out.splitlines()[0].endswith("no JIT image was captured (EPERM on bpf_prog_info)")
    assert "  24: (85) call bpf_tail_call#12" in out
    assert annotate.render_json(v)["missing"].startswith("no JIT image")
    bare = dataclasses.replace(prog, xlated=None, lines=[], missing="")
    assert "no JIT image was captured (not JIT-compiled)" in annotate.render_text(
        annotate.build_view(bare, {}, [], "x86_64")
    )


def test_unknown_arch_is_a_message() -> None:
    fx = load_fixture("sock_insns")
    v = annotate.build_view(fx["prog"], {}, fx["ksyms"], "riscv64")
    assert "no disassembler for architecture 'riscv64'" in annotate.render_text(v)


# ---- arm64: hand-encoded A64 -------------------------------------------------------------


def test_arm64_annotated() -> None:
    cap = a64_capture()
    text, status = annotate.annotate(cap, {7: {A64_FN + 8: 3, A64_FN + 32: 1}}, prog_id=7)
    assert status == 0
    rows = [m.group(1) for m in re.finditer(r"^.{16}  ffff80008100[0-9a-f]{4}  (.*)$", text, re.M)]
    assert rows == [
        "stp x29, x30, [sp, #-0x10]!",
        "mov x29, sp",
        "bl #0xffff800080123450 <bpf_map_lookup_elem>",
        "b.ne #0xffff800081000014 <.L0>",
        "mov x10, #0x34a0",
        "movk x10, #0x8012, lsl #16",
        "movk x10, #0x8000, lsl #32",
        "movk x10, #0xffff, lsl #48",
        "blr x10 <bpf_ktime_get_ns>",
        "ldp x29, x30, [sp], #0x10",
        "ret",
    ]
    assert " 75.00%       3  ffff800081000008  bl #0xffff800080123450 <bpf_map_lookup_elem>" in text
    assert "; a.bpf.c:11:6  t = bpf_ktime_get_ns();" in text
    assert ";      1: (85) call bpf_ktime_get_ns#5" in text


# ---- selection and command line ------------------------------------------------------------


def test_select() -> None:
    fx = load_fixture("xdp_insns")
    tp = load_fixture("tp_insns")
    cap = Capture(
        CaptureHeader("6.18", "x86_64", 4096, "b", -1, 0),
        programs=[fx["prog"], tp["prog"]],
        kallsyms=sorted(fx["ksyms"] + tp["ksyms"], key=lambda s: s.addr),
    )
    xdp, sub = fx["prog"], fx["prog"].functions[1]
    assert annotate.select(cap, xdp.id, None, {}) == [(xdp, None)]
    assert annotate.select(cap, None, str(xdp.id), {}) == [(xdp, None)]
    assert annotate.select(cap, None, sub.name, {}) == [(xdp, sub.name)]
    assert annotate.select(cap, None, "tp_insns", {}) == [(tp["prog"], None)]
    assert annotate.select(cap, None, None, {tp["prog"].id: {tp["prog"].functions[0].addr: 1}}) == [
        (tp["prog"], None)
    ]
    text, status = annotate.annotate(cap, {}, symbol=sub.name)
    assert status == 0 and f"\n{sub.name}  {sub.addr:x}  {sub.size} bytes  0 samples\n" in text
    assert xdp.functions[0].name not in text.split("\n\n", 1)[1]
    text, status = annotate.annotate(cap, {}, symbol="nope")
    assert status == 1 and text.startswith("no BPF program matches nope")


@pytest.mark.parametrize("side", [None, "elsewhere.bpfsym"])
def test_a_missing_side_file_is_one_line_naming_it(tmp_path: Any, side: str | None) -> None:
    data = tmp_path / "x.data"
    data.write_bytes(b"")  # there: only the side file is missing
    extra = ["--side", str(tmp_path / side)] if side else []
    r = subprocess.run(
        [sys.executable, "-m", "bpfsym", "annotate", "-i", str(data), *extra],
        capture_output=True,
        text=True,
    )
    want = str(tmp_path / side) if side else f"{data}.bpfsym"
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        f"bpfsym annotate: {want}: no such side file (try 'bpfsym record' first,"
        " or name one with --side)\n"
    )


def test_configure() -> None:
    p = argparse.ArgumentParser()
    annotate_cmd.configure(p)
    a = p.parse_args(["--prog", "12", "-i", "x.data", "--json", "--top", "3"])
    assert (a.prog, a.input, a.json, a.top, a.symbol, a.side) == (12, "x.data", True, 3, None, None)
    with pytest.raises(SystemExit):
        p.parse_args(["--top", "0"])


def test_the_collector_is_off_while_annotate_runs_and_on_after(tmp_path: Any, monkeypatch) -> None:
    # off for the command's one pass, back on for an in-process caller, also when it fails
    import gc

    seen = []

    def body(args: argparse.Namespace) -> int:
        seen.append(gc.isenabled())
        raise ValueError("x")

    monkeypatch.setattr(annotate_cmd, "_annotate", body)
    assert gc.isenabled()
    with pytest.raises(ValueError):
        annotate_cmd.run(argparse.Namespace())
    assert seen == [False] and gc.isenabled()
