"""BTF of loaded programs and of the running kernel, checked against bpftool.

Loads tests/fixtures/btf objects with `bpftool prog load`, fetches BTF,
func_info, line_info and jited_line_info through bpf(), resolves them with
bpfsym.btfinfo and compares with bpftool's own dump of the same program.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from bpfsym.formats import btf
from bpfsym.read import btf as btfinfo

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "btf"


def _load_module(name: str):
    spec = importlib.util.spec_from_file_location(name, FIX / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


dump = _load_module("dump")
bpftool_text = _load_module("bpftool_text")


def bpftool(*args: str) -> str:
    return subprocess.run(["bpftool", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(params=["btftest", "minimal"])
def loaded(request):
    pin = f"/sys/fs/bpf/bpfsym_btftest_{os.getpid()}_{request.param}"
    fd = dump.load(request.param, pin)
    try:
        yield request.param, dump.fetch(fd)
    finally:
        os.close(fd)
        os.unlink(pin)
    assert not os.path.exists(pin)


def test_lines_and_funcs_match_bpftool(loaded):
    name, got = loaded
    info = got["info"]
    assert got["btf"] is not None and info.nr_line_info > 0
    funcs = btfinfo.resolve_funcs(got["btf"], got["func_info"], info.func_info_rec_size)
    jited = btfinfo.jited_addrs(got["jited_line_info"])
    lines = btfinfo.resolve_lines(got["btf"], got["line_info"], info.line_info_rec_size, jited)

    ref_funcs, ref_lines = bpftool_text.xlated_linum(
        bpftool("prog", "dump", "xlated", "id", str(info.id), "linum")
    )
    assert [(f.insn_off, f.name) for f in funcs] == ref_funcs
    assert [(x.insn_off, x.file, x.text.strip(), x.line, x.col) for x in lines] == ref_lines
    # the main function's BTF name is the program name bpftool shows
    shown = json.loads(bpftool("-j", "prog", "show", "id", str(info.id)))
    assert funcs[0].name == shown["name"] == name
    assert shown["btf_id"] == info.btf_id
    # every func_info type is a FUNC of that name in bpftool's dump of the program's BTF
    ref_types = {
        i: (k, n)
        for i, k, n in bpftool_text.btf_types(bpftool("btf", "dump", "id", str(info.btf_id)))
    }
    assert all(ref_types[f.type_id] == ("FUNC", f.name) for f in funcs)
    # the source text is that line of the C file (line 0: compiler-made code, no text)
    src = (FIX / f"{name}.bpf.c").read_text().splitlines()
    for x in lines:
        assert x.file == f"./{name}.bpf.c"
        assert x.text == (src[x.line - 1] if x.line else "")


def test_jited_lines_inside_their_function(loaded):
    _, got = loaded
    info = got["info"]
    ksyms = struct.unpack(f"<{info.nr_jited_ksyms}Q", got["jited_ksyms"])
    lens = struct.unpack(f"<{info.nr_jited_func_lens}I", got["jited_func_lens"])
    funcs = btfinfo.resolve_funcs(got["btf"], got["func_info"], info.func_info_rec_size)
    lines = btfinfo.resolve_lines(
        got["btf"],
        got["line_info"],
        info.line_info_rec_size,
        btfinfo.jited_addrs(got["jited_line_info"]),
    )
    assert len(funcs) == len(ksyms) == len(lens)
    assert info.nr_jited_line_info == info.nr_line_info
    starts = [f.insn_off for f in funcs] + [1 << 32]
    for k, (addr, size) in enumerate(zip(ksyms, lens, strict=True)):
        mine = [x for x in lines if starts[k] <= x.insn_off < starts[k + 1]]
        assert mine, f"function {k} has no line info"
        # kernel bpf_prog_fill_jited_linfo(): a function's first line is its entry point
        assert mine[0].jited_addr == addr
        addrs = [x.jited_addr for x in mine]
        assert None not in addrs
        assert addrs == sorted(a for a in addrs if a is not None)
        assert all(a is not None and addr <= a < addr + size for a in addrs)


def test_vmlinux_btf_matches_bpftool():
    path = "/sys/kernel/btf/vmlinux"
    with open(path, "rb") as f:
        blob = f.read()
    parsed = btf.parse(blob, path)
    ref = bpftool_text.btf_types(bpftool("btf", "dump", "file", path))
    assert len(parsed.types) == len(ref) > 1000
    ours = [
        (i + 1, btf.KIND_NAMES[x.info.kind], parsed.string(x.name_off) or "(anon)")
        for i, x in enumerate(parsed.types)
    ]
    assert ours == ref
    assert {k for _, k, _ in ref} >= {"ENUM64", "FLOAT", "DECL_TAG", "TYPE_TAG"}
    index = btfinfo.BtfIndex(blob, path)
    assert len(index.type_offsets()) == len(ref)
    for type_id, kind, name in ref[:: len(ref) // 200]:
        k, n = index.type_kind_name(type_id)
        assert (btf.KIND_NAMES[k], n or "(anon)") == (kind, name)


def test_vmlinux_btf_by_id_equals_sysfs():
    # id 1 is vmlinux (bpftool btf show); the bytes fetched by id are the sysfs file
    shown = json.loads(bpftool("-j", "btf", "show", "id", "1"))
    assert shown["name"] == "vmlinux"
    with open("/sys/kernel/btf/vmlinux", "rb") as f:
        assert dump.fetch_btf(1) == f.read()
