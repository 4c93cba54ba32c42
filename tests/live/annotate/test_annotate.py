"""annotate on programs loaded right now, checked against bpftool, objdump and /proc/kallsyms."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bpfsym.annotate import bpfinsn
from bpfsym.annotate import view as annotate
from bpfsym.capture.snapshot import fetch_program as fetch
from bpfsym.formats import bpfinsn as fmt
from bpfsym.read.kallsyms import parse_kallsyms

OBJ = Path(__file__).resolve().parents[2] / "fixtures" / "annotate" / "insns.bpf.o"
ARCH = os.uname().machine


def bpftool(*args: str) -> str:
    return subprocess.run(["bpftool", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def loaded() -> Iterator[dict[str, Any]]:
    if not os.path.ismount("/sys/fs/bpf"):
        subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], check=True)
    pin = f"/sys/fs/bpf/bpfsym_annotate_live_{os.getpid()}"
    res = subprocess.run(
        ["bpftool", "-d", "prog", "loadall", str(OBJ), pin], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr[-3000:]
    try:
        progs = {}
        for name in sorted(os.listdir(pin)):
            info = json.loads(bpftool("-j", "prog", "show", "pinned", f"{pin}/{name}"))
            progs[name] = fetch(info["id"])
        kallsyms_text = Path("/proc/kallsyms").read_text()
        # the running kernel's own printer, from the verifier log of this load
        verifier = {
            m.group(1)
            for m in re.finditer(r"^\d+: (\([0-9a-f]{2}\) .*?)(?:\s+; .*)?$", res.stderr, re.M)
        }
        yield {"progs": progs, "kallsyms": kallsyms_text, "verifier": verifier}
    finally:
        subprocess.run(["rm", "-rf", pin], check=True)


def kallsyms_by_addr(text: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for ln in text.splitlines():
        a, _, n = ln.split()[:3]
        out.setdefault(int(a, 16), []).append(n)
    return out


def is_v4(insn: bpfinsn.Insn) -> bool:
    cls, op = insn.code & 0x07, insn.code & 0xF0
    if cls in (fmt.BPF_ALU, fmt.BPF_ALU64):
        return (op in (fmt.BPF_DIV, fmt.BPF_MOD) and insn.off == 1) or (
            op == fmt.BPF_MOV and bool(insn.code & 0x08) and insn.off != 0
        ) or (cls == fmt.BPF_ALU64 and op == fmt.BPF_END)  # fmt: skip
    if cls == fmt.BPF_LDX:
        return insn.code & 0xE0 == fmt.BPF_MEMSX
    if cls == fmt.BPF_STX:
        return insn.imm in (fmt.BPF_LOAD_ACQ, fmt.BPF_STORE_REL) and insn.code & 0xE0 == 0xC0
    return insn.code == fmt.BPF_JMP32 | fmt.BPF_JA


def view(loaded: dict[str, Any], name: str) -> annotate.ProgramView:
    kernel = [s for s in parse_kallsyms(loaded["kallsyms"]) if s.module != "bpf"]
    prog = loaded["progs"][name]
    return annotate.build_view(prog, {}, kernel, ARCH, programs=list(loaded["progs"].values()))


NAMES = ["sock_insns", "tp_insns", "xdp_insns"]


@pytest.mark.parametrize("name", NAMES)
def test_bpf_insns_equal_bpftool(loaded: dict[str, Any], name: str) -> None:
    prog = loaded["progs"][name]
    v = view(loaded, name)
    dump = bpftool("prog", "dump", "xlated", "id", str(prog.id))
    theirs = {int(m.group(1)): m.group(2) for m in re.finditer(r"^ *(\d+): (.*)$", dump, re.M)}
    insns = {i.index: i for i in bpfinsn.decode(prog.xlated)}
    shown = {i: t for fv in v.functions for b in fv.blocks for i, t in b.bpf}
    assert sorted(shown) == sorted(insns) == sorted(theirs)
    for i, t in shown.items():
        if is_v4(insns[i]):  # newer than this bpftool's disasm.c: the kernel printed it
            assert t in loaded["verifier"]
        else:
            assert t == theirs[i]


@pytest.mark.parametrize("name", NAMES)
def test_source_lines_equal_bpftool_linum(loaded: dict[str, Any], name: str) -> None:
    prog = loaded["progs"][name]
    dump = bpftool("prog", "dump", "xlated", "id", str(prog.id), "linum")
    want: dict[int, tuple[str, str, int, int]] = {}
    pending = None
    for ln in dump.splitlines():
        m = re.match(r"^; (.*) \[file:(.*) line_num:(\d+) line_col:(\d+)\]$", ln)
        if m:
            pending = (m.group(1), m.group(2), int(m.group(3)), int(m.group(4)))
        elif (m := re.match(r"^ *(\d+): ", ln)) and pending:
            want[int(m.group(1))] = pending
            pending = None
    got = {
        b.bpf_range[0]: (b.line.text.lstrip(), b.line.file, b.line.line, b.line.col)
        for fv in view(loaded, name).functions
        for b in fv.blocks
        if b.line is not None and b.bpf_range is not None
    }
    assert got == want


@pytest.mark.parametrize("name", NAMES)
def test_native_code_equals_image_and_objdump(loaded: dict[str, Any], name: str) -> None:
    prog = loaded["progs"][name]
    machine = {"x86_64": "i386:x86-64", "aarch64": "aarch64"}[ARCH]
    for fn, fv in zip(prog.functions, view(loaded, name).functions, strict=True):
        rows = [r for b in fv.blocks for r in b.rows]
        assert b"".join(r.raw for r in rows) == fn.image
        with tempfile.NamedTemporaryFile(suffix=".bin") as tmp:
            tmp.write(fn.image)
            tmp.flush()
            out = subprocess.run(
                ["objdump", "-D", "-b", "binary", "-m", machine, f"--adjust-vma={fn.addr:#x}",
                 "--insn-width=16", tmp.name],
                check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
        want = [
            (int(m.group(1), 16), len(m.group(2).split()))
            for m in re.finditer(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)", out, re.M)
        ]
        assert [(r.addr, len(r.raw)) for r in rows] == want


def test_calls_named_like_kallsyms(loaded: dict[str, Any]) -> None:
    ks = kallsyms_by_addr(loaded["kallsyms"])
    xdp = loaded["progs"]["xdp_insns"]
    main = view(loaded, "xdp_insns").functions[0]
    calls = [r for b in main.blocks for r in b.rows if r.text.startswith("call")]
    subs = {f.addr: f.name for f in xdp.functions[1:]}
    named = {}
    for r in calls:
        target = int(r.text.split()[1], 16)
        named[target] = r.text.rsplit("<", 1)[1].rstrip(">")
    assert set(named) == set(subs)
    for addr, name in named.items():
        assert ks[addr] == [name]  # the sub-program's /proc/kallsyms name
    assert {n.rsplit("_", 1)[1] for n in named.values()} == {"mix", "alu", "atomics"}

    tp = view(loaded, "tp_insns").functions[0]
    helpers = {}
    for r in (r for b in tp.blocks for r in b.rows if r.text.startswith("call")):
        target = int(r.text.split()[1], 16)
        helpers[target] = r.text.rsplit("<", 1)[1].rstrip(">")
    for addr, name in helpers.items():
        assert name in ks[addr]
    assert set(helpers.values()) == {"bpf_rcu_read_lock", "bpf_ktime_get_ns", "bpf_rcu_read_unlock"}


def test_rendered(loaded: dict[str, Any]) -> None:
    v = view(loaded, "xdp_insns")
    text = annotate.render_text(v)
    for fn in loaded["progs"]["xdp_insns"].functions:
        assert f"\n{fn.name}  {fn.addr:x}  {fn.size} bytes  0 samples\n" in text
    doc = annotate.render_json(v)
    assert [f["name"] for f in doc["functions"]] == [
        f.name for f in loaded["progs"]["xdp_insns"].functions
    ]
