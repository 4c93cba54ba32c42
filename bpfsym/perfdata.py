"""A streaming perf.data reader: file and pipe mode, both byte orders, compressed records.

Layouts come from bpfsym.formats.perfdata; the per-sample hot path uses a
struct.Struct derived from that declaration (see ``struct_of``). The data is
read in chunks and never held whole: memory stays bounded by the largest record
plus what callers aggregate.
"""

from __future__ import annotations

import io
import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from construct import Construct, ConstructError, Struct

from .formats import perf as K
from .formats import perfdata as F
from .formats import struct_of
from .formats.bpf import prog_info_values
from .formats.errors import FormatError

CHUNK = 1 << 20
MAX_RECORD = 1 << 16  # header.size is a u16
SOFTWARE_EVENT_NAMES = [
    "cpu-clock", "task-clock", "page-faults", "context-switches", "cpu-migrations",
    "minor-faults", "major-faults", "alignment-faults", "emulation-faults", "dummy",
    "bpf-output", "cgroup-switches",
]  # fmt: skip
# records whose kernel header.size may be inflated by other listeners' id_header_size
# (perf_event_ksymbol_output, perf_event_bpf_output, perf_event_text_poke_output add it to
# one shared header): their sample_id sits right after the body, not at the record's end
TRAILER_AFTER_BODY = (K.RECORD_KSYMBOL, K.RECORD_BPF_EVENT, K.RECORD_TEXT_POKE)


def field_offsets(decl: Struct) -> dict[str, int]:
    """Byte offset of each named field of a construct Struct of fixed-size fields."""
    out = {}
    pos = 0
    for sc in decl.subcons:
        if sc.name:
            out[sc.name] = pos
        pos += sc.sizeof()
    return out


def parse_at(decl: Construct, data: bytes, path: str, offset: int, what: str) -> Any:
    """Parse with construct, turning any failure into FormatError at offset."""
    try:
        return decl.parse(data)
    except (ConstructError, UnicodeDecodeError, ValueError, OverflowError) as e:
        raise FormatError(path, offset, f"bad {what}: {str(e).splitlines()[0][:120]}") from None


@dataclass
class EventAttr:
    """One event of the file (a perf_event_attr) and what the reader derived from it."""

    index: int
    attr: Any  # the parsed perf_event_attr (construct Container)
    ids: list[int]
    name: str = ""
    sample_type: int = 0
    read_format: int = 0
    sample_id_all: bool = False
    prefix: struct.Struct = field(default_factory=lambda: struct.Struct("<"))
    fields: tuple[str, ...] = ()
    trailer: struct.Struct = field(default_factory=lambda: struct.Struct("<"))
    trailer_fields: tuple[str, ...] = ()
    read_size: int | None = 0  # bytes of SAMPLE_READ; None: group read, size varies

    @property
    def type(self) -> int:
        return int(self.attr.type)

    @property
    def config(self) -> int:
        return int(self.attr.config)


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


class PerfData:
    """A perf.data file (or pipe-mode stream) opened for one streaming pass."""

    def __init__(self, path: str, stream: IO[bytes] | None = None) -> None:
        self.path = path
        self._f: IO[bytes] = stream if stream is not None else open(path, "rb")  # noqa: SIM115
        self.attrs: list[EventAttr] = []
        self.id_to_attr: dict[int, EventAttr] = {}
        self.header = Header()
        self.data_offset = 0
        self.data_size: int | None = None
        self.file_size: int | None = None
        self.compressed_records = 0
        self._map: mmap.mmap | None = None
        self._layout_changed()
        try:
            self._read_header()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # numpy views of it are still alive: the garbage collector unmaps it
            self._map = None
        self._f.close()

    def __enter__(self) -> PerfData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- header ----------------------------------------------------------

    def _read_header(self) -> None:
        head = self._f.read(16)
        if len(head) < 16:
            raise FormatError(self.path, len(head), "truncated perf.data header")
        magic = head[:8]
        if magic == F.MAGIC_LE:
            self.little = True
        elif magic == F.MAGIC_BE:
            self.little = False
        else:
            raise FormatError(self.path, 0, f"not a perf.data file (magic {magic!r})")
        self.L = F.perfdata_layouts(self.little)
        self.u64 = struct.Struct("<Q" if self.little else ">Q")
        self.hdr = struct.Struct("<IHH" if self.little else ">IHH")
        size = self.u64.unpack_from(head, 8)[0]
        if size == F.PIPE_HEADER_SIZE:
            self.pipe = True
            self.data_offset = 16
            return
        if size != F.FILE_HEADER_SIZE:
            raise FormatError(self.path, 8, f"unknown perf.data header size {size}")
        self.pipe = False
        rest = self._f.read(F.FILE_HEADER_SIZE - 16)
        if len(rest) < F.FILE_HEADER_SIZE - 16:
            raise FormatError(self.path, 16 + len(rest), "truncated perf.data header")
        fh = parse_at(self.L.file_header, head + rest, self.path, 0, "perf.data header")
        self._f.seek(0, 2)
        self.file_size = self._f.tell()
        for what, sec in (("attrs", fh.attrs), ("data", fh.data)):
            if sec.offset + sec.size > self.file_size:
                raise FormatError(
                    self.path, sec.offset, f"{what} section runs past the end of the file"
                )
        self.data_offset = fh.data.offset
        self.data_size = fh.data.size
        self._read_attrs(fh)
        self._read_features(fh)
        self._f.seek(self.data_offset)

    def _read_attrs(self, fh: Any) -> None:
        # attr_size is that of struct perf_file_attr: the attr plus its ids section
        entry = fh.attr_size
        attr_size = entry - 16
        if attr_size < 64 or attr_size > 4096 or fh.attrs.size % entry:
            raise FormatError(self.path, 16, f"bad attr size {entry}")
        self._f.seek(fh.attrs.offset)
        raw = self._f.read(fh.attrs.size)
        for i in range(fh.attrs.size // entry):
            off = fh.attrs.offset + i * entry
            a = raw[i * entry : i * entry + attr_size]
            ids_off, ids_size = struct.unpack_from(
                "<QQ" if self.little else ">QQ", raw, i * entry + attr_size
            )
            if ids_size % 8 or ids_off + ids_size > (self.file_size or 0):
                raise FormatError(self.path, off + attr_size, "attr ids run past the file")
            self._f.seek(ids_off)
            ids = list(struct.unpack(f"{'<' if self.little else '>'}{ids_size // 8}Q",
                                     self._f.read(ids_size)))  # fmt: skip
            self._add_attr(a, ids, off)

    def _add_attr(self, raw: bytes, ids: list[int], offset: int) -> EventAttr:
        size = len(raw)
        padded = raw[: K.PERF_ATTR_SIZE_VER8].ljust(K.PERF_ATTR_SIZE_VER8, b"\0")
        a = parse_at(self.L.kernel.attr, padded, self.path, offset, "perf_event_attr")
        if size < 64:
            raise FormatError(self.path, offset, f"perf_event_attr too small ({size})")
        ev = EventAttr(index=len(self.attrs), attr=a, ids=ids)
        ev.sample_type = int(a.sample_type)
        ev.read_format = int(a.read_format)
        ev.sample_id_all = bool(a.flags.sample_id_all)
        ev.prefix, ev.fields = struct_of(self.L.sample_prefix(ev.sample_type))
        ev.trailer, ev.trailer_fields = struct_of(self.L.kernel.sample_id(ev.sample_type))
        if ev.sample_type & K.SAMPLE_READ:
            if ev.read_format & F.FORMAT_GROUP:
                ev.read_size = None
            else:
                ev.read_size = self.L.read_value(ev.read_format).sizeof()
        if a.type == K.PERF_TYPE_SOFTWARE and a.config < len(SOFTWARE_EVENT_NAMES):
            ev.name = SOFTWARE_EVENT_NAMES[a.config]
        else:
            ev.name = f"type{a.type}:config{a.config:#x}"
        self.attrs.append(ev)
        for i in ids:
            self.id_to_attr[i] = ev
        self._layout_changed()
        return ev

    def _layout_changed(self) -> None:
        """Work out where the event id sits in samples and trailers once attrs are known."""
        types = {a.sample_type for a in self.attrs}
        self.single = len(self.attrs) == 1
        self.same_layout = len(types) == 1  # one sample_id trailer layout for every record
        st = self.attrs[0].sample_type if self.attrs else 0
        # perf_evlist__id_pos / is_pos: IDENTIFIER is first in samples, last in trailers
        if st & K.SAMPLE_IDENTIFIER:
            self.sample_id_pos: int | None = 0
            self.trailer_id_pos: int | None = 8
        elif st & K.SAMPLE_ID:
            self.sample_id_pos = 8 * sum(
                1 for b in (K.SAMPLE_IP, K.SAMPLE_TID, K.SAMPLE_TIME, K.SAMPLE_ADDR) if st & b
            )
            self.trailer_id_pos = 8 * (
                1 + sum(1 for b in (K.SAMPLE_STREAM_ID, K.SAMPLE_CPU) if st & b)
            )
        else:
            self.sample_id_pos = self.trailer_id_pos = None

    def _read_features(self, fh: Any) -> None:
        bits = [
            n * 64 + b for n, word in enumerate(fh.features) for b in range(64) if word >> b & 1
        ]
        table_off = self.data_offset + (self.data_size or 0)
        self._f.seek(table_off)
        table = self._f.read(16 * len(bits))
        if len(table) < 16 * len(bits):
            raise FormatError(self.path, table_off + len(table), "feature table truncated")
        fmt = "<QQ" if self.little else ">QQ"
        for i, bit in enumerate(bits):
            off, size = struct.unpack_from(fmt, table, 16 * i)
            if off + size > (self.file_size or 0):
                raise FormatError(
                    self.path, table_off + 16 * i, f"feature {bit} runs past the end of the file"
                )
            if bit not in WANTED_FEATURES:
                self.header.features.add(bit)
                continue
            self._f.seek(off)
            self.feature(bit, self._f.read(size), off)

    def feature(self, bit: int, data: bytes, offset: int) -> None:
        """Take in one feature section (from the file's table or a HEADER_FEATURE record)."""
        self.header.features.add(bit)
        try:
            parse_feature(self.header, self.L, bit, data, self.path, offset)
        except FormatError as e:
            self.header.warnings.append(f"feature {bit} unreadable: {e}")
            return
        for ev in self.attrs:
            for i in ev.ids:
                name = self.header.event_names.get(i)
                if name:
                    ev.name = name

    # ---- records ---------------------------------------------------------

    def records(self) -> Iterator[tuple[int, int, bytes, int, int, int]]:
        """Yield (type, misc, buf, start, size, file_offset) for every record, in file order.

        buf[start:start+size] is the whole record, header included. Pipe-mode HEADER_ATTR
        and HEADER_FEATURE records are taken in (and still yielded); COMPRESSED records
        are replaced by the records they hold.
        """
        f = self._f
        hdr = self.hdr.unpack_from
        end = None if self.data_size is None else self.data_offset + self.data_size
        pos_file = self.data_offset  # file offset of buf[0]
        buf = b""
        n = i = 0
        inflater = None
        eof = False
        special = SPECIAL_RECORDS
        while True:
            if i + 8 <= n:
                rtype, misc, size = hdr(buf, i)
                if i + size <= n:
                    if size < 8:
                        raise FormatError(self.path, pos_file + i, f"record size {size} too small")
                    if rtype in special:
                        off = pos_file + i
                        if rtype == F.RECORD_COMPRESSED or rtype == F.RECORD_COMPRESSED2:
                            if inflater is None:
                                inflater = _Inflater(self)
                            yield from inflater.feed(buf, i, size, rtype, off)
                            i += size
                            continue
                        if rtype == F.RECORD_HEADER_ATTR:
                            self._header_attr(buf, i, size, off)
                        elif rtype == F.RECORD_HEADER_FEATURE:
                            self._header_feature(buf, i, size, off)
                        elif rtype == F.RECORD_ID_INDEX:
                            self._id_index(buf, i, size, off)
                    yield rtype, misc, buf, i, size, pos_file + i
                    i += size
                    continue
            if eof:
                if i < n:
                    raise FormatError(
                        self.path, pos_file + i, "truncated record at the end of the data"
                    )
                break
            want = CHUNK if end is None else min(CHUNK, end - pos_file - n)
            more = f.read(want) if want > 0 else b""
            if len(more) < want or not more:
                eof = True
                if end is not None and len(more) < want:
                    raise FormatError(self.path, pos_file + n + len(more), "data section truncated")
            pos_file += i
            buf = buf[i:] + more
            n = len(buf)
            i = 0
        if inflater is not None:
            inflater.finish()

    def _header_attr(self, buf: bytes, i: int, size: int, off: int) -> None:
        # struct attr_event { header; perf_event_attr attr (attr.size bytes); u64 id[]; }
        if size < 16:
            raise FormatError(self.path, off, "HEADER_ATTR too small")
        asize = struct.unpack_from("<I" if self.little else ">I", buf, i + 12)[0]
        if asize < 64 or 8 + asize > size:
            raise FormatError(self.path, off, f"HEADER_ATTR attr size {asize}")
        n = (size - 8 - asize) // 8
        ids = list(struct.unpack_from(f"{'<' if self.little else '>'}{n}Q", buf, i + 8 + asize))
        self._add_attr(bytes(buf[i + 8 : i + 8 + asize]), ids, off)

    def _header_feature(self, buf: bytes, i: int, size: int, off: int) -> None:
        if size < 16:
            raise FormatError(self.path, off, "HEADER_FEATURE too small")
        bit = self.u64.unpack_from(buf, i + 8)[0]
        if bit in WANTED_FEATURES:
            self.feature(bit, bytes(buf[i + 16 : i + size]), off + 16)
        else:
            self.header.features.add(bit)

    def _id_index(self, buf: bytes, i: int, size: int, off: int) -> None:
        if size < 16:
            raise FormatError(self.path, off, "ID_INDEX too small")
        nr = self.u64.unpack_from(buf, i + 8)[0]
        if 16 + nr * 32 > size:
            raise FormatError(self.path, off, f"ID_INDEX with {nr} entries in {size} bytes")
        # entries map ids to cpus/threads; the attr of each id is already known from attrs

    # ---- bulk access (numpy) ---------------------------------------------

    def bulk(self, np: Any) -> BulkData | None:
        """The data section as numpy views for locating records in bulk, or None.

        Only a regular file whose data section is a whole number of u64 words can be
        mapped so; pipes and streams use records().
        """
        if self.pipe or self.data_size is None or self.data_size % 8:
            return None
        try:
            fd = self._f.fileno()
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return None
        return BulkData(self, np, self._map)

    # ---- decoding single records ----------------------------------------

    def attr_of_sample(self, buf: bytes, start: int, size: int) -> EventAttr:
        if not self.attrs:
            raise FormatError(self.path, start, "sample before any event attr")
        if self.single:
            return self.attrs[0]
        pos = self.sample_id_pos
        if pos is None or 8 + pos + 8 > size:
            return self.attrs[0]
        ev = self.id_to_attr.get(self.u64.unpack_from(buf, start + 8 + pos)[0])
        return ev if ev is not None else self.attrs[0]

    def attr_of_trailer(self, buf: bytes, end: int) -> EventAttr | None:
        """The attr whose sample_id trailer ends at buf[end] (None if ambiguous/unknown)."""
        if not self.attrs:
            return None
        if self.same_layout:
            return self.attrs[0]
        pos = self.trailer_id_pos
        if pos is None:
            return self.attrs[0]
        return self.id_to_attr.get(self.u64.unpack_from(buf, end - pos)[0])

    def trailer(
        self, buf: bytes, start: int, size: int, rtype: int, body_size: int
    ) -> dict[str, int] | None:
        """The sample_id trailer of a non-sample record, or None when the file has none."""
        ev = self.attrs[0] if self.attrs else None
        if ev is None or not ev.sample_id_all or not ev.trailer.size:
            return None
        if rtype in TRAILER_AFTER_BODY:
            tstart = start + 8 + body_size
            if not self.same_layout:
                for cand in self.attrs:
                    if tstart + cand.trailer.size <= start + size:
                        got = self.attr_of_trailer(buf, tstart + cand.trailer.size)
                        if got is cand:
                            ev = cand
                            break
        else:
            got = self.attr_of_trailer(buf, start + size)
            if got is not None:
                ev = got
            tstart = start + size - ev.trailer.size
        if tstart < start + 8 or tstart + ev.trailer.size > start + size:
            return None
        return dict(zip(ev.trailer_fields, ev.trailer.unpack_from(buf, tstart), strict=False))

    def callchain(self, ev: EventAttr, buf: bytes, start: int, size: int) -> tuple[int, ...]:
        """The callchain of a sample (ev must have SAMPLE_CALLCHAIN)."""
        pos = start + 8 + ev.prefix.size
        if ev.read_size is None:
            pos += self._group_read_size(ev, buf, pos)
        else:
            pos += ev.read_size
        end = start + size
        if pos + 8 > end:
            raise FormatError(self.path, start, "sample callchain runs past the record")
        nr = self.u64.unpack_from(buf, pos)[0]
        if pos + 8 + 8 * nr > end:
            raise FormatError(self.path, start, f"callchain of {nr} entries past the record")
        return struct.unpack_from(f"{'<' if self.little else '>'}{nr}Q", buf, pos + 8)

    def _group_read_size(self, ev: EventAttr, buf: bytes, pos: int) -> int:
        nr = self.u64.unpack_from(buf, pos)[0]
        rf = ev.read_format
        times = (rf & F.FORMAT_TOTAL_TIME_ENABLED != 0) + (rf & F.FORMAT_TOTAL_TIME_RUNNING != 0)
        per = 1 + (rf & F.FORMAT_ID != 0) + (rf & F.FORMAT_LOST != 0)
        return 8 * (1 + times + per * nr)

    def sample_decl(self, ev: EventAttr) -> Struct:
        a = ev.attr
        return self.L.sample(
            ev.sample_type,
            ev.read_format,
            int(a.branch_sample_type),
            int(a.sample_regs_user),
            int(a.sample_regs_intr),
        )

    def parse_sample(self, buf: bytes, start: int, size: int, off: int) -> Any:
        """A whole sample via construct (slow path: every field, validated against the size)."""
        ev = self.attr_of_sample(buf, start, size)
        body = bytes(buf[start + 8 : start + size])
        s = parse_at(self.sample_decl(ev), body, self.path, off, "sample")
        return s


SPECIAL_RECORDS = frozenset(
    (
        F.RECORD_COMPRESSED,
        F.RECORD_COMPRESSED2,
        F.RECORD_HEADER_ATTR,
        F.RECORD_HEADER_FEATURE,
        F.RECORD_ID_INDEX,
    )
)
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


class _Inflater:
    """Decompresses PERF_RECORD_COMPRESSED(2) payloads: one zstd stream for the whole file.

    perf compresses with one ZSTD stream flushed per record, so a record of the
    decompressed stream may straddle two compressed records.
    """

    def __init__(self, pd: PerfData) -> None:
        try:
            import zstandard
        except ImportError:
            raise FormatError(
                pd.path, 0, "compressed perf.data (perf record -z) needs the zstandard package"
            ) from None
        self.pd = pd
        self.zd = zstandard.ZstdDecompressor()
        self.zerror = zstandard.ZstdError
        self.obj: Any = None
        self.pending = b""
        self.last_off = 0

    def _decompress(self, data: bytes, off: int) -> bytes:
        out = []
        try:
            while data:
                if self.obj is None:
                    self.obj = self.zd.decompressobj()
                out.append(self.obj.decompress(data))
                if getattr(self.obj, "eof", False):
                    data = self.obj.unused_data
                    self.obj = None
                else:
                    data = b""
        except self.zerror as e:
            raise FormatError(self.pd.path, off, f"bad compressed record: {e}") from None
        return b"".join(out)

    def feed(
        self, buf: bytes, i: int, size: int, rtype: int, off: int
    ) -> Iterator[tuple[int, int, bytes, int, int, int]]:
        pd = self.pd
        if rtype == F.RECORD_COMPRESSED2:
            if size < 16:
                raise FormatError(pd.path, off, "COMPRESSED2 record too small")
            n = pd.u64.unpack_from(buf, i + 8)[0]
            if 16 + n > size:
                raise FormatError(pd.path, off, f"COMPRESSED2 data_size {n} > record")
            payload = bytes(buf[i + 16 : i + 16 + n])
        else:
            payload = bytes(buf[i + 8 : i + size])
        pd.compressed_records += 1
        data = self.pending + self._decompress(payload, off)
        self.last_off = off
        hdr = pd.hdr.unpack_from
        j = 0
        while len(data) - j >= 8:
            rt, misc, sz = hdr(data, j)
            if sz < 8:
                raise FormatError(pd.path, off, f"decompressed record size {sz} too small")
            if len(data) - j < sz:
                break
            if rt == F.RECORD_COMPRESSED or rt == F.RECORD_COMPRESSED2:
                raise FormatError(pd.path, off, "compressed record inside a compressed record")
            if rt == F.RECORD_HEADER_ATTR:
                pd._header_attr(data, j, sz, off)
            elif rt == F.RECORD_HEADER_FEATURE:
                pd._header_feature(data, j, sz, off)
            yield rt, misc, data, j, sz, off
            j += sz
        self.pending = data[j:]

    def finish(self) -> None:
        if self.pending:
            raise FormatError(self.pd.path, self.last_off, "compressed data ends inside a record")


class NotBulk(Exception):
    """The data section needs the record-by-record reader (unusual records, bad sizes)."""


class BulkData:
    """numpy views of a mapped data section and a walk over it in windows of records.

    Records of perf.data written by perf are u64-aligned (the kernel and perf pad every
    record to 8), so a record header is a u64 word whose size half-word is a multiple of
    8: the words that qualify are found at once and the chain of records through them
    is checked, falling back to walking record by record where it does not hold.
    """

    def __init__(self, pd: PerfData, np: Any, buf: mmap.mmap) -> None:
        self.pd = pd
        self.np = np
        self.buf = buf
        e = "<" if pd.little else ">"
        off = pd.data_offset
        n = (pd.data_size or 0) // 8
        self.nwords = n
        self.base = off  # file offset of word 0
        self.u64 = np.frombuffer(buf, dtype=e + "u8", count=n, offset=off)
        self.u32 = np.frombuffer(buf, dtype=e + "u4", count=2 * n, offset=off)
        self.u16 = np.frombuffer(buf, dtype=e + "u2", count=4 * n, offset=off)
        self._heads: dict[int, Any] = {}

    def heads(self, words: int) -> Any:
        """A read-only (records, words) view: row i is the words from word i on, so that
        rows[starts] gathers each record's first words in one go."""
        got = self._heads.get(words)
        if got is None:
            got = self._heads[words] = self.np.lib.stride_tricks.sliding_window_view(
                self.u64, words
            )
        return got

    def windows(self, window: int | list[int] = 32 << 20) -> Iterator[Any]:
        """Yield, per stretch of about window bytes, the word index of each record (int64).

        window may be a list: the size of each stretch in turn, the last one repeated."""
        sizes = window if isinstance(window, list) else [window]
        n = self.nwords
        pos = 0
        j = 0
        while pos < n:
            step = max(sizes[min(j, len(sizes) - 1)] // 8, 1)
            j += 1
            hi = min(n, pos + step)
            offs = self._chain(pos, hi)
            if offs is None:
                offs = self._walk(pos, hi)
            last = int(offs[-1])
            pos = last + int(self.u16[4 * last + 3]) // 8
            if pos > n:
                raise NotBulk("the last record runs past the data section")
            yield offs
        if pos != n:
            raise NotBulk("records do not end at the end of the data section")

    def _chain(self, pos: int, hi: int) -> Any:
        """Record starts in [pos, hi) found in bulk, or None when the chain does not check."""
        np = self.np
        look = min(self.nwords, hi + (F_MAX_RECORD_WORDS))
        sizes = self.u16[4 * pos + 3 : 4 * look : 4]
        cand = np.flatnonzero((sizes >= 8) & ((sizes & 7) == 0))
        if not len(cand) or cand[0] != 0:
            return None
        cand += pos
        types = self.u32[2 * cand]
        cand = cand[(types > 0) & (types < 128)]
        nxt = cand + (self.u16[4 * cand + 3] // 8).astype(np.int64)
        mark = np.zeros(look - pos + 1, dtype=bool)
        for _ in range(8):
            inside = cand < hi
            c, x = cand[inside], nxt[inside]
            if len(c) and c[0] == pos and bool(np.all(x[:-1] == c[1:])):
                return c
            # a word no record points at is no record (unless it is the first)
            mark[:] = False
            mark[np.minimum(nxt, look) - pos] = True
            mark[0] = True
            pointed = mark[cand - pos]
            if bool(pointed.all()):
                return None
            cand, nxt = cand[pointed], nxt[pointed]
        return None

    def _walk(self, pos: int, hi: int) -> Any:
        sizes = self.u16
        out: list[int] = []
        add = out.append
        n = self.nwords
        while pos < hi:
            size = int(sizes[4 * pos + 3])
            if size < 8 or size & 7 or pos + size // 8 > n:
                raise NotBulk("a record of odd or too small size")
            add(pos)
            pos += size // 8
        return self.np.array(out, dtype=self.np.int64)


F_MAX_RECORD_WORDS = MAX_RECORD // 8
