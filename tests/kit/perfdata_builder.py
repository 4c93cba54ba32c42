"""perf.data files built from the formats' layouts, in either byte order."""

from __future__ import annotations

import struct

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F


def _attr_bytes(L: F.PerfDataLayouts, sample_type: int, read_format: int = 0) -> bytes:
    k = L.kernel.attr
    d: dict[str, object] = {sc.name: 0 for sc in k.subcons if sc.name}
    d.update(
        type=K.PERF_TYPE_SOFTWARE,
        size=K.PERF_ATTR_SIZE_VER8,
        sample_type=sample_type,
        read_format=read_format,
        sample_period=1000,
        sample_regs_user=0b1011,
        sample_regs_intr=0b11,
        branch_sample_type=F.BRANCH_HW_INDEX,
        flags={"sample_id_all": True},
    )
    return k.build(d)


def _sample_value(sample_type: int, read_format: int, i: int) -> dict:
    v: dict = dict(
        identifier=7, ip=0xFFFFFFFF81000000 + i, pid=100 + i, tid=200 + i, time=10**9 + i,
        addr=0x1234, id=7, stream_id=9, cpu=i % 2, period=1000 + i,
        read={"value": 5, "time_enabled": 6, "time_running": 7, "id": 7, "lost": 0,
              "nr": 1, "values": [{"value": 5, "id": 7, "lost": 0}]},
        callchain=[F.CONTEXT_KERNEL, 0xFFFFFFFF81000000 + i, 0xFFFFFFFF81000100],
        raw={"size": 12, "data": b"abcdefghijkl"},
        branch_stack={"nr": 1, "hw_idx": 3,
                      "entries": [{"from_ip": 1, "to_ip": 2, "flags": 3}]},
        regs_user={"abi": 2, "regs": [1, 2, 3]},
        stack_user={"size": 8, "data": b"12345678", "dyn_size": 8},
        weight=11, data_src=12, transaction=13,
        regs_intr={"abi": 2, "regs": [4, 5]},
        phys_addr=14, cgroup=15, data_page_size=4096, code_page_size=4096,
        aux={"size": 8, "data": b"auxdata!"},
    )  # fmt: skip
    return v


def build_file(
    little: bool, sample_type: int, read_format: int = 0, n: int = 20, round_every: int = 0,
    lost_at: tuple[int, ...] = (), dummy: int = 0, dummy_at: tuple[int, ...] = (),
) -> bytes:  # fmt: skip
    """A perf.data file built with the formats declarations (the reader's own layouts):
    n samples, a FINISHED_ROUND after every round_every of them (and at the end), and a
    LOST record of 5 samples after each sample index in lost_at. dummy: the sample_type
    of a second event (id 8), as perf -a adds for its side-band records; a sample of it
    follows each sample index in dummy_at."""
    L = F.perfdata_layouts(little)
    e = "<" if little else ">"
    attr = _attr_bytes(L, sample_type, read_format)
    events = [(attr, 7)] + ([(_attr_bytes(L, dummy), 8)] if dummy else [])
    sid = L.kernel.sample_id(sample_type)
    trailer = sid.build(dict(pid=1, tid=1, time=10**9, id=7, stream_id=9, cpu=0, identifier=7))
    decl = L.sample(sample_type, read_format, F.BRANCH_HW_INDEX, 0b1011, 0b11)
    data = b""

    def rec(rtype: int, misc: int, body: bytes) -> bytes:
        return L.header.build(dict(type=rtype, misc=misc, size=8 + len(body))) + body

    comm = L.comm.build(dict(pid=100, tid=200, comm="worker"))
    data += rec(K.RECORD_COMM, 0, comm.ljust((len(comm) + 7) & ~7, b"\0") + trailer)
    ks = L.kernel.ksymbol.build(
        dict(addr=0xFFFFFFFFC0001000, len=64, ksym_type=1, flags=0, name="bpf_prog_00_x")
    )
    data += rec(K.RECORD_KSYMBOL, 0, ks.ljust((len(ks) + 7) & ~7, b"\0") + trailer)
    for i in range(n):
        data += rec(K.RECORD_SAMPLE, 1, decl.build(_sample_value(sample_type, read_format, i)))
        if i in dummy_at:
            v = dict(_sample_value(dummy, 0, i), identifier=8, id=8)
            data += rec(K.RECORD_SAMPLE, 1, L.sample(dummy, 0, 0, 0, 0).build(v))
        if i in lost_at:
            data += rec(K.RECORD_LOST, 0, struct.pack(e + "QQ", 7, 5) + trailer)
        if round_every and (i + 1) % round_every == 0:
            data += rec(F.RECORD_FINISHED_ROUND, 0, b"")
    data += rec(F.RECORD_FINISHED_ROUND, 0, b"")
    attrs_off = F.FILE_HEADER_SIZE
    ids_off = attrs_off + len(events) * (len(attr) + 16)
    data_off = ids_off + 8 * len(events)
    head = L.file_header.build(
        dict(
            size=F.FILE_HEADER_SIZE,
            attr_size=len(attr) + 16,
            attrs=dict(offset=attrs_off, size=len(events) * (len(attr) + 16)),
            data=dict(offset=data_off, size=len(data)),
            event_types=dict(offset=0, size=0),
            features=[0, 0, 0, 0],
        )
    )
    attrs = b"".join(
        a + L.section.build(dict(offset=ids_off + 8 * k, size=8)) for k, (a, _) in enumerate(events)
    )
    ids = b"".join(struct.pack(e + "Q", i) for _, i in events)
    return head + attrs + ids + data
