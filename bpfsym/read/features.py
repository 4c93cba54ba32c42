"""perf.data feature sections (file mode) and HEADER_FEATURE records (pipe mode): host
strings, cmdline, event names, build ids, BPF_PROG_INFO and BPF_BTF.

Layouts from bpfsym.formats.perfdata (tools/perf/util/header.c writes them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from construct import Construct, ConstructError

from bpfsym.errors import FormatError
from bpfsym.formats import integers, struct_of
from bpfsym.formats import perfdata as F
from bpfsym.formats.bpf import prog_info_values


def parse_at(decl: Construct, data: bytes, path: str, offset: int, what: str) -> Any:
    """Parse with construct, turning any failure into FormatError at offset."""
    try:
        return decl.parse(data)
    except (ConstructError, UnicodeDecodeError, ValueError, OverflowError) as e:
        raise FormatError(path, offset, f"bad {what}: {str(e).splitlines()[0][:120]}") from None


@dataclass(repr=False, eq=False)
class BuildId:
    pid: int
    build_id: str  # hex
    filename: str


@dataclass(repr=False, eq=False)
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
    # per program id, its bpf_prog_info and arrays as the blobs a side file stores them
    # (read.proginfo.program_from_blobs makes the Program)
    bpf_progs: dict[int, dict[str, bytes]] = field(default_factory=dict)
    btfs: dict[int, bytes] = field(default_factory=dict)
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
    F.HEADER_TRACING_DATA,
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
    elif bit == F.HEADER_BUILD_ID:
        h.build_ids.extend(parse_build_ids(L, data, path, offset))
    elif bit == F.HEADER_BPF_PROG_INFO:
        for blobs in parse_bpf_prog_info(L, data, path, offset):
            h.bpf_progs[int(prog_info_values(blobs["info"], L.little)["id"])] = blobs
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
        _, misc, size = L.kernel.fast.header.unpack_from(data, pos)
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
) -> list[dict[str, bytes]]:
    """HEADER_BPF_PROG_INFO: u32 count, then struct perf_bpil entries, each as the blobs
    of a side file's PROGRAM record ("info" and the arrays perf kept).

    Entries hold info_len bytes of bpf_prog_info as the writing perf knew it (older or
    newer than ours) and data_len bytes of arrays whose pointers were made relative.
    Some perf versions left the count out; a count that does not add up is retried as
    "entries until the end".
    """
    n = integers(L.little).u32.unpack_from(data, 0)[0] if len(data) >= 4 else 0
    try:
        return _bpil_entries(L, data, 4, n, path, offset)
    except FormatError as first:
        try:
            return _bpil_entries(L, data, 0, None, path, offset)
        except FormatError:
            raise first from None


def _bpil_entries(
    L: F.PerfDataLayouts, data: bytes, pos: int, count: int | None, path: str, offset: int
) -> list[dict[str, bytes]]:
    bpil = struct_of(L.bpil)[0]  # info_len, data_len, arrays
    out: list[dict[str, bytes]] = []
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
        out.append(_bpil_arrays(info, have, arrays, data[ipos:dpos]))
        pos = dpos + data_len
    if count is not None and pos != len(data):
        raise FormatError(path, offset + pos, "bpf_prog_info count does not match the section")
    return out


# perf_bpil array bit -> (side-file blob name, bpf_prog_info pointer, count, least record size)
BPIL_BLOBS = (
    (F.BPIL_JITED_INSNS, "jited", "jited_prog_insns", "jited_prog_len", 1),
    (F.BPIL_XLATED_INSNS, "xlated", "xlated_prog_insns", "xlated_prog_len", 1),
    (F.BPIL_MAP_IDS, "map_ids", "map_ids", "nr_map_ids", 4),
    (F.BPIL_JITED_KSYMS, "ksyms", "jited_ksyms", "nr_jited_ksyms", 8),
    (F.BPIL_JITED_FUNC_LENS, "func_lens", "jited_func_lens", "nr_jited_func_lens", 4),
    (F.BPIL_PROG_TAGS, "prog_tags", "prog_tags", "nr_prog_tags", 8),
    (F.BPIL_FUNC_INFO, "func_info", "func_info", "nr_func_info", "func_info_rec_size"),
    (F.BPIL_LINE_INFO, "line_info", "line_info", "nr_line_info", "line_info_rec_size"),
    (F.BPIL_JITED_LINE_INFO, "jited_line_info", "jited_line_info", "nr_jited_line_info",
     "jited_line_info_rec_size"),
)  # fmt: skip
LEAST_RECORD = {"func_info": 8, "line_info": 16, "jited_line_info": 8}  # bpf_func_info, ...


def _bpil_arrays(info: dict[str, Any], have: int, arrays: bytes, raw: bytes) -> dict[str, bytes]:
    """The blobs of one perf_bpil entry: perf made each array pointer of the info an offset
    into the arrays that follow it (tools/perf/util/bpf-utils.c, get_bpf_prog_info_linear)."""
    out = {"info": raw}
    for bit, name, ptr, count, rec in BPIL_BLOBS:
        size = int(info[rec]) if isinstance(rec, str) else rec
        if not have >> bit & 1 or size < LEAST_RECORD.get(name, 1):
            continue
        if name == "jited_line_info" and size != 8:
            continue  # u64 addresses
        start, n = int(info[ptr]), int(info[count])
        if n <= 0 or start + n * size > len(arrays):
            continue
        out[name] = arrays[start : start + n * size]
    return out


def parse_bpf_btf(L: F.PerfDataLayouts, data: bytes, path: str, offset: int) -> dict[int, bytes]:
    """HEADER_BPF_BTF: u32 count, then (u32 id, u32 size, size bytes of BTF) entries."""
    if len(data) < 4:
        raise FormatError(path, offset, "truncated BPF BTF section")
    n = integers(L.little).u32.unpack_from(data, 0)[0]
    pos = 4
    out = {}
    for _ in range(n):
        if pos + 8 > len(data):
            raise FormatError(path, offset + pos, "truncated BTF entry")
        bid, size = struct_of(L.bpf_btf_entry)[0].unpack_from(data, pos)
        if pos + 8 + size > len(data):
            raise FormatError(path, offset + pos, f"BTF {bid} of {size} bytes past the section")
        out[bid] = data[pos + 8 : pos + 8 + size]
        pos += 8 + size
    return out
