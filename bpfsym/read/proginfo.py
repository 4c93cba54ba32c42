"""Turn the kernel's bpf_prog_info bytes and arrays into a model.Program.

Pure computation: used on the live host (capture) and on any machine reading
a side file. Function names follow the kernel's bpf_get_prog_name()
(kernel/bpf/core.c): `bpf_prog_<tag>_<name>`, the name being the BTF name of
the function's func_info entry when the program has func_info, else
bpf_prog_info.name, else nothing (`bpf_prog_<tag>`).
"""

from __future__ import annotations

import struct

from bpfsym.formats import bpf as fb
from bpfsym.model import Function, Program, ksym_name
from bpfsym.read import btf as btfinfo


def _ints(blob: bytes, fmt: str) -> list[int]:
    size = struct.calcsize(fmt)
    return [v for (v,) in struct.iter_unpack(fmt, blob[: len(blob) // size * size])]


def program_from_blobs(
    prog_id: int,
    blobs: dict[str, bytes],
    *,
    origin: str,
    load_time: int | None,
    missing: str = "",
    little: bool = True,
) -> Program:
    """A Program from what live.progs.fetch_blobs returned (or a side file stored)."""
    order = "<" if little else ">"
    info = fb.prog_info_values(blobs["info"], little)
    btf = blobs.get("btf")
    funcs = btfinfo.resolve_funcs(btf, blobs.get("func_info", b""), int(info["func_info_rec_size"]))
    jited_lines = _ints(blobs.get("jited_line_info", b""), order + "Q")
    lines = btfinfo.resolve_lines(
        btf, blobs.get("line_info", b""), int(info["line_info_rec_size"]), jited_lines
    )
    tags = [
        blobs.get("prog_tags", b"")[i : i + 8]
        for i in range(0, len(blobs.get("prog_tags", b"")), 8)
    ]
    addrs = _ints(blobs.get("ksyms", b""), order + "Q")
    lens = _ints(blobs.get("func_lens", b""), order + "I")
    image = blobs.get("jited", b"")
    prog = Program(
        id=prog_id,
        name=str(info["name"]),
        tag=bytes(info["tag"]).hex(),
        type=int(info["type"]),
        load_time=load_time,
        xlated=blobs.get("xlated") or None,
        btf=btf or None,
        btf_id=int(info["btf_id"]),
        func_info=funcs,
        lines=lines,
        map_ids=_ints(blobs.get("map_ids", b""), order + "I"),
        prog_tags=[t.hex() for t in tags],
        run_time_ns=int(info["run_time_ns"]),
        run_cnt=int(info["run_cnt"]),
        recursion_misses=int(info["recursion_misses"]),
        origin=origin,
        missing=missing,
        info={k: v for k, v in info.items() if isinstance(v, (int, str))},
    )
    if not addrs and image and info["jited_prog_len"]:
        # one function and no jited_ksyms (never seen on 6.x, kept for old kernels)
        addrs, lens = [0], [len(image)]
    offset = 0
    for i, addr in enumerate(addrs):
        size = lens[i] if i < len(lens) else 0
        # the main function carries the whole program's tag; sub-programs their own
        tag = tags[i] if 0 < i < len(tags) else bytes(info["tag"])
        fname = funcs[i].name if i < len(funcs) and funcs[i].name else ""
        if not fname and i == 0:
            fname = str(info["name"])
        code = image[offset : offset + size] if len(image) >= offset + size and size else None
        prog.functions.append(Function(ksym_name(tag, fname), addr, size, code))
        offset += size
    return prog
