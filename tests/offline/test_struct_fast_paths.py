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
