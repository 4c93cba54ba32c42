"""Prototype (docs/record-startup.md): record's per-program and per-record work at
struct's speed, for hosts with thousands of programs and fast program churn.

Measured on 6.18 with 300 held xdp_demo copies (8 KB of blobs each): progs.fetch_blobs
139 µs a program, sf.program.build 94 µs, zlib level 1 96 µs, sf.frame.build 10 µs and
sf.sideband.build 6 µs a record. The same bytes are built here with struct.Struct
formats derived from the formats/ declarations (formats.struct_of), and zlib, which
releases the GIL, runs in a thread of its own. bench/perfns_probe.py --check compares
every byte with the construct path.
"""

from __future__ import annotations

import os
import queue
import struct
import threading
import zlib
from typing import Any

from bpfsym.formats import bpf as fb
from bpfsym.formats import sidefile as sf
from bpfsym.formats import struct_of
from bpfsym.live import progs
from bpfsym.live.sys import Buffer, bpf
from bpfsym.store import COMPRESS_MIN, SideFileWriter

_INFO, _NAMES = fb.prog_info_struct()
_AT = {n: i for i, n in enumerate(_NAMES)}
_ZERO = bytes(_INFO.size)
_BTF, _BTF_NAMES = struct_of(fb.btf_info)
_BTF_AT = {n: i for i, n in enumerate(_BTF_NAMES)}
_BTF_ZERO = bytes(_BTF.size)
_GET_ID = progs.GET_ID_ATTR
_INFO_ATTR = progs.INFO_ATTR
_ARRAYS = [
    (name, _AT[ptr], _AT[count], _AT[elem] if isinstance(elem, str) else -elem)
    for name, (ptr, count, elem) in progs._ARRAYS.items()
]
_JITED_LEN = _AT["jited_prog_len"]
_BTF_ID = _AT["btf_id"]

_FRAME = struct.Struct("<HHII")  # sf.frame: type, flags, length, crc32
assert _FRAME.size == sf.FRAME_SIZE
_PROG_HEAD = struct.Struct("<IBq")  # sf.program: prog_id, origin, load_time
_U8, _U16, _U32 = struct.Struct("<B"), struct.Struct("<H"), struct.Struct("<I")
ORIGIN_CODE = {name: value for value, name in sf.ORIGINS.items()}


def _info_call(fd: int, info: bytes, size: int) -> bytes:
    buf = Buffer(size)
    buf.write(info)
    bpf(fb.BPF_OBJ_GET_INFO_BY_FD, _INFO_ATTR.pack(fd, size, buf.addr))
    return buf.read()


def fetch_blobs(fd: int) -> progs.ProgBlobs:
    """progs.fetch_blobs with struct: the same calls, the same blobs (the info blob holds
    this call's buffer addresses, as there)."""
    first = list(_INFO.unpack(_info_call(fd, _ZERO, _INFO.size)))
    req = first[:]
    bufs: list[tuple[str, int, int, Buffer, int]] = []
    for name, ptr, count, elem in _ARRAYS:
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
    raw = _info_call(fd, _INFO.pack(*req), _INFO.size)
    second = _INFO.unpack(raw)
    out = progs.ProgBlobs({"info": raw})
    for name, count, elem, buf, size in bufs:
        esize = second[elem] if elem >= 0 else -elem
        out.blobs[name] = buf.read(min(size, second[count] * esize))
    if second[_BTF_ID]:
        try:
            out.blobs["btf"] = fetch_btf(second[_BTF_ID])
        except OSError as e:
            out.missing = f"BTF {second[_BTF_ID]}: {e.strerror}"
    if second[_JITED_LEN] == 0:
        out.missing = out.missing or "no JIT image (bpf_jit_enable=0, or interpreter)"
    return out


def fetch_btf(btf_id: int) -> bytes:
    fd = bpf(fb.BPF_BTF_GET_FD_BY_ID, _GET_ID.pack(btf_id, 0, 0))
    try:
        first = list(_BTF.unpack(_info_call(fd, _BTF_ZERO, _BTF.size)))
        size = first[_BTF_AT["btf_size"]]
        buf = Buffer(size)
        req = first[:]
        req[_BTF_AT["btf"]] = buf.addr
        req[_BTF_AT["name"]] = 0
        req[_BTF_AT["name_len"]] = 0
        second = _BTF.unpack(_info_call(fd, _BTF.pack(*req), _BTF.size))
        return buf.read(second[_BTF_AT["btf_size"]])
    finally:
        os.close(fd)


def _str16(text: str) -> bytes:
    b = text.encode()
    return _U16.pack(len(b)) + b


def program_payload(
    prog_id: int, origin: str, load_time: int, missing: str, blobs: dict[str, bytes]
) -> bytes:
    """sf.program.build({...}) with struct (same bytes)."""
    parts = [_PROG_HEAD.pack(prog_id, ORIGIN_CODE[origin], load_time), _str16(missing)]
    parts.append(_U16.pack(len(blobs)))
    for name, data in blobs.items():
        nb = name.encode("ascii")
        parts += [_U8.pack(len(nb)), nb, _U32.pack(len(data)), data]
    return b"".join(parts)


def frame(rtype: int, payload: bytes, compress: bool | None = None) -> bytes:
    """SideFileWriter.write's frame (header + payload) with struct (same bytes)."""
    if compress is None:
        compress = len(payload) >= COMPRESS_MIN
    flags = 0
    if compress:
        packed = zlib.compress(payload, 1)
        if len(packed) < len(payload):
            payload, flags = packed, sf.FLAG_ZLIB
    return _FRAME.pack(rtype, flags, len(payload), zlib.crc32(payload)) + payload


class FastWriter(SideFileWriter):
    """A SideFileWriter whose frames are built with struct; PROGRAM records are
    compressed and written by a thread of their own (zlib runs without the GIL).
    PROGRAM and KALLSYMS records written this way may land out of order with other
    records (not with each other): the reader takes them in any order (store._read
    collects programs and sorts them by id, and keeps KALLSYMS records in order)."""

    def __init__(self, path: str, compress_programs: bool = True) -> None:
        super().__init__(path)
        self.compress_programs = compress_programs  # False: 2.2x the bytes, no zlib time
        self._q: queue.Queue[tuple[int, bytes] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def write(self, rtype: int, payload: bytes, compress: bool | None = None) -> None:
        data = frame(rtype, payload, compress)
        with self._lock:
            os.write(self._fd, data)

    def put_program(
        self, prog_id: int, origin: str, load_time: int, missing: str, blobs: dict[str, bytes]
    ) -> None:
        self._q.put((sf.PROGRAM, program_payload(prog_id, origin, load_time, missing, blobs)))

    def write_later(self, rtype: int, payload: bytes) -> None:
        """A big record (kallsyms: 5 MB, 40 ms of zlib) compressed and written beside."""
        self._q.put((rtype, payload))

    def sideband(self, cpu: int, rec: bytes) -> None:
        self.write(sf.SIDEBAND, _U32.pack(cpu) + rec, compress=False)

    def _drain(self) -> None:
        while (item := self._q.get()) is not None:
            rtype, payload = item
            self.write(
                rtype, payload, None if rtype != sf.PROGRAM or self.compress_programs else False
            )

    def flush_programs(self) -> None:
        self._q.put(None)
        self._thread.join()

    def close(self) -> None:
        if self._thread.is_alive():
            self.flush_programs()
        super().close()


def put_value(writer: SideFileWriter, rtype: int, value: Any) -> None:
    """writer.put for the records built rarely (header, notes, end): construct is fine."""
    writer.write(rtype, sf.PAYLOADS[rtype].build(value))
