"""The side file (formats/sidefile.py): its crash-safe writer and its reader.

The writer appends one frame per os.write() (big records compressed in a thread of its
own); the reader returns every complete
frame, reports a torn tail, and rebuilds the program timeline from snapshot
records and side-band KSYMBOL / BPF_EVENT records.
"""

from __future__ import annotations

import mmap
import os
import queue
import struct
import sys
import threading
import zlib
from collections.abc import Container
from dataclasses import dataclass
from typing import Any, Protocol

from construct import ConstructError, Struct

from bpfsym.errors import FormatError
from bpfsym.formats import fixed_head, struct_of
from bpfsym.formats import perf as fp
from bpfsym.formats import sidefile as sf
from bpfsym.model import (
    ORIGIN_SIDEBAND,
    Capture,
    CaptureHeader,
    Function,
    Program,
    StatsSample,
)
from bpfsym.read.bpf_events import LoadPairing

COMPRESS_MIN = 512  # payloads at least this big are stored zlib-compressed


class Backseat(Protocol):
    """How the writer thread yields the CPU (live.host.Backseat): enter() in the thread,
    check(backlog) per record, hurry() on the stop path."""

    def enter(self) -> None: ...
    def check(self, backlog: int) -> None: ...
    def hurry(self) -> None: ...


class SideFileWriter:
    """Append-only, one frame per write(); safe to share between threads.

    Frames and the hot payloads (PROGRAM, SIDEBAND) are built with struct formats derived
    from formats/sidefile.py (the bytes construct builds: tests/offline/read/test_sidefile.py
    compares them). put_program() and write_later() hand a record to a writer thread,
    started on first use, which compresses and writes it (zlib releases the GIL): such
    records may land after records written later by other means, and queued records
    never out of order with each other (KALLSYMS: the kernel part, then image lines).
    flush() waits for them. After hurry() (the stop path, which would otherwise wait
    for zlib, ~0.1 ms a program) queued records are written uncompressed, and PROGRAM
    records at once by the caller (the thread hand-off alone slowed 3,000 fetches from
    0.2 to 0.3 s): the reader takes PROGRAM records in any order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.fchmod(self._fd, 0o600)
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._hurry = False
        self.backseat: Backseat | None = None  # set before the first write_later
        os.write(self._fd, sf.MAGIC)

    def write(self, rtype: int, payload: bytes, compress: bool | None = None) -> None:
        if compress is None:
            compress = len(payload) >= COMPRESS_MIN
        flags = 0
        if compress:
            packed = zlib.compress(payload, 1)
            if len(packed) < len(payload):
                payload, flags = packed, sf.FLAG_ZLIB
        head = _FRAME.pack(rtype, flags, len(payload), zlib.crc32(payload))
        with self._lock:
            os.write(self._fd, head + payload)

    def put(self, rtype: int, value: Any, compress: bool | None = None) -> None:
        self.write(rtype, sf.PAYLOADS[rtype].build(value), compress)

    def sideband(self, cpu: int, record: bytes) -> None:
        """A SIDEBAND record (sf.sideband: cpu, the raw perf record), never compressed."""
        self.write(sf.SIDEBAND, _SIDEBAND_CPU.pack(cpu) + record, compress=False)

    def put_program(
        self, prog_id: int, origin: str, load_time: int, missing: str, blobs: dict[str, bytes]
    ) -> None:
        """A PROGRAM record (sf.program), compressed and written by the writer thread."""
        payload = program_payload(prog_id, origin, load_time, missing, blobs)
        if self._hurry:
            self.write(sf.PROGRAM, payload, False)
        else:
            self.write_later(sf.PROGRAM, payload)

    def write_later(self, rtype: int, payload: bytes) -> None:
        """write(rtype, payload) in the writer thread (kallsyms: 5 MB, 30-70 ms of zlib)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, daemon=True)
            self._thread.start()
        self._queue.put((rtype, payload))

    def _drain(self) -> None:
        seat = self.backseat
        if seat is not None:
            seat.enter()
        while (item := self._queue.get()) is not None:
            if seat is not None:
                seat.check(self._queue.qsize())
            self.write(item[0], item[1], False if self._hurry else None)

    def hurry(self) -> None:
        """From now on, queued records are written without compression."""
        self._hurry = True
        if self.backseat is not None:
            self.backseat.hurry()

    def flush(self) -> None:
        """Wait until every queued record is written."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def program_payload(
    prog_id: int, origin: str, load_time: int, missing: str, blobs: dict[str, bytes]
) -> bytes:
    """sf.program.build({...}) at struct's speed (~6 µs against ~90 µs), the same bytes."""
    text = missing.encode("utf-8")
    parts = [
        _PROGRAM_HEAD.pack(prog_id, _ORIGIN_CODES[origin], load_time),
        _STR16.pack(len(text)),
        text,
        _COUNT16.pack(len(blobs)),
    ]
    for name, data in blobs.items():
        raw = name.encode("ascii")
        parts += [_BLOB_NAME.pack(len(raw)), raw, _BLOB_DATA.pack(len(data)), data]
    return b"".join(parts)


def iter_frames(path: str, data: bytes | mmap.mmap, skip: Container[int] = ()) -> Any:
    """Yield (offset, type, payload) of each complete frame; return the torn-tail message.
    Frames of a type in skip are passed over: their payload neither checked nor inflated."""
    if data[: len(sf.MAGIC)] != sf.MAGIC:
        raise FormatError(path, 0, "not a bpfsym side file (bad magic)")
    off = len(sf.MAGIC)
    end = len(data)
    while off < end:
        if end - off < sf.FRAME_SIZE:
            return f"torn record at offset {off}: {end - off} of {sf.FRAME_SIZE} header bytes"
        rtype, flags, length, crc = _FRAME.unpack_from(data, off)
        if length > sf.MAX_PAYLOAD:
            raise FormatError(path, off, f"record length {length} is absurd")
        start = off + sf.FRAME_SIZE
        if start + length > end:
            return f"torn record at offset {off}: {end - start} of {length} payload bytes"
        if rtype in skip:
            off = start + length
            continue
        payload = bytes(data[start : start + length])
        if zlib.crc32(payload) != crc:
            raise FormatError(path, off, "record checksum mismatch")
        if flags & sf.FLAG_ZLIB:
            try:
                payload = zlib.decompress(payload)
            except zlib.error as e:
                raise FormatError(path, off, f"bad compressed record: {e}") from None
        yield off, rtype, payload
        off = start + length
    return ""


_FRAME = struct_of(sf.frame)[0]  # type, flags, length, crc32
_SIDEBAND_CPU = fixed_head(sf.sideband, "record")[0]  # cpu
_PROGRAM_HEAD = fixed_head(sf.program, "missing")[0]  # prog_id, origin, load_time
_STR16 = struct_of(Struct("length" / sf.STR16_LENGTH))[0]
_COUNT16 = struct_of(Struct("count" / sf.BLOB_COUNT))[0]
_BLOB_NAME = struct_of(Struct("length" / sf.BLOB_NAME_LENGTH))[0]
_BLOB_DATA = struct_of(Struct("length" / sf.BLOB_DATA_LENGTH))[0]
_ORIGIN_CODES = {name: code for code, name in sf.ORIGINS.items()}


@dataclass
class ProgramRecord:
    """A PROGRAM payload: the values sf.program declares, origin by its name."""

    prog_id: int
    origin: str
    load_time: int
    missing: str
    blobs: dict[str, bytes]


def read_program(payload: bytes) -> ProgramRecord:
    """Parse a PROGRAM payload as sf.program would, at struct's speed (a side file of a
    busy host holds thousands); struct.error or ValueError for a bad one."""
    prog_id, origin, load_time = _PROGRAM_HEAD.unpack_from(payload, 0)
    raw, pos = _prefixed(payload, _PROGRAM_HEAD.size, _STR16)
    missing = raw.decode("utf-8")
    (count,) = _COUNT16.unpack_from(payload, pos)
    pos += _COUNT16.size
    blobs: dict[str, bytes] = {}
    for _ in range(count):
        name, pos = _prefixed(payload, pos, _BLOB_NAME)
        data, pos = _prefixed(payload, pos, _BLOB_DATA)
        blobs[name.decode("ascii")] = data
    return ProgramRecord(prog_id, sf.ORIGINS.get(origin, str(origin)), load_time, missing, blobs)


def _prefixed(payload: bytes, pos: int, length: struct.Struct) -> tuple[bytes, int]:
    """The bytes after a length at pos, and the position after them."""
    (n,) = length.unpack_from(payload, pos)
    pos += length.size
    if pos + n > len(payload):
        raise ValueError(f"{n} bytes at {pos} run past the record's {len(payload)}")
    return payload[pos : pos + n], pos + n


class _Timeline:
    """Side-band records in arrival order per CPU, turned into program lifetimes."""

    def __init__(self, little: bool) -> None:
        self.fast = fp.layouts(little).fast
        self.trailer, names = self.fast.sample_id(sf.SIDEBAND_SAMPLE_TYPE)
        self.time_at = names.index("time")
        self.pairing: LoadPairing[Function] = LoadPairing()
        self.loads: dict[int, tuple[int, bytes, list[Function]]] = {}  # id -> (time, tag, funcs)
        self.unloads: dict[int, int] = {}
        self.lost = 0

    def add(self, cpu: int, rec: bytes) -> None:
        """One raw record (header included); struct.error or ValueError for a bad one."""
        fast = self.fast
        rtype = fast.header.unpack_from(rec, 0)[0]
        body = fast.header.size
        if rtype == fp.RECORD_KSYMBOL:
            addr, size, ksym_type, flags = fast.ksymbol.unpack_from(rec, body)
            if ksym_type == fp.KSYMBOL_TYPE_BPF and not flags & fp.KSYMBOL_FLAGS_UNREGISTER:
                at = body + fast.ksymbol.size
                end = rec.find(b"\0", at)
                if end < 0:
                    raise ValueError("KSYMBOL name without its NUL")
                name = rec[at:end].decode("utf-8")
                # trampolines and dispatchers are KSYMBOL_TYPE_BPF too (kernel/bpf/core.c
                # bpf_image_ksym_add) but belong to no program's BPF_EVENT
                if name.startswith("bpf_prog_"):
                    self.pairing.ksymbol(cpu, Function(name, addr, size))
        elif rtype == fp.RECORD_BPF_EVENT:
            ev_type, _flags, prog_id, tag = fast.bpf_event.unpack_from(rec, body)
            t = self.trailer.unpack_from(rec, body + fast.bpf_event.size)[self.time_at]
            funcs = self.pairing.take(cpu)
            if ev_type == fp.BPF_EVENT_PROG_LOAD:
                self.loads[prog_id] = (t, tag, funcs)
            elif ev_type == fp.BPF_EVENT_PROG_UNLOAD:
                self.unloads[prog_id] = t
        elif rtype == fp.RECORD_LOST:
            self.lost += fast.lost.unpack_from(rec, body)[1]


def read_capture(path: str, kallsyms: bool = True) -> Capture:
    """Read a side file; FormatError for bad input, Capture.torn for a torn tail.
    kallsyms=False passes over the kallsyms snapshot (its 5 MB of text not inflated) for
    a caller that names kernel symbols from elsewhere (report --kallsyms)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data: bytes | mmap.mmap = (
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
            )
    except OSError as e:
        raise FormatError(path, 0, e.strerror or str(e)) from None
    try:
        return _read(path, data, () if kallsyms else (sf.KALLSYMS,))
    finally:
        if isinstance(data, mmap.mmap):
            data.close()


class CaptureBeside:
    """read_capture(path) in a thread, for a caller with other work meanwhile (a report
    imports numpy). Most of a side file's reading is the kernel symbols' inflate (1 MB of
    zlib for 5 MB of text: 15-35 ms), which zlib does without the GIL, so it runs on
    another CPU. result() waits for the thread and gives the Capture, or raises what
    read_capture raised; no thread is left once it has returned."""

    def __init__(self, path: str, kallsyms: bool = True) -> None:
        self._cap: Capture | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(path, kallsyms), daemon=True)
        self._thread.start()

    def _run(self, path: str, kallsyms: bool) -> None:
        try:
            self._cap = read_capture(path, kallsyms)
        except BaseException as e:  # noqa: BLE001 - raised again by result()
            self._error = e

    def result(self) -> Capture:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._cap is not None
        return self._cap


def _read(path: str, data: bytes | mmap.mmap, skip: Container[int]) -> Capture:
    header: Any = None
    cap = Capture(CaptureHeader("", "", 0, "", -1, 0))
    prog_recs: list[Any] = []
    timeline: _Timeline | None = None
    frames = iter_frames(path, data, skip)
    while True:
        try:
            off, rtype, payload = next(frames)
        except StopIteration as stop:
            cap.torn = stop.value or ""
            break
        try:
            if rtype == sf.HEADER:
                header = sf.header.parse(payload)
                if header.version > sf.VERSION:
                    raise FormatError(
                        path, off, f"side file version {header.version} is newer than this bpfsym"
                    )
                cap.header = CaptureHeader(
                    header.kernel_release, header.arch, header.page_size, header.boot_id,
                    header.clock_id, header.start_time, header.hostname, header.version,
                )  # fmt: skip
                timeline = _Timeline(header.byteorder == "little")
            elif header is None:
                raise FormatError(path, off, "first record is not the header")
            elif rtype == sf.KALLSYMS:  # the kernel part, then BPF trampolines and dispatchers
                cap.kallsyms_texts.append(payload.decode("utf-8", "replace"))
                cap.kallsyms_at.append((path, off))  # parsed when used: bad lines say so then
            elif rtype == sf.SYSCTLS:
                cap.sysctls = {s.name: s.value for s in sf.sysctls.parse(payload)}
            elif rtype == sf.PROGRAM:
                prog_recs.append((off, read_program(payload)))
            elif rtype == sf.SIDEBAND and timeline is not None:
                (cpu,) = _SIDEBAND_CPU.unpack_from(payload, 0)
                timeline.add(cpu, payload[_SIDEBAND_CPU.size :])
            elif rtype == sf.STATS:
                st = sf.stats.parse(payload)
                cap.stats.extend(
                    StatsSample(st.time, p.prog_id, p.run_time_ns, p.run_cnt, p.recursion_misses)
                    for p in st.progs
                )
            elif rtype == sf.NOTE:
                cap.warnings.append(sf.note.parse(payload).text)
            elif rtype == sf.END:
                e = sf.end.parse(payload)
                cap.end_time = e.time
        except (ConstructError, ValueError, UnicodeDecodeError, struct.error) as e:
            raise FormatError(
                path, off, f"bad record of type {rtype}: {type(e).__name__}"
            ) from None
    if header is None:
        raise FormatError(path, len(sf.MAGIC), "no header record")
    assert timeline is not None
    cap.lost = timeline.lost
    little = header.byteorder == "little"
    seen: set[int] = set()
    from bpfsym.read.proginfo import program_from_blobs  # here: BTF decoding is a heavy import

    for off, rec in prog_recs:
        try:
            prog = program_from_blobs(
                rec.prog_id,
                rec.blobs,
                origin=rec.origin,
                load_time=None if rec.load_time < 0 else rec.load_time,
                missing=rec.missing,
                little=little,
            )
        except (ConstructError, FormatError, ValueError, KeyError) as e:
            raise FormatError(path, off, f"bad program record: {e}") from None
        load = timeline.loads.get(prog.id)
        if load and load[2]:
            # the kernel's own names for the functions (KSYMBOL), exact by construction
            for fn, ks in zip(prog.functions, load[2], strict=False):
                if fn.addr == ks.addr:
                    fn.name = ks.name
        seen.add(prog.id)
        cap.programs.append(prog)
    for pid, (t, tag, funcs) in timeline.loads.items():
        if pid in seen:
            continue
        name = funcs[0].name.split("_", 3)[3] if funcs and funcs[0].name.count("_") >= 3 else ""
        cap.programs.append(
            Program(
                id=pid,
                name=name,
                tag=tag.hex(),
                type=-1,
                load_time=t,
                functions=funcs,
                origin=ORIGIN_SIDEBAND,
                missing="gone before bpfsym could take a reference",
            )  # fmt: skip
        )
    for prog in cap.programs:
        if prog.id in timeline.unloads:
            prog.unload_time = timeline.unloads[prog.id]
    cap.programs.sort(key=lambda p: p.id)
    return cap


def native_little() -> bool:
    return sys.byteorder == "little"
