"""perf.data feature sections (file mode) and HEADER_FEATURE records (pipe mode): host
strings, cmdline, event names, build ids, BPF_PROG_INFO and BPF_BTF.

Layouts from bpfsym.formats.perfdata (tools/perf/util/header.c writes them).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from construct import Construct, ConstructError

from bpfsym.errors import FormatError
from bpfsym.formats import perfdata as F
from bpfsym.formats import struct_of
from bpfsym.formats.bpf import prog_info_values


def parse_at(decl: Construct, data: bytes, path: str, offset: int, what: str) -> Any:
    """Parse with construct, turning any failure into FormatError at offset."""
    try:
        return decl.parse(data)
    except (ConstructError, UnicodeDecodeError, ValueError, OverflowError) as e:
        raise FormatError(path, offset, f"bad {what}: {str(e).splitlines()[0][:120]}") from None


@dataclass
class BuildId:
    pid: int
    build_id: str  # hex
    filename: str


@dataclass
class BpfProgInfo:
    """One HEADER_BPF_PROG_INFO entry (struct perf_bpil), arrays resolved."""

    info: dict[str, Any]
    jited_ksyms: list[int] = field(default_factory=list)
    jited_func_lens: list[int] = field(default_factory=list)
    prog_tags: list[bytes] = field(default_factory=list)
    func_info: list[tuple[int, int]] = field(default_factory=list)  # (insn_off, type_id)
    line_info: list[tuple[int, int, int, int]] = field(default_factory=list)
    jited_line_info: list[int] = field(default_factory=list)


@dataclass
class Header:
    """What the feature sections (or pipe-mode HEADER_FEATURE records) say."""

    hostname: str = ""
    osrelease: str = ""
    version: str = ""
    arch: str = ""
    cmdline: list[str] = field(default_factory=list)
    nrcpus: tuple[int, int] = (0, 0)
    clockid: int | None = None
    sample_time: tuple[int, int] | None = None
    build_ids: list[BuildId] = field(default_factory=list)
    bpf_progs: dict[int, BpfProgInfo] = field(default_factory=dict)
    btfs: dict[int, bytes] = field(default_factory=dict)
    event_names: dict[int, str] = field(default_factory=dict)  # attr id -> name
    features: set[int] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)


WANTED_FEATURES = {
    F.HEADER_BUILD_ID,
    F.HEADER_HOSTNAME,
    F.HEADER_OSRELEASE,
    F.HEADER_VERSION,
    F.HEADER_ARCH,
    F.HEADER_NRCPUS,
    F.HEADER_CMDLINE,
    F.HEADER_EVENT_DESC,
    F.HEADER_SAMPLE_TIME,
    F.HEADER_CLOCKID,
    F.HEADER_BPF_PROG_INFO,
    F.HEADER_BPF_BTF,
}


def parse_feature(
    h: Header, L: F.PerfDataLayouts, bit: int, data: bytes, path: str, offset: int
) -> None:
    """Decode one feature section into h (raises FormatError on garbage)."""
    if bit in (F.HEADER_HOSTNAME, F.HEADER_OSRELEASE, F.HEADER_VERSION, F.HEADER_ARCH):
        s = parse_at(L.string, data, path, offset, "header string").value
        setattr(h, FEATURE_STRINGS[bit], s)
    elif bit == F.HEADER_CMDLINE:
        h.cmdline = [s.value for s in parse_at(L.string_list, data, path, offset, "cmdline")]
    elif bit == F.HEADER_NRCPUS:
        n = parse_at(L.nrcpus, data, path, offset, "nrcpus")
        h.nrcpus = (n.online, n.available)
    elif bit == F.HEADER_SAMPLE_TIME:
        t = parse_at(L.sample_time, data, path, offset, "sample time")
        h.sample_time = (t.first, t.last)
    elif bit == F.HEADER_CLOCKID:
        h.clockid = parse_at(L.u64, data, path, offset, "clockid")
    elif bit == F.HEADER_EVENT_DESC:
        d = parse_at(L.event_desc(), data, path, offset, "event_desc")
        for ev in d.events:
            for i in ev.ids:
                h.event_names[i] = ev.name.value
    elif bit == F.HEADER_BUILD_ID:
        h.build_ids.extend(parse_build_ids(L, data, path, offset))
    elif bit == F.HEADER_BPF_PROG_INFO:
        for p in parse_bpf_prog_info(L, data, path, offset):
            h.bpf_progs[int(p.info["id"])] = p
    elif bit == F.HEADER_BPF_BTF:
        h.btfs.update(parse_bpf_btf(L, data, path, offset))


FEATURE_STRINGS = {
    F.HEADER_HOSTNAME: "hostname",
    F.HEADER_OSRELEASE: "osrelease",
    F.HEADER_VERSION: "version",
    F.HEADER_ARCH: "arch",
}


def parse_build_ids(L: F.PerfDataLayouts, data: bytes, path: str, offset: int) -> list[BuildId]:
    """HEADER_BUILD_ID: perf_record_header_build_id records back to back."""
    out = []
    pos = 0
    while pos + 8 <= len(data):
        _, misc, size = struct.unpack_from("<IHH" if L.little else ">IHH", data, pos)
        if size < 8 + 28 or pos + size > len(data):
            raise FormatError(path, offset + pos, f"build id record of size {size}")
        b = parse_at(L.build_id, data[pos + 8 : pos + size], path, offset + pos, "build id")
        n = b.size if misc & F.MISC_BUILD_ID_SIZE and 0 < b.size <= 20 else 20
        raw = b.build_id[:n]
        if not misc & F.MISC_BUILD_ID_SIZE:
            raw = raw.rstrip(b"\0") or raw
        out.append(BuildId(b.pid, raw.hex(), b.filename))
        pos += size
    return out


def parse_bpf_prog_info(
    L: F.PerfDataLayouts, data: bytes, path: str, offset: int
) -> list[BpfProgInfo]:
    """HEADER_BPF_PROG_INFO: u32 count, then struct perf_bpil entries.

    Entries hold info_len bytes of bpf_prog_info as the writing perf knew it (older or
    newer than ours) and data_len bytes of arrays whose pointers were made relative.
    Some perf versions left the count out; a count that does not add up is retried as
    "entries until the end".
    """
    n = struct.unpack_from("<I" if L.little else ">I", data, 0)[0] if len(data) >= 4 else 0
    try:
        return _bpil_entries(L, data, 4, n, path, offset)
    except FormatError as first:
        try:
            return _bpil_entries(L, data, 0, None, path, offset)
        except FormatError:
            raise first from None


def _bpil_entries(
    L: F.PerfDataLayouts, data: bytes, pos: int, count: int | None, path: str, offset: int
) -> list[BpfProgInfo]:
    bpil = struct_of(L.bpil)[0]  # info_len, data_len, arrays
    out: list[BpfProgInfo] = []
    while (count is None and pos < len(data)) or (count is not None and len(out) < count):
        if pos + bpil.size > len(data):
            raise FormatError(path, offset + pos, "truncated bpf_prog_info entry")
        info_len, data_len, have = bpil.unpack_from(data, pos)
        if info_len < 8 or info_len > 4096 or data_len > len(data):
            raise FormatError(path, offset + pos, f"bpf_prog_info of {info_len} bytes")
        ipos = pos + bpil.size
        dpos = ipos + info_len
        if dpos + data_len > len(data):
            raise FormatError(path, offset + pos, "bpf_prog_info arrays run past the section")
        info = prog_info_values(data[ipos:dpos], L.little)
        arrays = data[dpos : dpos + data_len]
        out.append(_bpil_arrays(L, info, have, arrays))
        pos = dpos + data_len
    if count is not None and pos != len(data):
        raise FormatError(path, offset + pos, "bpf_prog_info count does not match the section")
    return out


def _bpil_arrays(
    L: F.PerfDataLayouts, info: dict[str, Any], have: int, arrays: bytes
) -> BpfProgInfo:
    e = "<" if L.little else ">"
    p = BpfProgInfo(info=info)

    def take(bit: int, ptr: str, n: int, itemsize: int) -> bytes | None:
        if not have >> bit & 1:
            return None
        start = int(info[ptr])
        if n <= 0 or itemsize <= 0 or start + n * itemsize > len(arrays):
            return None
        return arrays[start : start + n * itemsize]

    b = take(F.BPIL_JITED_KSYMS, "jited_ksyms", info["nr_jited_ksyms"], 8)
    if b:
        p.jited_ksyms = list(struct.unpack(f"{e}{len(b) // 8}Q", b))
    b = take(F.BPIL_JITED_FUNC_LENS, "jited_func_lens", info["nr_jited_func_lens"], 4)
    if b:
        p.jited_func_lens = list(struct.unpack(f"{e}{len(b) // 4}I", b))
    b = take(F.BPIL_PROG_TAGS, "prog_tags", info["nr_prog_tags"], 8)
    if b:
        p.prog_tags = [b[k : k + 8] for k in range(0, len(b), 8)]
    rs = int(info["func_info_rec_size"])
    b = take(F.BPIL_FUNC_INFO, "func_info", info["nr_func_info"], rs)
    if b and rs >= 8:
        p.func_info = [struct.unpack_from(f"{e}II", b, k) for k in range(0, len(b), rs)]
    rs = int(info["line_info_rec_size"])
    b = take(F.BPIL_LINE_INFO, "line_info", info["nr_line_info"], rs)
    if b and rs >= 16:
        p.line_info = [struct.unpack_from(f"{e}IIII", b, k) for k in range(0, len(b), rs)]
    rs = int(info["jited_line_info_rec_size"])
    b = take(F.BPIL_JITED_LINE_INFO, "jited_line_info", info["nr_jited_line_info"], rs)
    if b and rs == 8:
        p.jited_line_info = list(struct.unpack(f"{e}{len(b) // 8}Q", b))
    return p


def parse_bpf_btf(L: F.PerfDataLayouts, data: bytes, path: str, offset: int) -> dict[int, bytes]:
    """HEADER_BPF_BTF: u32 count, then (u32 id, u32 size, size bytes of BTF) entries."""
    if len(data) < 4:
        raise FormatError(path, offset, "truncated BPF BTF section")
    n = struct.unpack_from("<I" if L.little else ">I", data, 0)[0]
    pos = 4
    out = {}
    for _ in range(n):
        if pos + 8 > len(data):
            raise FormatError(path, offset + pos, "truncated BTF entry")
        bid, size = struct.unpack_from("<II" if L.little else ">II", data, pos)
        if pos + 8 + size > len(data):
            raise FormatError(path, offset + pos, f"BTF {bid} of {size} bytes past the section")
        out[bid] = data[pos + 8 : pos + 8 + size]
        pos += 8 + size
    return out
