"""Turn the kernel's bpf_prog_info bytes and arrays into a model.Program.

Pure computation: used on the live host (capture) and on any machine reading
a side file. Function names follow the kernel's bpf_get_prog_name()
(kernel/bpf/core.c): `bpf_prog_<tag>_<name>`, the name being the BTF name of
the function's func_info entry when the program has func_info, else
bpf_prog_info.name, else nothing (`bpf_prog_<tag>`).
"""

from __future__ import annotations

from bpfsym.errors import FormatError
from bpfsym.formats import bpf as fb
from bpfsym.formats import integers
from bpfsym.model import ORIGIN_PERF, Function, Program, ksym_name
from bpfsym.read import btf as btfinfo


def _ints(blob: bytes, code: str, little: bool) -> list[int]:
    """The integers of an array blob (u64 addresses "Q", u32 lengths and ids "I")."""
    ints = integers(little)
    size = ints.array(code, 1).size
    return list(ints.array(code, len(blob) // size).unpack_from(blob))


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
    info = fb.prog_info_values(blobs["info"], little)
    btf = blobs.get("btf")
    funcs = btfinfo.resolve_funcs(btf, blobs.get("func_info", b""), int(info["func_info_rec_size"]))
    jited_lines = _ints(blobs.get("jited_line_info", b""), "Q", little)
    lines = btfinfo.resolve_lines(
        btf, blobs.get("line_info", b""), int(info["line_info_rec_size"]), jited_lines
    )
    tags = [
        blobs.get("prog_tags", b"")[i : i + 8]
        for i in range(0, len(blobs.get("prog_tags", b"")), 8)
    ]
    addrs = _ints(blobs.get("ksyms", b""), "Q", little)
    lens = _ints(blobs.get("func_lens", b""), "I", little)
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
        map_ids=_ints(blobs.get("map_ids", b""), "I", little),
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


def program_from_perf(
    prog_id: int,
    blobs: dict[str, bytes],
    btfs: dict[int, bytes],
    *,
    load_time: int | None,
    little: bool = True,
) -> Program:
    """A Program from a perf.data HEADER_BPF_PROG_INFO entry (read.features gives its
    blobs) and the HEADER_BPF_BTF blobs. A file perf wrote years ago, or a damaged one,
    must still name its functions: BTF that does not decode is dropped (lines and names
    without text), then func and line info."""
    info = fb.prog_info_values(blobs["info"], little)
    btf = btfs.get(int(info["btf_id"]))
    for b in ([dict(blobs, btf=btf)] if btf else []) + [blobs]:
        try:
            return program_from_blobs(
                prog_id, b, origin=ORIGIN_PERF, load_time=load_time, little=little
            )
        except FormatError:
            continue  # without its BTF; func and line info alone cannot fail
    bare = {k: v for k, v in blobs.items() if k not in ("func_info", "line_info")}
    return program_from_blobs(prog_id, bare, origin=ORIGIN_PERF, load_time=load_time, little=little)
