"""BPF programs of the running kernel: enumerate, take a reference, fetch full info.

The fetch returns the kernel's own bytes (bpf_prog_info and each array it
points to) so that the side file stores exactly what the kernel said.
"""

from __future__ import annotations

import errno
import os
import sys
from collections import namedtuple
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bpfsym.formats import bpf as fb
from bpfsym.formats import integers, struct_of
from bpfsym.live.sys import Buffer, bpf

# The arrays of bpf_prog_info: (pointer field, count field, element size or rec-size field)
_ARRAYS: dict[str, tuple[str, str, int | str]] = {
    "jited": ("jited_prog_insns", "jited_prog_len", 1),
    "xlated": ("xlated_prog_insns", "xlated_prog_len", 1),
    "map_ids": ("map_ids", "nr_map_ids", 4),
    "ksyms": ("jited_ksyms", "nr_jited_ksyms", 8),
    "func_lens": ("jited_func_lens", "nr_jited_func_lens", 4),
    "func_info": ("func_info", "nr_func_info", "func_info_rec_size"),
    "line_info": ("line_info", "nr_line_info", "line_info_rec_size"),
    "jited_line_info": ("jited_line_info", "nr_jited_line_info", "jited_line_info_rec_size"),
    "prog_tags": ("prog_tags", "nr_prog_tags", 8),
}
BLOB_NAMES = ("info", *_ARRAYS, "btf")


# bpf_attr for *_GET_NEXT_ID / *_GET_FD_BY_ID and OBJ_GET_INFO_BY_FD, packed with struct:
# construct's build costs ~20-30 µs, longer than a libbpf probe program lives
GET_ID_ATTR = struct_of(fb.get_id_attr)[0]
INFO_ATTR = struct_of(fb.info_attr)[0]
_INFO_FAST, _INFO_NAMES = fb.prog_info_struct()  # struct bpf_prog_info, native order
INFO_SIZE = _INFO_FAST.size


@dataclass
class ProgBlobs:
    """What the kernel returned for one program: info bytes and its arrays, plus BTF."""

    blobs: dict[str, bytes] = field(default_factory=dict)
    missing: str = ""  # why something could not be fetched


def next_id(start: int) -> int | None:
    attr = bytearray(GET_ID_ATTR.pack(start, 0, 0))
    try:
        bpf(fb.BPF_PROG_GET_NEXT_ID, attr)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise
    return int(GET_ID_ATTR.unpack(attr)[1])


def iter_ids() -> Iterator[int]:
    """Ids of all programs, ascending (BPF_PROG_GET_NEXT_ID)."""
    cur = 0
    while (nxt := next_id(cur)) is not None:
        yield nxt
        cur = nxt


def fd_by_id(prog_id: int) -> int:
    """A reference that keeps the program alive (raises OSError ENOENT when it is gone)."""
    return bpf(fb.BPF_PROG_GET_FD_BY_ID, GET_ID_ATTR.pack(prog_id, 0, 0))


def _info_call(fd: int, info: bytes | bytearray, cmd: int = fb.BPF_OBJ_GET_INFO_BY_FD) -> bytes:
    buf = Buffer(len(info))
    buf.write(bytes(info))
    bpf(cmd, bytearray(INFO_ATTR.pack(fd, len(info), buf.addr)))  # the kernel writes info_len back
    return buf.read()


ProgInfo = namedtuple("ProgInfo", _INFO_NAMES)  # type: ignore[misc]
_NAME_AT = _INFO_NAMES.index("name")
_ZERO_INFO = bytes(INFO_SIZE)


def basic_info(fd: int) -> Any:
    """bpf_prog_info without arrays, as a ProgInfo named tuple (top reads this per program
    per refresh: struct, not construct, which costs ~30 µs a parse)."""
    vals = list(_INFO_FAST.unpack(_info_call(fd, _ZERO_INFO)))
    vals[_NAME_AT] = fb.prog_name(vals[_NAME_AT])
    return ProgInfo._make(vals)


# fetch_blobs / fetch_btf at struct's speed (a host with thousands of programs, and
# loaders churning hundreds a second): the same two calls and the same bytes as the
# construct declarations give, ~40 µs a program instead of ~140 µs (docs/record-startup.md)
_AT = {n: i for i, n in enumerate(_INFO_NAMES)}
_ARRAY_AT = [
    (name, _AT[ptr], _AT[count], _AT[elem] if isinstance(elem, str) else -elem)
    for name, (ptr, count, elem) in _ARRAYS.items()
]  # elem < 0: a fixed element size of -elem bytes
_JITED_LEN_AT, _BTF_ID_AT = _AT["jited_prog_len"], _AT["btf_id"]
_BTF_INFO, _BTF_NAMES = struct_of(fb.btf_info)
_BTF_AT = {n: i for i, n in enumerate(_BTF_NAMES)}
_ZERO_BTF = bytes(_BTF_INFO.size)


def fetch_blobs(fd: int) -> ProgBlobs:
    """Full info: a first call for the counts, a second with a buffer for every array.
    The info blob is the second call's bytes as the kernel wrote them (its pointers are
    this call's buffers)."""
    first = _INFO_FAST.unpack(_info_call(fd, _ZERO_INFO))
    req = list(first)
    bufs: list[tuple[str, int, int, Buffer, int]] = []
    for name, ptr, count, elem in _ARRAY_AT:
        n = first[count]
        esize = first[elem] if elem >= 0 else -elem
        if n == 0 or esize == 0:
            req[ptr] = 0
            req[count] = 0
            continue
        size = n * esize
        buf = Buffer(size)
        bufs.append((name, count, elem, buf, size))
        req[ptr] = buf.addr
    raw = _info_call(fd, _INFO_FAST.pack(*req))
    second = _INFO_FAST.unpack(raw)
    out = ProgBlobs({"info": raw})
    for name, count, elem, buf, size in bufs:
        esize = second[elem] if elem >= 0 else -elem
        out.blobs[name] = buf.read(min(size, second[count] * esize))
    if second[_BTF_ID_AT]:
        try:
            out.blobs["btf"] = fetch_btf(second[_BTF_ID_AT])
        except OSError as e:
            out.missing = f"BTF {second[_BTF_ID_AT]}: {e.strerror}"
    if second[_JITED_LEN_AT] == 0:
        out.missing = out.missing or "no JIT image (bpf_jit_enable=0, or interpreter)"
    return out


def fetch_btf(btf_id: int) -> bytes:
    """The raw BTF blob of btf_id (BPF_BTF_GET_FD_BY_ID + bpf_btf_info)."""
    fd = bpf(fb.BPF_BTF_GET_FD_BY_ID, GET_ID_ATTR.pack(btf_id, 0, 0))
    try:
        first = _BTF_INFO.unpack(_info_call(fd, _ZERO_BTF))
        buf = Buffer(first[_BTF_AT["btf_size"]])
        req = list(first)
        req[_BTF_AT["btf"]] = buf.addr
        req[_BTF_AT["name"]] = 0
        req[_BTF_AT["name_len"]] = 0
        second = _BTF_INFO.unpack(_info_call(fd, _BTF_INFO.pack(*req)))
        return buf.read(second[_BTF_AT["btf_size"]])
    finally:
        os.close(fd)


_NATIVE = integers(sys.byteorder == "little")


def u64s(blob: bytes) -> list[int]:
    return list(_NATIVE.array("Q", len(blob) // 8).unpack_from(blob))


def u32s(blob: bytes) -> list[int]:
    return list(_NATIVE.array("I", len(blob) // 4).unpack_from(blob))
