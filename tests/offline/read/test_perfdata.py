"""The perf.data reader on recorded fixtures (tests/fixtures/perfdata/record.py) and on bad input."""

from __future__ import annotations

import io
import os
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit.perfdata_builder import (
    _sample_value,
    build_file,
)

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.formats.errors import FormatError
from bpfsym.read.features import parse_bpf_btf, parse_bpf_prog_info, parse_build_ids
from bpfsym.read.perfdata import PerfData, struct_of
from bpfsym.read.proginfo import program_from_perf

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "perfdata")


def fixture(name: str) -> str:
    return os.path.join(FIX, name)


def perf_totals(name: str) -> dict[str, int]:
    """Event -> 'Event count (approx.)' as perf report printed it when recording the fixture."""
    out = {}
    text = open(fixture(name)).read()
    for ev, count in re.findall(r"of event '([^']+)'\n# Event count \(approx\.\): (\d+)", text):
        out[ev] = int(count)
    return out


def kallsyms_bpf(name: str) -> set[str]:
    with open(fixture(name)) as f:
        return {line.split()[2] for line in f}


def read_all(path: str, stream: io.BytesIO | None = None) -> tuple[PerfData, list[tuple]]:
    """Every record as (type, misc, bytes, offset), via the streaming reader."""
    pd = PerfData(path, stream)
    with pd:
        recs = [(t, m, bytes(b[s : s + n]), off) for t, m, b, s, n, off in pd.records()]
    return pd, recs


def totals(pd: PerfData, recs: list[tuple]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t, _m, raw, _off in recs:
        if t == K.RECORD_SAMPLE:
            ev = pd.attr_of_sample(raw, 0, len(raw))
            v = dict(zip(ev.fields, ev.prefix.unpack_from(raw, 8), strict=True))
            out[ev.name] = out.get(ev.name, 0) + v["period"]
    return out


@pytest.mark.parametrize("name", ["bpf", "pipe", "multi"])
def test_sample_periods_add_up_to_perfs_event_count(name: str) -> None:
    pd, recs = read_all(fixture(f"{name}.data"))
    assert totals(pd, recs) == perf_totals(f"{name}.perf-sym.txt")


def test_compressed_file_matches_perf() -> None:
    pd, recs = read_all(fixture("z.data"))
    assert pd.compressed_records > 0
    assert totals(pd, recs) == perf_totals("z.perf-sym.txt")


def test_file_header_features() -> None:
    pd, _ = read_all(fixture("bpf.data"))
    h = pd.header
    assert not pd.pipe and pd.little
    assert h.osrelease and h.hostname and h.arch
    assert h.nrcpus[0] >= 1
    assert os.path.basename(h.cmdline[0]) == "perf" and "record" in h.cmdline
    assert [a.name for a in pd.attrs][:1] == ["cpu-clock"]
    # xdp_spin was loaded before perf started: perf saved its bpf_prog_info and BTF
    progs = [program_from_perf(i, b, h.btfs, load_time=None) for i, b in h.bpf_progs.items()]
    spin = [p for p in progs if p.name == "xdp_spin"]
    assert spin and len(spin[0].functions) == 2 and all(f.size for f in spin[0].functions)
    assert spin[0].btf_id in h.btfs
    assert h.btfs[spin[0].btf_id][:2] == b"\x9f\xeb"  # BTF magic, little-endian
    # the BTF of HEADER_BPF_BTF names the sub-program and gives every line its text
    assert spin[0].functions[1].name.endswith("_spin_mix")
    assert spin[0].lines and all(x.text and x.jited_addr for x in spin[0].lines)


def test_pipe_mode_takes_attrs_and_features_from_records() -> None:
    pd, recs = read_all(fixture("pipe.data"))
    assert pd.pipe
    types = {t for t, *_ in recs}
    assert F.RECORD_HEADER_ATTR in types and F.RECORD_HEADER_FEATURE in types
    assert pd.attrs[0].name == "cpu-clock"
    assert pd.header.osrelease and pd.header.cmdline


def test_multi_event_samples_go_to_their_attr() -> None:
    pd, recs = read_all(fixture("multi.data"))
    names = {a.name for a in pd.attrs}
    assert {"cpu-clock", "task-clock"} <= names
    assert set(totals(pd, recs)) == {"cpu-clock", "task-clock"}


def test_kernel_ksymbol_records_carry_kallsyms_names() -> None:
    # xdp_burn was loaded while perf recorded: the kernel wrote its KSYMBOLs
    pd, recs = read_all(fixture("bpf.data"))
    names = set()
    unregistered = set()
    for t, _m, raw, _off in recs:
        if t == K.RECORD_KSYMBOL:
            k = pd.L.kernel.ksymbol.parse(raw[8:])
            if k.flags & K.KSYMBOL_FLAGS_UNREGISTER:
                unregistered.add(k.name)
            else:
                names.add(k.name)
    burn = {n for n in names if n.endswith(("_xdp_burn", "_burn_mix"))}
    assert len(burn) == 2 and burn <= kallsyms_bpf("bpf.kallsyms-bpf.txt")
    assert burn <= unregistered  # and unloaded before perf stopped


def test_ksymbol_trailer_is_right_after_the_name() -> None:
    # the kernel may inflate KSYMBOL header.size; the sample_id sits after the padded name
    pd, recs = read_all(fixture("bpf.data"))
    first = last = None
    for t, _m, raw, _off in recs:
        if t == K.RECORD_SAMPLE:
            ev = pd.attr_of_sample(raw, 0, len(raw))
            tm = dict(zip(ev.fields, ev.prefix.unpack_from(raw, 8), strict=True))["time"]
            first = tm if first is None else min(first, tm)
            last = tm if last is None else max(last, tm)
    seen = 0
    for t, _m, raw, _off in recs:
        if t == K.RECORD_KSYMBOL:
            k = pd.L.kernel.ksymbol.parse(raw[8:])
            body = 16 + K.ksymbol_name_size(len(k.name.encode()))
            tr = pd.trailer(raw, 0, len(raw), t, body)
            assert tr is not None
            if tr["time"]:  # kernel-written (perf's synthesized ones carry 0)
                assert first is not None and last is not None
                assert first - 10**10 < tr["time"] < last + 10**10
                seen += 1
    assert seen >= 4


@pytest.mark.parametrize("name", ["bpf", "pipe", "multi"])
def test_struct_hot_path_agrees_with_construct(name: str) -> None:
    pd, recs = read_all(fixture(f"{name}.data"))
    n = 0
    for t, _m, raw, off in recs:
        if t != K.RECORD_SAMPLE:
            continue
        ev = pd.attr_of_sample(raw, 0, len(raw))
        full = pd.parse_sample(raw, 0, len(raw), off)
        fast = dict(zip(ev.fields, ev.prefix.unpack_from(raw, 8), strict=True))
        for k, v in fast.items():
            assert full[k] == v
        if ev.sample_type & K.SAMPLE_CALLCHAIN:
            assert list(pd.callchain(ev, raw, 0, len(raw))) == list(full.callchain)
        # every byte of the record is accounted for by the declaration
        assert pd.sample_decl(ev).build(full) == raw[8:]
        n += 1
    assert n > 500


def test_struct_of_rejects_variable_fields() -> None:
    L = F.perfdata_layouts(True)
    with pytest.raises(TypeError):
        struct_of(L.sample(K.SAMPLE_IP | K.SAMPLE_CALLCHAIN))


# ---- both byte orders, every sample_type bit ---------------------------------

ALL_BITS = [1 << b for b in range(25) if (1 << b) != K.SAMPLE_WEIGHT_STRUCT]


@pytest.mark.parametrize("little", [True, False])
@pytest.mark.parametrize("bit", ALL_BITS)
def test_every_sample_type_bit_in_both_byte_orders(little: bool, bit: int) -> None:
    st_ = K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME | K.SAMPLE_PERIOD | bit
    for rf in (F.FORMAT_ID | F.FORMAT_TOTAL_TIME_ENABLED, F.FORMAT_GROUP | F.FORMAT_ID):
        blob = build_file(little, st_, rf)
        pd, recs = read_all("<built>", io.BytesIO(blob))
        samples = [r for r in recs if r[0] == K.RECORD_SAMPLE]
        assert len(samples) == 20
        assert pd.little == little
        for i, (_t, _m, raw, off) in enumerate(samples):
            ev = pd.attr_of_sample(raw, 0, len(raw))
            fast = dict(zip(ev.fields, ev.prefix.unpack_from(raw, 8), strict=True))
            assert fast["ip"] == 0xFFFFFFFF81000000 + i and fast["period"] == 1000 + i
            full = pd.parse_sample(raw, 0, len(raw), off)
            assert full.tid == 200 + i
            if bit == K.SAMPLE_CALLCHAIN:
                assert pd.callchain(ev, raw, 0, len(raw))[1] == 0xFFFFFFFF81000000 + i
        ks = [r for r in recs if r[0] == K.RECORD_KSYMBOL][0]
        assert pd.L.kernel.ksymbol.parse(ks[2][8:]).name == "bpf_prog_00_x"


def test_both_byte_orders_read_the_same() -> None:
    st_ = K.SAMPLE_IDENTIFIER | K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME | K.SAMPLE_CPU
    st_ |= K.SAMPLE_PERIOD | K.SAMPLE_CALLCHAIN
    got = []
    for little in (True, False):
        pd, recs = read_all("<built>", io.BytesIO(build_file(little, st_)))
        got.append(
            [
                (
                    t,
                    dict(
                        zip(pd.attrs[0].fields, pd.attrs[0].prefix.unpack_from(raw, 8), strict=True)
                    ),
                )  # fmt: skip
                for t, _m, raw, _o in recs
                if t == K.RECORD_SAMPLE
            ]
        )
    assert got[0] == got[1] and len(got[0]) == 20


# ---- HEADER_BPF_PROG_INFO written by other perf versions ---------------------


def _raw_feature(path: str, bit: int) -> tuple[bytes, int]:
    with open(path, "rb") as f:
        head = f.read(F.FILE_HEADER_SIZE)
        fh = F.perfdata_layouts(True).file_header.parse(head)
        bits = [n * 64 + b for n, w in enumerate(fh.features) for b in range(64) if w >> b & 1]
        f.seek(fh.data.offset + fh.data.size + 16 * bits.index(bit))
        off, size = struct.unpack("<QQ", f.read(16))
        f.seek(off)
        return f.read(size), off


def _rewrite_info_len(section: bytes, new_len: int, with_count: bool) -> bytes:
    n = struct.unpack_from("<I", section)[0]
    pos = 4
    out = [struct.pack("<I", n)] if with_count else []
    for _ in range(n):
        info_len, data_len, arrays = struct.unpack_from("<IIQ", section, pos)
        info = section[pos + 16 : pos + 16 + info_len]
        data = section[pos + 16 + info_len : pos + 16 + info_len + data_len]
        info = info[:new_len].ljust(new_len, b"\0")
        out.append(struct.pack("<IIQ", new_len, data_len, arrays) + info + data)
        pos += 16 + info_len + data_len
    return b"".join(out)


@pytest.mark.parametrize("info_len", [208, 232, 320])
@pytest.mark.parametrize("with_count", [True, False])
def test_bpf_prog_info_of_other_sizes_and_without_count(info_len: int, with_count: bool) -> None:
    L = F.perfdata_layouts(True)
    raw, off = _raw_feature(fixture("bpf.data"), F.HEADER_BPF_PROG_INFO)

    def ksyms(entries: list[dict[str, bytes]]) -> dict[int, list[int]]:
        progs = [program_from_perf(0, b, {}, load_time=None) for b in entries]
        return {int(p.info["id"]): [f.addr for f in p.functions] for p in progs}

    want = ksyms(parse_bpf_prog_info(L, raw, "x", off))
    assert want and all(want.values())
    got = parse_bpf_prog_info(L, _rewrite_info_len(raw, info_len, with_count), "x", off)
    assert ksyms(got) == want


def test_bpf_btf_section() -> None:
    L = F.perfdata_layouts(True)
    raw, off = _raw_feature(fixture("bpf.data"), F.HEADER_BPF_BTF)
    btfs = parse_bpf_btf(L, raw, "x", off)
    assert btfs and all(b[:2] == b"\x9f\xeb" for b in btfs.values())
    with pytest.raises(FormatError):
        parse_bpf_btf(L, raw[:-1], "x", off)


def test_build_ids_section() -> None:
    L = F.perfdata_layouts(True)
    raw, off = _raw_feature(fixture("bpf.data"), F.HEADER_BUILD_ID)
    ids = parse_build_ids(L, raw, "x", off)
    assert ids and all(re.fullmatch(r"[0-9a-f]{2,40}", b.build_id) for b in ids)
    assert any(b.filename.endswith("[kernel.kallsyms]") for b in ids)


# ---- bad input -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["bpf.data", "pipe.data", "z.data"])
def test_truncated_files_raise_format_error_naming_the_offset(name: str) -> None:
    blob = open(fixture(name), "rb").read()
    cuts = [0, 5, 15, 50, 103, 200] + [len(blob) * k // 37 + 3 for k in range(1, 37)]
    errors = cut_inside = 0
    for cut in cuts:
        try:
            pd, _ = read_all(name, io.BytesIO(blob[:cut]))
        except FormatError as e:
            errors += 1
            assert e.path == name and 0 <= e.offset <= len(blob)
            assert "\n" not in str(e)
            continue
        # a pipe stream cut inside a record is read up to the cut, as perf reads it, and
        # says so; one cut at a record boundary is just shorter
        cut_inside += any("the stream ends inside a record" in w for w in pd.header.warnings)
    if name.startswith("pipe"):
        assert errors <= 3 and cut_inside >= len(cuts) - 6  # the header, and a few boundaries
    else:
        assert errors == len(cuts)


def test_not_perf_data() -> None:
    with pytest.raises(FormatError, match="not a perf.data"):
        read_all("x", io.BytesIO(b"\x7fELF" + bytes(200)))


def test_absurd_record_size() -> None:
    blob = bytearray(open(fixture("pipe.data"), "rb").read()[:4096])
    struct.pack_into("<IHH", blob, 16, 3, 0, 4)  # first record: size 4
    with pytest.raises(FormatError, match="offset 16"):
        read_all("p", io.BytesIO(bytes(blob)))


PIPE_HEAD = open(fixture("pipe.data"), "rb").read()[:20000]


@settings(max_examples=150)
@given(st.lists(st.tuples(st.integers(0, len(PIPE_HEAD) - 1), st.integers(0, 255)), max_size=8))
def test_mutated_pipe_stream_only_raises_format_error(muts: list[tuple[int, int]]) -> None:
    blob = bytearray(PIPE_HEAD)
    for pos, val in muts:
        blob[pos] = val
    try:
        pd, recs = read_all("m", io.BytesIO(bytes(blob)))
        for t, _m, raw, off in recs:
            if t == K.RECORD_SAMPLE:
                pd.parse_sample(raw, 0, len(raw), off)
    except FormatError:
        pass


@settings(max_examples=200)
@given(st.binary(max_size=600))
def test_random_bytes_only_raise_format_error(blob: bytes) -> None:
    for head in (b"", F.MAGIC_LE + struct.pack("<Q", 16), F.MAGIC_BE + struct.pack(">Q", 104)):
        try:
            read_all("r", io.BytesIO(head + blob))
        except FormatError:
            pass


@settings(max_examples=200)
@given(st.binary(max_size=400), st.booleans())
def test_feature_parsers_only_raise_format_error(blob: bytes, little: bool) -> None:
    L = F.perfdata_layouts(little)
    for parse in (parse_bpf_prog_info, parse_bpf_btf, parse_build_ids):
        try:
            parse(L, blob, "f", 0)  # type: ignore[operator]
        except FormatError:
            pass


@settings(max_examples=100)
@given(st.sampled_from(ALL_BITS), st.sampled_from(ALL_BITS), st.booleans())
def test_sample_prefix_struct_agrees_with_construct(b1: int, b2: int, little: bool) -> None:
    st_ = K.SAMPLE_IP | K.SAMPLE_PERIOD | b1 | b2
    L = F.perfdata_layouts(little)
    prefix = L.sample_prefix(st_)
    s, names = struct_of(prefix)
    assert s.size == prefix.sizeof()
    value = _sample_value(st_, 0, 3)
    raw = prefix.build(value)
    assert dict(zip(names, s.unpack(raw), strict=True)) == {
        k: v for k, v in prefix.parse(raw).items() if k != "_io"
    }


@pytest.mark.parametrize("rtype", [F.RECORD_COMPRESSED, F.RECORD_COMPRESSED2])
@pytest.mark.parametrize("chunk", [777, 4096])
def test_records_straddling_compressed_records(rtype: int, chunk: int) -> None:
    import zstandard

    blob = open(fixture("pipe.data"), "rb").read()
    head, stream = blob[:16], blob[16:]
    # one zstd stream flushed per compressed record, as perf writes it, cut mid-record
    z = zstandard.ZstdCompressor().compressobj()
    out = [head]
    for k in range(0, len(stream), chunk):
        data = z.compress(stream[k : k + chunk]) + z.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        if rtype == F.RECORD_COMPRESSED2:
            body = struct.pack("<Q", len(data)) + data.ljust((len(data) + 7) & ~7, b"\0")
        else:
            body = data
        out.append(struct.pack("<IHH", rtype, 0, 8 + len(body)) + body)
    pd, recs = read_all("zz", io.BytesIO(b"".join(out)))
    _, want = read_all(fixture("pipe.data"))
    assert pd.compressed_records == len(out) - 1
    assert [(t, m, raw) for t, m, raw, _o in recs] == [(t, m, raw) for t, m, raw, _o in want]
    with pytest.raises(FormatError, match="compressed data ends inside a record"):
        read_all("zz", io.BytesIO(b"".join(out[:-1])))
