"""Hot paths pack with struct; the layouts are declared with construct in formats/.
Both must produce the same bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bpfsym.formats import bpf as fb
from bpfsym.formats import pinner as fpin
from bpfsym.live import pinner, progs

u32 = st.integers(0, 2**32 - 1)


@given(u32, u32, u32)
def test_get_id_attr(a, b, c):
    assert progs.GET_ID_ATTR.pack(a, b, c) == fb.get_id_attr.build(
        {"id": a, "next_id": b, "open_flags": c}
    )


@given(u32, u32, st.integers(0, 2**64 - 1))
def test_info_attr(fd, n, ptr):
    assert progs.INFO_ATTR.pack(fd, n, ptr) == fb.info_attr.build(
        {"bpf_fd": fd, "info_len": n, "info": ptr}
    )


@given(st.lists(st.tuples(st.integers(0, 0xFFFF), st.integers(-1, 249), st.binary(max_size=64))))
def test_pinner_messages(entries):
    msg = pinner.encode(entries)
    head = fpin.message_header.parse(msg)
    assert head.length == len(msg) - fpin.message_header.sizeof()
    assert head.nfds == sum(1 for _, slot, _ in entries if slot >= 0)
    off = fpin.message_header.sizeof()
    for cpu, slot, data in entries:
        e = fpin.entry_header.parse(msg[off:])
        assert (e.cpu, e.fd_slot, e.length) == (cpu, slot, len(data))
        off += fpin.entry_header.sizeof()
        assert msg[off : off + len(data)] == data
        off += len(data)
    assert off == len(msg)


@given(st.lists(u32, min_size=40, max_size=40), st.binary(min_size=8, max_size=8))
def test_prog_info_struct_matches_declaration(vals, tag):
    decl = fb.prog_info()
    fields = [sc.name for sc in decl.subcon.subcons]
    value = {name: vals[i] for i, name in enumerate(fields)}
    value["tag"] = tag
    value["name"] = "prog_" + str(vals[0] % 1000)
    raw = decl.build(value)
    got = dict(zip(progs._INFO_NAMES, progs._INFO_FAST.unpack(raw), strict=True))
    assert progs._INFO_FAST.size == decl.sizeof() == len(raw)
    for name in fields:
        want = value[name].encode().ljust(16, b"\0") if name == "name" else value[name]
        assert got[name] == want, name
