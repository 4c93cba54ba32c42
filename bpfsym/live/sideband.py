"""Per-CPU side-band rings: one dummy software event per online CPU with
attr.ksymbol and attr.bpf_event set, each read through its mmap ring.

Side-band records reach only the ring of the CPU where the load or unload
happened, so every online CPU gets an event.
"""

from __future__ import annotations

import mmap
import os
import sys

from bpfsym.formats import integers
from bpfsym.formats import perf as fp
from bpfsym.formats import sidefile as sf
from bpfsym.live.prestart import online_cpus as online_cpus  # where it lives: stdlib only
from bpfsym.live.sys import PERF_FLAG_FD_CLOEXEC, perf_event_open

SAMPLE_TYPE = sf.SIDEBAND_SAMPLE_TYPE
_FAST = fp.layouts().fast  # native byte order: the rings of this machine
_U64 = integers(sys.byteorder == "little").u64  # data_head / data_tail of the mmap page
_HEAD = _FAST.header  # type, misc, size
_BPF_EVENT = _FAST.bpf_event  # type, flags, id, tag
_LOST = _FAST.lost  # id, lost
_KSYMBOL = _FAST.ksymbol  # addr, len, ksym_type, flags
_TRAILER, _TRAILER_FIELDS = _FAST.sample_id(SAMPLE_TYPE)
_TIME_AT = _TRAILER_FIELDS.index("time")


def sideband_attr(clockid: int | None = None) -> bytes:
    flags = {
        "disabled": False,
        "ksymbol": True,
        "bpf_event": True,
        "sample_id_all": True,
        "watermark": True,  # wake on every record: wakeup_watermark = 1 byte
        "use_clockid": clockid is not None,
    }
    return fp.layouts().attr.build(
        {
            "type": fp.PERF_TYPE_SOFTWARE,
            "size": fp.PERF_ATTR_SIZE_VER8,
            "config": fp.PERF_COUNT_SW_DUMMY,
            "sample_period": 0,
            "sample_type": SAMPLE_TYPE,
            "read_format": 0,
            "flags": flags,
            "wakeup_events": 1,
            "bp_type": 0,
            "config1": 0,
            "config2": 0,
            "branch_sample_type": 0,
            "sample_regs_user": 0,
            "sample_stack_user": 0,
            "clockid": clockid or 0,
            "sample_regs_intr": 0,
            "aux_watermark": 0,
            "sample_max_stack": 0,
            "aux_sample_size": 0,
            "aux_action": 0,
            "sig_data": 0,
            "config3": 0,
        }
    )


class Ring:
    """One CPU's event and its mmap ring buffer of 2^n data pages.

    The kernel maps perf rings VM_DONTCOPY: a forked child must map_ring() its own."""

    def __init__(
        self, cpu: int, pages: int, clockid: int | None = None, *, mapped: bool = True
    ) -> None:
        self.cpu = cpu
        self.fd = perf_event_open(sideband_attr(clockid), -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)
        self.pages = pages
        self.data_off = mmap.PAGESIZE
        self.size = pages * mmap.PAGESIZE
        self.map: mmap.mmap | None = None
        if mapped:
            self.map_ring()

    def map_ring(self) -> None:
        try:
            self.map = mmap.mmap(
                self.fd,
                (self.pages + 1) * mmap.PAGESIZE,
                mmap.MAP_SHARED,
                mmap.PROT_READ | mmap.PROT_WRITE,
            )
        except OSError:
            os.close(self.fd)
            raise

    def read(self) -> list[bytes]:
        """Every complete record now in the ring, oldest first; frees their space."""
        m = self.map
        assert m is not None, "map_ring() first"
        head = _U64.unpack_from(m, fp.MMAP_DATA_HEAD_OFFSET)[0]
        tail = _U64.unpack_from(m, fp.MMAP_DATA_HEAD_OFFSET + 8)[0]
        out = []
        size, base = self.size, self.data_off
        while tail < head:
            pos = tail % size
            if pos + 8 <= size:
                hdr = m[base + pos : base + pos + 8]
            else:
                hdr = m[base + pos : base + size] + m[base : base + pos + 8 - size]
            rsize = _HEAD.unpack(hdr)[2]
            if rsize < 8:
                tail = head  # never written by a sane kernel: drop the rest, never spin
                break
            if pos + rsize <= size:
                out.append(m[base + pos : base + pos + rsize])
            else:
                out.append(m[base + pos : base + size] + m[base : base + pos + rsize - size])
            tail += rsize
        _U64.pack_into(m, fp.MMAP_DATA_HEAD_OFFSET + 8, tail)
        return out

    def close(self) -> None:
        if self.map is not None:
            self.map.close()
        os.close(self.fd)


def record_type(rec: bytes) -> int:
    return int(_HEAD.unpack_from(rec)[0])


def load_event_id(rec: bytes) -> int | None:
    """The program id of a PERF_BPF_EVENT_PROG_LOAD record, else None."""
    if _HEAD.unpack_from(rec)[0] != fp.RECORD_BPF_EVENT:
        return None
    etype, _flags, prog_id, _tag = _BPF_EVENT.unpack_from(rec, _HEAD.size)
    return int(prog_id) if etype == fp.BPF_EVENT_PROG_LOAD else None


def unload_event_id(rec: bytes) -> int | None:
    """The program id of a PERF_BPF_EVENT_PROG_UNLOAD record, else None."""
    if _HEAD.unpack_from(rec)[0] != fp.RECORD_BPF_EVENT:
        return None
    etype, _flags, prog_id, _tag = _BPF_EVENT.unpack_from(rec, _HEAD.size)
    return int(prog_id) if etype == fp.BPF_EVENT_PROG_UNLOAD else None


def bpf_event_time(rec: bytes) -> int:
    """perf-clock time in the sample_id trailer right after the BPF_EVENT body.

    The kernel's header.size can be too large when several listeners exist
    (docs/kernel-notes.md), so the trailer is read after the fixed body, never
    from the record's end."""
    return int(_TRAILER.unpack_from(rec, _HEAD.size + _BPF_EVENT.size)[_TIME_AT])


def image_ksymbol(rec: bytes) -> tuple[int, int, str] | None:
    """(addr, len, name) of a KSYMBOL record registering a BPF image that is no program's
    function (a trampoline, dispatcher or struct_ops member), else None."""
    if _HEAD.unpack_from(rec)[0] != fp.RECORD_KSYMBOL:
        return None
    addr, size, ksym_type, flags = _KSYMBOL.unpack_from(rec, _HEAD.size)
    if ksym_type != fp.KSYMBOL_TYPE_BPF or flags & fp.KSYMBOL_FLAGS_UNREGISTER:
        return None
    at = _HEAD.size + _KSYMBOL.size
    end = rec.find(b"\0", at)
    name = rec[at : end if end >= 0 else len(rec)].decode("utf-8", "replace")
    return None if name.startswith("bpf_prog_") else (addr, size, name)


def lost_count(rec: bytes) -> int:
    """Records the kernel dropped, from a PERF_RECORD_LOST."""
    return int(_LOST.unpack_from(rec, _HEAD.size)[1])
