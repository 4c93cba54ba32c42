"""A streaming perf.data reader: file and pipe mode, both byte orders, compressed records.

Layouts come from bpfsym.formats.perfdata; the per-sample hot path uses a
struct.Struct derived from that declaration (see ``struct_of``). The data is
read in chunks and never held whole: memory stays bounded by the largest record
plus what callers aggregate.
"""

from __future__ import annotations

import io
import mmap
from collections.abc import Callable, Iterator
from typing import IO, Any

from bpfsym.errors import FormatError
from bpfsym.formats import integers, struct_of
from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.read.bulk import BulkData
from bpfsym.read.event_names import (
    EVENT_UPDATE_NAME,
    EventNames,
    TracingDataError,
    event_desc_names,
    tracepoint_names,
)
from bpfsym.read.features import WANTED_FEATURES, Header, parse_at, parse_feature
from bpfsym.read.samples import EventAttr, SampleDecoder

CHUNK = 1 << 20

# takes an AUXTRACE record's trace: (record head, the bytes (pipe mode) or None, file offset)
AuxSink = Callable[[tuple[int, ...], "bytes | None", int], None]


class PerfData(SampleDecoder):
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
        self.names = EventNames()  # perf's naming, fed as the header and records arrive
        self._tracepoints: dict[int, str] | None = None
        # AUX-area tracing: AUXTRACE_INFO's (type, priv words) once read, and who takes
        # each AUXTRACE record's trace (aux_sink(head, data, file_offset): the bytes in
        # pipe mode, else None and where they are in the file)
        self.auxtrace_info: tuple[int, tuple[int, ...]] | None = None
        self.aux_sink: AuxSink | None = None
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
        self.section = struct_of(self.L.section)[0]  # perf_file_section: offset, size
        self._auxtrace = struct_of(self.L.auxtrace)[0]  # size, offset, reference, ...
        self._event_update_head = struct_of(self.L.event_update)[0]  # type, id
        self._auxtrace_info_head = struct_of(self.L.auxtrace_info)[0]  # type, reserved
        self.ints = integers(self.little)
        self.u64 = self.ints.u64
        self.hdr = K.layouts(self.little).fast.header  # type, misc, size
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
            ids_off, ids_size = self.section.unpack_from(raw, i * entry + attr_size)
            if ids_size % 8 or ids_off + ids_size > (self.file_size or 0):
                raise FormatError(self.path, off + attr_size, "attr ids run past the file")
            self._f.seek(ids_off)
            ids = list(self.ints.array("Q", ids_size // 8).unpack(self._f.read(ids_size)))
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
        ev.lbr_call_stack = bool(
            ev.sample_type & K.SAMPLE_BRANCH_STACK
            and ev.sample_type & K.SAMPLE_CALLCHAIN
            and int(a.branch_sample_type) & F.BRANCH_CALL_STACK
        )
        ev.prefix, ev.fields = struct_of(self.L.sample_prefix(ev.sample_type))
        ev.trailer, ev.trailer_fields = struct_of(self.L.kernel.sample_id(ev.sample_type))
        if ev.sample_type & K.SAMPLE_READ:
            if ev.read_format & F.FORMAT_GROUP:
                ev.read_size = None
            else:
                ev.read_size = self.L.read_value(ev.read_format).sizeof()
        self.attrs.append(ev)
        self.names.add_attr(a, ids)
        self._name_events()
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
        for i, bit in enumerate(bits):
            off, size = self.section.unpack_from(table, 16 * i)
            if off + size > (self.file_size or 0):
                raise FormatError(
                    self.path, table_off + 16 * i, f"feature {bit} runs past the end of the file"
                )
            if bit not in WANTED_FEATURES:
                self.header.features.add(bit)
                continue
            self._f.seek(off)
            self.feature(bit, self._f.read(size), off)
        # perf names tracepoints after all sections (header.c evsel__prepare_tracepoint_event)
        self.names.tracing_data(self._tracepoints)
        self._name_events()

    def feature(self, bit: int, data: bytes, offset: int) -> None:
        """Take in one feature section (from the file's table or a HEADER_FEATURE record)."""
        self.header.features.add(bit)
        if bit == F.HEADER_EVENT_DESC:
            # names by the events' position (header.c process_event_desc), not their ids
            self.names.event_desc(event_desc_names(data, self.little))
            self._name_events()
            return
        if bit == F.HEADER_TRACING_DATA:
            try:
                self._tracepoints = tracepoint_names(data)
            except TracingDataError as e:
                self.header.warnings.append(f"tracing data unreadable: {e}")
            return
        try:
            parse_feature(self.header, self.L, bit, data, self.path, offset)
        except FormatError as e:
            self.header.warnings.append(f"feature {bit} unreadable: {e}")

    def _name_events(self) -> None:
        """Every event's name as perf gives it, from what has been read so far."""
        for ev, name in zip(self.attrs, self.names.names(), strict=False):
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
                        elif rtype == F.RECORD_EVENT_UPDATE:
                            self._event_update(buf, i, size, off)
                        elif rtype == F.RECORD_AUXTRACE_INFO:
                            self._auxtrace_info(buf, i, size, off)
                        elif rtype in PAYLOAD_AFTER:
                            # bytes that follow the record outside header.size (session.c:
                            # the handler's return value moves the reading on)
                            extra = self._payload_size(rtype, buf, i, size, off)
                            if extra:
                                yield rtype, misc, buf, i, size, off
                                sink = self.aux_sink if rtype == F.RECORD_AUXTRACE else None
                                head = self._auxtrace.unpack_from(buf, i + 8) if sink else None
                                payload = self._payload(
                                    f, buf, i + size, n, extra, end, off + size,
                                    rtype == F.RECORD_HEADER_TRACING_DATA
                                    or (sink is not None and self.pipe),
                                )  # fmt: skip
                                if rtype == F.RECORD_HEADER_TRACING_DATA:
                                    self._tracing_data(payload)
                                elif sink is not None and head is not None:
                                    sink(head, payload if self.pipe else None, off + size)
                                if i + size + extra <= n:
                                    i += size + extra
                                    continue
                                pos_file = off + size + extra  # read past the buffer
                                buf, n, i = b"", 0, 0
                                continue
                    yield rtype, misc, buf, i, size, pos_file + i
                    i += size
                    continue
            if eof:
                if i < n:
                    self._cut(pos_file + i, n - i)
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

    def _cut(self, off: int, left: int) -> None:
        """The data ends inside a record. A pipe-mode stream is read up to the cut, as perf
        does ("unexpected end of event stream", session.c); a file's data section is not."""
        if not self.pipe:
            raise FormatError(self.path, off, "truncated record at the end of the data")
        self.header.warnings.append(
            f"the stream ends inside a record at offset {off} ({left} bytes of it): read up to there"
        )

    def _payload_size(self, rtype: int, buf: bytes, i: int, size: int, off: int) -> int:
        """How many bytes of AUXTRACE trace or pipe-mode tracing data follow the record."""
        if rtype == F.RECORD_AUXTRACE:
            if size < 8 + self._auxtrace.size:
                raise FormatError(self.path, off, "AUXTRACE record too small")
            return self._auxtrace.unpack_from(buf, i + 8)[0]
        if not self.pipe:
            return 0  # file mode: HEADER_TRACING_DATA is a feature section
        if size < 8 + 4:
            raise FormatError(self.path, off, "HEADER_TRACING_DATA record too small")
        return self.ints.u32.unpack_from(buf, i + 8)[0]

    def _payload(
        self, f: IO[bytes], buf: bytes, at: int, n: int, extra: int, end: int | None,
        file_at: int, keep: bool,
    ) -> bytes:  # fmt: skip
        """The `extra` bytes after a record, from buf[at] (file offset file_at) on: what is
        buffered, the rest read from f. Kept only when asked (tracing data, kilobytes);
        AUX trace (megabytes) is skipped."""
        if end is not None and file_at + extra > end:
            raise FormatError(self.path, file_at, f"{extra} bytes after a record run past the data")
        buffered = min(n - at, extra)
        got = bytearray(buf[at : at + buffered]) if keep else bytearray()
        need = extra - buffered
        while need > 0:
            chunk = f.read(min(need, CHUNK))
            if not chunk:
                self._cut(file_at, extra - need)  # pipe mode: read up to the cut
                break
            if keep:
                got += chunk
            need -= len(chunk)
        return bytes(got)

    def _auxtrace_info(self, buf: bytes, i: int, size: int, off: int) -> None:
        """PERF_RECORD_AUXTRACE_INFO: the trace type and its decoder's settings (priv[])."""
        body = 8 + self.L.auxtrace_info.sizeof()
        if size < body:
            raise FormatError(self.path, off, "AUXTRACE_INFO record too small")
        kind = self._auxtrace_info_head.unpack_from(buf, i + 8)[0]
        nwords = (size - body) // 8
        self.auxtrace_info = (kind, tuple(self.ints.array("Q", nwords).unpack_from(buf, i + body)))
        if kind != F.AUXTRACE_INTEL_PT:
            what = F.AUXTRACE_NAMES.get(kind, f"type {kind}")
            self.header.warnings.append(
                f"the {what} AUX-area trace is not decoded: perf report would add the"
                " events it synthesizes from it"
            )

    def auxtrace_buffers(self) -> list[tuple[tuple[int, ...], int]]:
        """Every AUXTRACE record of a file, read ahead as perf queues them all when it
        meets AUXTRACE_INFO (auxtrace.c auxtrace_queue_data): (its head: size, offset,
        reference, idx, tid, cpu, reserved; the file offset of its trace). The file is
        read through a second handle; this pass's position is not moved."""
        out: list[tuple[tuple[int, ...], int]] = []
        with PerfData(self.path) as ahead:

            def take(head: tuple[int, ...], _data: bytes | None, at: int) -> None:
                out.append((head, at))

            ahead.aux_sink = take
            for _ in ahead.records():
                pass
        return out

    def _event_update(self, buf: bytes, i: int, size: int, off: int) -> None:
        # PERF_RECORD_EVENT_UPDATE of type NAME names an event by id (pipe mode)
        body = 8 + self.L.event_update.sizeof()
        if size < body:
            raise FormatError(self.path, off, "EVENT_UPDATE record too small")
        etype, ident = self._event_update_head.unpack_from(buf, i + 8)
        if etype != EVENT_UPDATE_NAME:
            return
        raw = bytes(buf[i + body : i + size]).split(b"\0", 1)[0]
        if not self.names.event_update_name(ident, raw.decode("utf-8", "surrogateescape")):
            self.header.warnings.append(f"EVENT_UPDATE at offset {off} names an unknown event id")
        self._name_events()

    def _tracing_data(self, data: bytes) -> None:
        try:
            self.names.tracing_data(tracepoint_names(data))
        except TracingDataError as e:
            self.header.warnings.append(f"tracing data unreadable: {e}")
            self.names.tracing_data(None)
        self._name_events()

    def _header_attr(self, buf: bytes, i: int, size: int, off: int) -> None:
        # struct attr_event { header; perf_event_attr attr (attr.size bytes); u64 id[]; }
        if size < 16:
            raise FormatError(self.path, off, "HEADER_ATTR too small")
        asize = self.ints.u32.unpack_from(buf, i + 12)[0]  # attr.size
        if asize < 64 or 8 + asize > size:
            raise FormatError(self.path, off, f"HEADER_ATTR attr size {asize}")
        n = (size - 8 - asize) // 8
        ids = list(self.ints.array("Q", n).unpack_from(buf, i + 8 + asize))
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


# records followed by bytes outside their header.size
PAYLOAD_AFTER = frozenset((F.RECORD_AUXTRACE, F.RECORD_HEADER_TRACING_DATA))
SPECIAL_RECORDS = frozenset(
    (
        F.RECORD_EVENT_UPDATE,
        F.RECORD_AUXTRACE_INFO,
        F.RECORD_AUXTRACE,
        F.RECORD_HEADER_TRACING_DATA,
        F.RECORD_COMPRESSED,
        F.RECORD_COMPRESSED2,
        F.RECORD_HEADER_ATTR,
        F.RECORD_HEADER_FEATURE,
        F.RECORD_ID_INDEX,
    )
)


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
