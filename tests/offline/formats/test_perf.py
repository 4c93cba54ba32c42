"""perf_event layouts against offsets worked out by hand from include/uapi/linux/perf_event.h."""

from __future__ import annotations

import struct

import pytest

from bpfsym.formats import perf as fp

# offsetof(struct perf_event_attr, field), from the uapi header by hand
ATTR_OFFSETS = {
    "type": (0, "I"), "size": (4, "I"), "config": (8, "Q"), "sample_period": (16, "Q"),
    "sample_type": (24, "Q"), "read_format": (32, "Q"), "flags": (40, "Q"),
    "wakeup_events": (48, "I"), "bp_type": (52, "I"), "config1": (56, "Q"), "config2": (64, "Q"),
    "branch_sample_type": (72, "Q"), "sample_regs_user": (80, "Q"),
    "sample_stack_user": (88, "I"), "clockid": (92, "i"), "sample_regs_intr": (96, "Q"),
    "aux_watermark": (104, "I"), "sample_max_stack": (108, "H"), "aux_sample_size": (112, "I"),
    "aux_action": (116, "I"), "sig_data": (120, "Q"), "config3": (128, "Q"),
}  # fmt: skip


def _attr(**over):
    base = {k: 0 for k in ATTR_OFFSETS}
    base["flags"] = {}
    base.update(over)
    return base


@pytest.mark.parametrize("little", [True, False])
def test_attr_field_offsets(little):
    attr = fp.layouts(little).attr
    assert attr.sizeof() == fp.PERF_ATTR_SIZE_VER8 == 136
    order = "<" if little else ">"
    for name, (off, width) in ATTR_OFFSETS.items():
        if name == "flags":
            continue
        raw = attr.build(_attr(**{name: 7}))
        assert struct.unpack_from(order + width, raw, off)[0] == 7, name


def test_attr_flag_bits_match_uapi():
    # ksymbol is bit 29, bpf_event bit 30, sample_id_all bit 18, watermark bit 14
    raw = fp.layouts(True).attr.build(
        _attr(flags={"ksymbol": True, "bpf_event": True, "sample_id_all": True, "watermark": True})
    )
    assert struct.unpack_from("<Q", raw, 40)[0] == (1 << 29) | (1 << 30) | (1 << 18) | (1 << 14)


def test_sample_id_trailer_order():
    # pid, tid, time, id, stream_id, cpu, res, identifier (perf_event.h, sample_id_all)
    t = fp.SAMPLE_TID | fp.SAMPLE_TIME | fp.SAMPLE_ID | fp.SAMPLE_CPU | fp.SAMPLE_IDENTIFIER
    raw = struct.pack("<IIQQIIQ", 10, 11, 12, 13, 14, 0, 15)
    got = fp.layouts(True).sample_id(t).parse(raw)
    assert (got.pid, got.tid, got.time, got.id, got.cpu, got.identifier) == (10, 11, 12, 13, 14, 15)


def test_side_band_bodies():
    lay = fp.layouts(True)
    # PERF_RECORD_KSYMBOL: addr u64, len u32, ksym_type u16, flags u16, name
    raw = (
        struct.pack("<QIHH", 0xFFFFFFFFC0001000, 64, 1, 0)
        + b"bpf_prog_0123456789abcdef_f\0\0\0\0\0"
    )
    ks = lay.ksymbol.parse(raw)
    assert (ks.addr, ks.len, ks.ksym_type, ks.name) == (
        0xFFFFFFFFC0001000,
        64,
        1,
        "bpf_prog_0123456789abcdef_f",
    )
    assert fp.ksymbol_name_size(len(ks.name)) == 32
    ev = lay.bpf_event.parse(struct.pack("<HHI", 2, 0, 42) + bytes(range(8)))
    assert (ev.type, ev.id, ev.tag) == ("prog_unload", 42, bytes(range(8)))
    assert lay.mmap_page.sizeof() == fp.MMAP_DATA_HEAD_OFFSET + 32


def test_compiled_equals_interpreted():
    lay = fp.layouts(True)
    raw = lay.attr.build(_attr(type=1, size=136, flags={"disabled": True, "mmap": True}))
    assert lay.attr.compile().build(lay.attr.parse(raw)) == raw
    hdr = struct.pack("<IHH", 17, 0, 48)
    assert lay.header.compile().parse(hdr) == lay.header.parse(hdr)
