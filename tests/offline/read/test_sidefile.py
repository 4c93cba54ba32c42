"""The side file: every record type round-trips, the writer/reader agree, and bad
or torn files give FormatError / a torn-tail report, never anything else."""

from __future__ import annotations

import os
import re
import struct
import zlib

import pytest
from construct import ConstructError
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.formats import perf as fp
from bpfsym.formats import sidefile as sf
from bpfsym.formats.errors import FormatError
from bpfsym.read.kallsyms import capture_kernel_symbols
from bpfsym.read.sidefile import (
    CaptureBeside,
    SideFileWriter,
    _Timeline,
    iter_frames,
    program_payload,
    read_capture,
    read_program,
)

HEADER = {
    "version": 1,
    "byteorder": "little",
    "kernel_release": "6.18.0-test",
    "arch": "x86_64",
    "page_size": 4096,
    "boot_id": "7fb0649b-95cb-4033-b01f-fe7c3e3d2e2b",
    "clock_id": -1,
    "start_time": 123456789,
    "hostname": "h",
    "tool_version": "0.1.0",
}
SAMPLES = {
    sf.HEADER: HEADER,
    sf.SYSCTLS: [{"name": "net.core.bpf_jit_enable", "value": "1"}],
    sf.PROGRAM: {
        "prog_id": 7,
        "origin": "sideband",
        "load_time": 99,
        "missing": "",
        "blobs": [{"name": "info", "data": b"\x01" * 232}, {"name": "jited", "data": b"\xcc" * 20}],
    },
    sf.SIDEBAND: {"cpu": 1, "record": b"\x12\x00\x00\x00\x00\x00\x28\x00" + bytes(32)},
    sf.STATS: {
        "time": 5,
        "progs": [{"prog_id": 3, "run_time_ns": 100, "run_cnt": 2, "recursion_misses": 0}],
    },
    sf.NOTE: {"time": 1, "text": "program 9: gone"},
    sf.END: {"time": 10, "lost": 2, "programs": 3, "exit_status": 0},
}


def _strip(x):  # construct Containers carry _io etc.; compare plain data
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if not k.startswith("_")}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return str(x) if type(x).__name__ == "EnumIntegerString" else x


@pytest.mark.parametrize("rtype", sorted(SAMPLES))
def test_round_trip_and_compiled(rtype):
    fmt = sf.PAYLOADS[rtype]
    built = fmt.build(SAMPLES[rtype])
    assert _strip(fmt.parse(built)) == _strip(SAMPLES[rtype])
    assert fmt.compile().build(SAMPLES[rtype]) == built
    assert _strip(fmt.compile().parse(built)) == _strip(fmt.parse(built))


def test_frame_header_is_twelve_bytes():
    # type u16, flags u16, length u32, crc32 u32
    assert sf.FRAME_SIZE == 12
    raw = sf.frame.build({"type": 4, "flags": {"zlib": True}, "length": 0x01020304, "crc32": 5})
    assert raw == bytes([4, 0, 1, 0, 4, 3, 2, 1, 5, 0, 0, 0])


def _write(path, extra=()):
    w = SideFileWriter(str(path))
    w.put(sf.HEADER, HEADER)
    for rtype, value in extra:
        w.put(rtype, value)
    w.close()


def test_writer_file_mode_and_frames(tmp_path):
    p = tmp_path / "c.bpfsym"
    _write(p, [(sf.NOTE, SAMPLES[sf.NOTE])])
    assert os.stat(p).st_mode & 0o777 == 0o600
    data = p.read_bytes()
    frames = list(iter_frames(str(p), data))
    assert [t for _, t, _ in frames] == [sf.HEADER, sf.NOTE]
    # CRC covers the payload as stored
    off, _, payload = frames[0]
    head = sf.frame.parse(data[off : off + 12])
    assert head.crc32 == zlib.crc32(data[off + 12 : off + 12 + head.length])


KALLSYMS_TEXT = b"".join(b"ffffffff8100%04x T sym_%d\n" % (i, i) for i in range(2000))


def _kallsyms_file(p, *notes: dict) -> bytes:
    """A side file at p: the header, 2000 kallsyms lines (compressed), then notes."""
    w = SideFileWriter(str(p))
    w.put(sf.HEADER, HEADER)
    w.write(sf.KALLSYMS, KALLSYMS_TEXT)
    for note in notes:
        w.put(sf.NOTE, note)
    w.close()
    return KALLSYMS_TEXT


def test_big_payloads_are_compressed_and_read_back(tmp_path):
    p = tmp_path / "k.bpfsym"
    text = _kallsyms_file(p)
    assert p.stat().st_size < len(text) / 2
    cap = read_capture(str(p))
    assert len(capture_kernel_symbols(cap)) == 2000
    ks = capture_kernel_symbols(cap)
    assert ks[5].name == "sym_5" and ks[5].addr == 0xFFFFFFFF81000005


def test_kallsyms_passed_over_and_read_beside(tmp_path):
    # report --kallsyms reads the side file without its kallsyms (not inflated, not
    # checked); CaptureBeside reads it in a thread and gives what read_capture gives
    p = tmp_path / "k.bpfsym"
    text = _kallsyms_file(p, SAMPLES[sf.NOTE])
    whole = read_capture(str(p))
    assert whole.kallsyms_texts == [text.decode()]
    beside = CaptureBeside(str(p)).result()
    assert beside.kallsyms_texts == whole.kallsyms_texts
    assert beside.header == whole.header and beside.warnings == ["program 9: gone"]
    data = bytearray(p.read_bytes())
    kall = next(off for off, t, _ in iter_frames(str(p), bytes(data)) if t == sf.KALLSYMS)
    data[kall + 12] ^= 0xFF  # the kallsyms payload's first byte: its checksum fails
    p.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="checksum"):
        read_capture(str(p))
    with pytest.raises(FormatError, match="checksum"):
        CaptureBeside(str(p)).result()  # the thread's error, raised where it is asked for
    without = CaptureBeside(str(p), kallsyms=False).result()
    assert without.kallsyms_texts == [] and not without.has_kallsyms()
    assert without.header == whole.header and without.warnings == ["program 9: gone"]
    assert [t for _, t, _ in iter_frames(str(p), bytes(data), skip=(sf.KALLSYMS,))] == [
        sf.HEADER,
        sf.NOTE,
    ]


def test_torn_tail_is_reported_and_earlier_records_kept(tmp_path):
    p = tmp_path / "t.bpfsym"
    _write(p, [(sf.NOTE, SAMPLES[sf.NOTE]), (sf.NOTE, {"time": 2, "text": "second"})])
    full = p.read_bytes()
    ends = {off + 12 + len(payload) for off, _, payload in iter_frames(str(p), full)}
    header_end = min(ends)
    for cut in range(len(full) - 1, header_end, -1):
        p.write_bytes(full[:cut])
        cap = read_capture(str(p))
        assert cap.torn.startswith("torn record at offset") == (cut not in ends)
        assert cap.header.kernel_release == "6.18.0-test"
    p.write_bytes(full[: len(full) - 1])
    assert read_capture(str(p)).warnings == ["program 9: gone"]


def test_bad_magic_crc_and_length(tmp_path):
    p = tmp_path / "b.bpfsym"
    p.write_bytes(b"PERFILE2" + bytes(100))
    with pytest.raises(FormatError, match="offset 0: not a bpfsym side file"):
        read_capture(str(p))
    _write(p, [(sf.NOTE, SAMPLES[sf.NOTE])])
    data = bytearray(p.read_bytes())
    data[-1] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="checksum"):
        read_capture(str(p))
    p.write_bytes(
        sf.MAGIC + sf.frame.build({"type": 1, "flags": {}, "length": 1 << 31, "crc32": 0})
    )
    with pytest.raises(FormatError, match=f"offset {len(sf.MAGIC)}: record length"):
        read_capture(str(p))


def test_unknown_record_types_are_skipped(tmp_path):
    p = tmp_path / "u.bpfsym"
    w = SideFileWriter(str(p))
    w.put(sf.HEADER, HEADER)
    w.write(999, b"from a newer writer")
    w.put(sf.NOTE, SAMPLES[sf.NOTE])
    w.close()
    assert read_capture(str(p)).warnings == ["program 9: gone"]


@settings(max_examples=300)
@given(st.binary(max_size=400), st.integers(0, 400), st.binary(min_size=1, max_size=8))
def test_random_and_mutated_files_only_raise_format_error(tmp_path_factory, junk, pos, patch):
    d = tmp_path_factory.mktemp("fz")
    p = d / "f.bpfsym"
    _write(p, [(rt, SAMPLES[rt]) for rt in (sf.SYSCTLS, sf.PROGRAM, sf.SIDEBAND, sf.STATS, sf.END)])
    good = bytearray(p.read_bytes())
    for data in (sf.MAGIC + junk, bytes(good[:pos] + patch + good[pos + len(patch) :])):
        p.write_bytes(data)
        try:
            read_capture(str(p))
        except FormatError:
            pass


def test_payload_parsers_raise_construct_errors_only():
    for rtype, fmt in sf.PAYLOADS.items():
        raw = fmt.build(SAMPLES[rtype])
        for cut in range(len(raw)):
            try:
                fmt.parse(raw[:cut])
            except (ConstructError, UnicodeDecodeError):
                pass


@pytest.mark.parametrize("bad_line", [b"zzzzzzzz8100ffff T not_hex\n", b"ffffffff81000001\n"])
def test_a_kallsyms_line_that_does_not_parse_is_one_error_line(tmp_path, bad_line):
    # KALLSYMS text is read when used (report, annotate, dump): a bad line, even under a
    # good CRC, still gives a FormatError naming the file and the record's offset
    p = tmp_path / "k.bpfsym"
    lines = [b"ffffffff8100%04x T sym_%d\n" % (i, i) for i in range(3000)]
    lines[1500] = bad_line
    w = SideFileWriter(str(p))
    w.put(sf.HEADER, HEADER)
    w.write(sf.KALLSYMS, b"".join(lines))
    w.close()
    cap = read_capture(str(p))
    if bad_line.count(b" ") < 2:  # fewer than three fields: not a symbol line, skipped
        assert len(capture_kernel_symbols(cap)) == 2999
        return
    with pytest.raises(FormatError, match=rf"^{re.escape(str(p))}: offset \d+: bad record of type"):
        capture_kernel_symbols(cap)
    import numpy

    from bpfsym.symbolize.kernel import kernel_symbols as _kernel_symbols

    for np in (None, numpy):  # in place (small reports) and in full
        with pytest.raises(FormatError, match=rf"^{re.escape(str(p))}: offset \d+: bad record"):
            ks, _ = _kernel_symbols(None, read_capture(str(p)), None, np)  # type: ignore[arg-type]
            assert ks is not None
            for i in range(3000):
                ks.lookup(0xFFFFFFFF81000000 + i)


# ---- the struct readers of PROGRAM and SIDEBAND payloads agree with the declarations ----

_programs = st.fixed_dictionaries(
    {
        "prog_id": st.integers(0, 2**32 - 1),
        "origin": st.integers(0, 255),  # 3..255: a newer writer's origin, kept as its number
        "load_time": st.integers(-(2**63), 2**63 - 1),
        "missing": st.text(max_size=40),
        "blobs": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.text(st.characters(max_codepoint=127), max_size=20),
                    "data": st.binary(max_size=64),
                }
            ),
            max_size=6,
        ),
    }
)


def _declared(raw):
    c = sf.program.parse(raw)
    return (c.prog_id, str(c.origin), c.load_time, c.missing, {b.name: b.data for b in c.blobs})


def _fast(raw):
    r = read_program(raw)
    return (r.prog_id, r.origin, r.load_time, r.missing, r.blobs)


_origin_names = st.sampled_from(sorted(sf.ORIGINS.values()))


@settings(max_examples=300)
@given(_programs.map(lambda v: {**v, "origin": None}), _origin_names)
def test_program_records_are_built_as_declared(value, origin):
    # the writer's struct path builds the bytes construct builds from the declaration
    value["origin"] = origin
    blobs = {b["name"]: b["data"] for b in value["blobs"]}
    value["blobs"] = [{"name": k, "data": v} for k, v in blobs.items()]  # names unique
    got = program_payload(value["prog_id"], origin, value["load_time"], value["missing"], blobs)
    assert got == sf.program.build(value)


@settings(max_examples=100)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "sideband", "program", "later"]), st.binary(max_size=900)
        ),
        max_size=12,
    ),
    st.booleans(),
)
def test_writer_frames_are_built_as_declared(tmp_path_factory, ops, hurry):
    # every frame the writer makes (direct, sideband, queued, hurried) is what sf.frame and
    # the payload declarations build, and the reader reads the file back
    p = tmp_path_factory.mktemp("w") / "w.bpfsym"
    w = SideFileWriter(str(p))
    w.put(sf.HEADER, HEADER)
    want = [(sf.HEADER, sf.header.build(HEADER))]
    queued = []
    for i, (op, data) in enumerate(ops):
        if op == "put":
            w.put(sf.NOTE, {"time": i, "text": data.hex()})
            want.append((sf.NOTE, sf.note.build({"time": i, "text": data.hex()})))
        elif op == "sideband":
            w.sideband(i, data)
            want.append((sf.SIDEBAND, sf.sideband.build({"cpu": i, "record": data})))
        elif op == "program":
            blobs = {"info": bytes(232), "jited": data}
            value = {"prog_id": i, "origin": "rescan", "load_time": -1, "missing": "",
                     "blobs": [{"name": k, "data": v} for k, v in blobs.items()]}  # fmt: skip
            w.put_program(i, "rescan", -1, "", blobs)
            queued.append((sf.PROGRAM, sf.program.build(value)))
        else:
            w.write_later(sf.KALLSYMS, data)
            queued.append((sf.KALLSYMS, data))
        if hurry and i == len(ops) // 2:
            w.hurry()
    w.close()
    raw = p.read_bytes()
    frames = list(iter_frames(str(p), raw))
    direct = [(t, pl) for _, t, pl in frames if (t, pl) not in queued]
    assert [x for x in direct if x[0] != sf.PROGRAM] == [x for x in want if x[0] != sf.PROGRAM]
    later = [(t, pl) for _, t, pl in frames if (t, pl) in queued or t == sf.PROGRAM]
    # queued records in their order (PROGRAM records once hurried: at once, in any order)
    assert [x for x in later if x[0] != sf.PROGRAM] == [x for x in queued if x[0] != sf.PROGRAM]
    assert sorted(x for x in later if x[0] == sf.PROGRAM) == sorted(
        x for x in queued if x[0] == sf.PROGRAM
    )
    off = len(sf.MAGIC)
    for _, rtype, payload in frames:
        head = sf.frame.parse(raw[off : off + sf.FRAME_SIZE])
        stored = raw[off + sf.FRAME_SIZE : off + sf.FRAME_SIZE + head.length]
        assert head.type == rtype and head.crc32 == zlib.crc32(stored)
        assert (zlib.decompress(stored) if head.flags.zlib else stored) == payload
        if not hurry and len(payload) >= 512 and rtype != sf.SIDEBAND:
            assert head.flags.zlib or len(zlib.compress(payload, 1)) >= len(payload)
        off += sf.FRAME_SIZE + head.length
    if all(op != "sideband" for op, _ in ops):  # random bytes are no perf records
        cap = read_capture(str(p))
        want_ids = [i for i, (op, _) in enumerate(ops) if op == "program"]
        assert [x.id for x in cap.programs] == want_ids


def test_hurried_records_are_stored_uncompressed(tmp_path):
    p = tmp_path / "h.bpfsym"
    w = SideFileWriter(str(p))
    w.put(sf.HEADER, HEADER)
    w.hurry()
    w.put_program(5, "snapshot", -1, "", {"info": bytes(232), "jited": b"\xcc" * 4096})
    w.close()
    frames = list(iter_frames(str(p), p.read_bytes()))
    assert p.stat().st_size > 4096 and frames[-1][1] == sf.PROGRAM
    assert read_capture(str(p)).programs[0].id == 5


@settings(max_examples=300)
@given(_programs, st.integers(0, 200), st.binary(min_size=1, max_size=4))
def test_program_records_read_as_declared(value, pos, patch):
    raw = sf.program.build(value)
    assert _fast(raw) == _declared(raw)
    assert read_program(raw).origin == sf.ORIGINS.get(value["origin"], str(value["origin"]))
    # cut or patched: both readers fail, or both read the same
    for bad in (raw[: pos % (len(raw) + 1)], raw[:pos] + patch + raw[pos + len(patch) :]):
        try:
            want = _declared(bad)
        except (ConstructError, UnicodeDecodeError):
            want = None
        try:
            got = _fast(bad)
        except (ValueError, struct.error):
            got = None
        assert got == want


_u64 = st.integers(0, 2**64 - 1)
_u32 = st.integers(0, 2**32 - 1)


@st.composite
def _sideband(draw, little):
    """(cpu, raw record) lists: KSYMBOL, BPF_EVENT and LOST records as the kernel writes
    them, with the TID|TIME|CPU sample_id trailer record.py asks for."""
    lay = fp.layouts(little)
    trailer = lay.sample_id(fp.SAMPLE_TID | fp.SAMPLE_TIME | fp.SAMPLE_CPU)
    out = []
    for _ in range(draw(st.integers(0, 12))):
        cpu = draw(st.integers(0, 3))
        kind = draw(st.sampled_from([fp.RECORD_KSYMBOL, fp.RECORD_BPF_EVENT, fp.RECORD_LOST]))
        tail = trailer.build({"pid": 1, "tid": 1, "time": draw(_u64), "cpu": cpu})
        if kind == fp.RECORD_KSYMBOL:
            name = f"bpf_prog_{draw(_u64):016x}_{draw(st.text('abc_', max_size=8))}"
            body = lay.ksymbol.build(
                {"addr": draw(_u64), "len": draw(_u32), "ksym_type": draw(st.integers(0, 2)),
                 "flags": draw(st.integers(0, 1)), "name": name}
            )  # fmt: skip
            body += bytes(-len(body) % 8)
        elif kind == fp.RECORD_BPF_EVENT:
            body = lay.bpf_event.build(
                {"type": draw(st.sampled_from(["unknown", "prog_load", "prog_unload"])),
                 "flags": 0, "id": draw(st.integers(1, 5)), "tag": draw(st.binary(min_size=8, max_size=8))}
            )  # fmt: skip
        else:
            body = lay.lost.build({"id": 0, "lost": draw(st.integers(0, 1000))})
        size = 8 + len(body) + len(tail)
        out.append((cpu, lay.header.build({"type": kind, "misc": 0, "size": size}) + body + tail))
    return out


def _declared_timeline(little, records):
    """The timeline as the construct declarations read it (what _Timeline.add must match)."""
    lay = fp.layouts(little)
    trailer = lay.sample_id(fp.SAMPLE_TID | fp.SAMPLE_TIME | fp.SAMPLE_CPU)
    pending, loads, unloads, lost = {}, {}, {}, 0
    for cpu, rec in records:
        head, body = lay.header.parse(rec), rec[8:]
        if head.type == fp.RECORD_KSYMBOL:
            ks = lay.ksymbol.parse(body)
            if ks.ksym_type == fp.KSYMBOL_TYPE_BPF and not ks.flags & fp.KSYMBOL_FLAGS_UNREGISTER:
                pending.setdefault(cpu, []).append((ks.name, ks.addr, ks.len))
        elif head.type == fp.RECORD_BPF_EVENT:
            ev = lay.bpf_event.parse(body)
            t = trailer.parse(body[lay.bpf_event.sizeof() :]).time
            funcs = pending.pop(cpu, [])
            if ev.type == "prog_load":
                loads[ev.id] = (t, bytes(ev.tag), funcs)
            elif ev.type == "prog_unload":
                unloads[ev.id] = t
        else:
            lost += lay.lost.parse(body).lost
    return loads, unloads, lost


@settings(max_examples=200)
@given(st.booleans().flatmap(lambda little: st.tuples(st.just(little), _sideband(little))))
def test_sideband_timeline_reads_as_declared(case):
    little, records = case
    tl = _Timeline(little)
    for cpu, rec in records:
        tl.add(cpu, rec)
    loads = {
        i: (t, tag, [(f.name, f.addr, f.size) for f in fs]) for i, (t, tag, fs) in tl.loads.items()
    }
    assert (loads, tl.unloads, tl.lost) == _declared_timeline(little, records)
