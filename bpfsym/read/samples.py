"""Decoding one record of a perf.data file: which event a sample or a sample_id trailer
belongs to, its call chain (LBR call stacks rebuilt as perf does), the whole sample.

PerfData (read.perfdata) is a SampleDecoder: the reader finds records, this names their
fields. The attributes below are the reader's, set while it reads the header and attrs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from construct import Struct

from bpfsym.errors import FormatError
from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.read.features import parse_at

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


@dataclass(repr=False, eq=False)
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
    lbr_call_stack: bool = False  # --call-graph lbr: the user chain is in the branch stack

    def field_index(self, name: str) -> int:
        """Where a sample field sits among the values of prefix (-1: not sampled)."""
        return self.fields.index(name) if name in self.fields else -1

    @property
    def type(self) -> int:
        return int(self.attr.type)

    @property
    def config(self) -> int:
        return int(self.attr.config)


class SampleDecoder:
    """Field access of single records, over the attrs the reader has read."""

    path: str
    attrs: list[EventAttr]
    id_to_attr: dict[int, EventAttr]
    single: bool
    same_layout: bool
    sample_id_pos: int | None
    trailer_id_pos: int | None
    u64: struct.Struct
    ints: Any
    L: F.PerfDataLayouts

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
        chain = self.ints.array("Q", nr).unpack_from(buf, pos + 8)
        if ev.lbr_call_stack:
            return self._lbr_chain(ev, buf, start, pos + 8 + 8 * nr, end, chain)
        return chain

    def _lbr_chain(
        self, ev: EventAttr, buf: bytes, start: int, pos: int, end: int, chain: tuple[int, ...]
    ) -> tuple[int, ...]:
        """perf --call-graph lbr: the user part of the chain from the branch stack, as
        perf builds it (machine.c resolve_lbr_callchain_sample, caller order: each branch's
        `from`, last first, then branch 0's `to`, then the chain's entries up to its
        PERF_CONTEXT_USER; all looked up as user code), here leaf first. Only a chain with
        a PERF_CONTEXT_USER marker is rebuilt."""
        if F.CONTEXT_USER not in chain:
            return chain
        u64 = self.u64.unpack_from
        if ev.sample_type & K.SAMPLE_RAW:  # u32 size, then size bytes (with the size: u64s)
            if pos + 4 > end:
                raise FormatError(self.path, start, "sample raw data runs past the record")
            pos += 4 + self.ints.u32.unpack_from(buf, pos)[0]
        if pos + 8 > end:
            raise FormatError(self.path, start, "sample branch stack runs past the record")
        nr = u64(buf, pos)[0]
        pos += 8 + (8 if int(ev.attr.branch_sample_type) & F.BRANCH_HW_INDEX else 0)
        if pos + 24 * nr > end:
            raise FormatError(self.path, start, f"branch stack of {nr} entries past the record")
        if not nr:
            return chain
        entries = [u64(buf, pos + 24 * k)[0] for k in range(nr)]  # from
        to0 = u64(buf, pos + 8)[0]
        kernel = [x for x in chain[: chain.index(F.CONTEXT_USER)] if x < F.CONTEXT_MAX]
        return (F.CONTEXT_USER, *kernel, to0, *entries)

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
