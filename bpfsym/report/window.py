"""The bulk pass's reading: which files it can take (decided from the header), and for
each window of the data section its records located and decoded, the samples' fixed
heads into numpy arrays (Samples) in one gather, the other records one by one.

A sample's head is perf_event_header and the sample_type prefix (IDENTIFIER, IP, TID,
TIME, ADDR, ID, STREAM_ID, CPU, PERIOD, in this order: perf_event.h "struct {...}
PERF_RECORD_SAMPLE"), then READ (fixed size without PERF_FORMAT_GROUP) and the
CALLCHAIN length; every field the report uses sits at a fixed offset when the events
agree on sample_type and read_format, so a numpy record type reads them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.read.bulk import BulkData, NotBulk
from bpfsym.read.perfdata import PerfData
from bpfsym.read.samples import field_offsets
from bpfsym.report.sideband import LOSSES, SIDEBAND, Sideband

# the fields every sample must have for the bulk pass (the others have defaults)
BULK_NEEDS = K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME

# records whose contents the bulk pass does not take in: compressed data (perf record -z)
# and pipe-mode header records, which change the events mid-way
BULK_REFUSED = (
    F.RECORD_COMPRESSED,
    F.RECORD_COMPRESSED2,
    F.RECORD_HEADER_ATTR,
    F.RECORD_HEADER_FEATURE,
)

# up to this many sample ids, a sample's event is found by one comparison per id (an id
# per CPU and event: a small recording's few), past it by a search
ID_MASKS = 8

# A window's samples, one array per field, all of one length (row i: one sample):
#   off     word index of the sample in the data section
#   seq     its place among all records (1-based, file order)
#   misc    perf_event_header.misc (cpumode in its low 3 bits)
#   ip, pid, tid, t (time), cpu (-1 without SAMPLE_CPU), period (the event's fixed
#           sample_period without SAMPLE_PERIOD), ev (event index)
#   chain   word index of the callchain's length word, and nr that length (CALLCHAIN only)
#   j       the first round flush it can go out in (rounds.Rounds), k the one it does
Samples = dict[str, Any]


def bulk_refusal(pd: PerfData) -> str | None:
    """Why the header alone sends the file to the record-by-record pass, or None."""
    attrs = pd.attrs
    ev0 = attrs[0] if attrs else None
    if ev0 is None or ev0.sample_type & BULK_NEEDS != BULK_NEEDS or ev0.read_size is None:
        return "samples of this file need the record-by-record reader"
    if F.HEADER_COMPRESSED in pd.header.features:
        return "compressed records (perf record -z)"
    if any(a.lbr_call_stack for a in attrs):
        return "call chains from the branch stack (perf record --call-graph lbr)"
    return None


class SampleHeads:
    """Decodes the fixed heads of samples laid out as the first event's.

    Events laid out otherwise (perf -a without -F adds a dummy:HG without PERIOD for its
    side-band records) are fine while none of their samples shows up; each sample's
    event is found by its id as PerfData.attr_of_sample does.
    """

    def __init__(self, pd: PerfData, data: BulkData, np: Any) -> None:
        self.np = np
        self.data = data
        attrs = pd.attrs
        ev0 = attrs[0]
        alike = [a.sample_type == ev0.sample_type and a.read_size == ev0.read_size for a in attrs]
        self.foreign = None if all(alike) else np.array([not x for x in alike], dtype=bool)
        self.offsets = field_offsets(pd.L.sample_prefix(ev0.sample_type))  # in the prefix
        self.fixed_periods = np.array(
            [int(a.attr.sample_period) or 1 for a in attrs], dtype=np.uint64
        )
        ids = sorted((i, a.index) for a in attrs for i in a.ids)
        self.id_keys = np.array([i for i, _ in ids], dtype=np.uint64)
        self.id_events = np.array([a for _, a in ids], dtype=np.int64)
        self.id_masks = [(np.uint64(i), a) for i, a in ids if a]  # those of the first: 0 already
        self.dtype, self.words = self._layout(pd)
        self.has_id = "id" in self.dtype.names
        self.has_chain = "nr" in self.dtype.names

    def _layout(self, pd: PerfData) -> tuple[Any, int]:
        """The fixed head of every sample (header, prefix fields, callchain length) as a
        numpy record type over whole words, and its length in words."""
        np = self.np
        ev0 = pd.attrs[0]
        e = "<" if pd.little else ">"
        # (name, numpy kind, offset) of the fields used, from the formats declarations
        fields = _unsigned_fields(pd.L.header, 0, ("misc", "size"))
        prefix = pd.L.sample_prefix(ev0.sample_type)
        fields += _unsigned_fields(prefix, 8, ("ip", "pid", "tid", "time", "cpu", "period"))
        if len(pd.attrs) > 1 and pd.sample_id_pos is not None:
            fields.append(("id", "u8", 8 + pd.sample_id_pos))
        end = 8 + ev0.prefix.size
        if ev0.sample_type & K.SAMPLE_CALLCHAIN:
            nr_pos = 8 + ev0.prefix.size + (ev0.read_size or 0)
            fields.append(("nr", "u8", nr_pos))
            end = nr_pos + 8
        words = -(-end // 8)
        dtype = np.dtype(
            {
                "names": [f[0] for f in fields],
                "formats": [e + f[1] for f in fields],
                "offsets": [f[2] for f in fields],
                "itemsize": 8 * words,
            }
        )
        return dtype, words

    def times(self, starts: Any, other: Any) -> Any:
        """The time of each record at word indexes starts that is a sample, 0 for those
        at indexes other (of another reading process's share: only the times are needed,
        for the round limits). One gather for all: a record too short to hold the word
        reads one inside the data, set to 0 with the others."""
        at = starts + (1 + self.offsets["time"] // 8)
        self.np.minimum(at, self.data.nwords - 1, out=at)
        times = self.data.u64[at].astype(self.np.uint64, copy=False)  # native order
        times[other] = 0
        return times

    def decode(self, starts: Any, seqs: Any) -> Samples | None:
        """The fields of the samples at word indexes starts, as arrays (None: no samples)."""
        np, data = self.np, self.data
        if not len(starts):
            return None
        if int(starts.max()) + self.words > data.nwords:
            raise NotBulk("sample shorter than its sample_type")
        # each sample's head words in one gather (rows of consecutive words), then
        # read as records: one pass over the samples' memory instead of one per field
        head = data.heads(self.words)[starts].view(self.dtype)
        size = head["size"]
        if bool((size < 8 * self.words).any()):
            raise NotBulk("sample shorter than its sample_type")
        out: Samples = {
            "off": starts,
            "seq": seqs,
            "misc": head["misc"],
            "ip": head["ip"],
            "pid": head["pid"],
            "tid": head["tid"],
            "t": head["time"],
        }
        if "cpu" in self.offsets:
            out["cpu"] = head["cpu"].astype(np.int64)
        else:
            out["cpu"] = np.full(len(starts), -1, dtype=np.int64)
        if not self.has_id:
            ev = np.zeros(len(starts), dtype=np.int64)
        else:
            ids = head["id"]
            if len(self.id_keys) <= ID_MASKS:  # a few ids (one per CPU and event): a mask each
                ev = np.zeros(len(starts), dtype=np.int64)  # unknown: the first
                for key, event in self.id_masks:
                    ev[ids == key] = event
            else:
                at = np.searchsorted(self.id_keys, ids)
                at = np.minimum(at, len(self.id_keys) - 1)
                ev = np.where(self.id_keys[at] == ids, self.id_events[at], 0)
            if self.foreign is not None and bool(self.foreign[ev].any()):
                raise NotBulk("a sample of an event with another sample layout")
        out["ev"] = ev
        if "period" in self.offsets:
            out["period"] = head["period"]
        else:
            out["period"] = self.fixed_periods[ev]
        if self.has_chain:
            nr_at = starts + (self.words - 1)
            nr = head["nr"]
            room = (starts + size // 8 - nr_at - 1).astype(np.uint64)
            if bool((nr > room).any()):
                raise NotBulk("callchain runs past its sample")
            out["chain"] = nr_at
            out["nr"] = nr.astype(np.int64)
        return out


@dataclass(repr=False, eq=False)
class Window:
    """One window's records, decoded."""

    count: int  # records in the window
    samples: Samples | None  # decoded (None: none, or another process's share)
    sample_at: Any  # each sample's index in the window (None: not decoded)
    times: Any  # every record's time (0 when it has none)
    sideband: list[tuple]  # (time, seq, type, args, misc, index in the window), file order
    rounds_at: list[int]  # indexes of the FINISHED_ROUND records
    lost: int  # what its LOST and LOST_SAMPLES records count
    carried: int = 0  # samples of earlier windows ahead of its own in samples (read's carry)


class WindowReader:
    """Locates the records of each window of the data section and decodes them."""

    def __init__(self, pd: PerfData, data: BulkData, np: Any, sideband: Sideband) -> None:
        self.pd = pd
        self.data = data
        self.np = np
        self.sideband = sideband
        self.heads = SampleHeads(pd, data, np)

    def windows(
        self, window: int | list[int], given: Callable[[int], Any] | None = None
    ) -> Iterator[tuple[Any, bool]]:
        """(word index of each record, whether the window ends the data) per window of
        about window bytes (a list: each window's size in turn, the last repeated);
        given: BulkData.windows'."""
        data = self.data
        for starts in data.windows(window, given):
            end = int(starts[-1])
            yield starts, end + int(data.u16[4 * end + 3]) // 8 >= data.nwords

    def read(self, starts: Any, seq0: int, samples: bool, carry: Samples | None = None) -> Window:
        """The records at word indexes starts, numbered from seq0 + 1; their samples
        decoded when samples, else only timed.

        carry: samples of earlier windows still waiting for their flush (rounds.Rounds),
        decoded again from the file ahead of this window's own when it has at least as
        many of its own (Window.carried): one gather of both instead of a copy of every
        field of this window's samples to join them (5 % of a one-process reading of the
        bench file). More of them (a file with few round flushes, whose samples wait
        window after window) are joined by Rounds.take, not decoded again each window."""
        np, data = self.np, self.data
        n = len(starts)
        u16 = data.u16
        types = data.u32[2 * starts]
        seqs = np.arange(seq0 + 1, seq0 + 1 + n, dtype=np.int64)
        is_sample = types == K.RECORD_SAMPLE
        other = np.flatnonzero(~is_sample)
        decoded = sample_at = None
        carried = 0
        if samples:
            times = np.zeros(n, dtype=np.uint64)
            sample_at = np.flatnonzero(is_sample)
            at, sq = starts[sample_at], seqs[sample_at]
            if carry is not None and 0 < len(carry["off"]) <= len(sample_at):
                carried = len(carry["off"])
                at, sq = np.concatenate((carry["off"], at)), np.concatenate((carry["seq"], sq))
            decoded = self.heads.decode(at, sq)
            if decoded is not None:
                times[sample_at] = decoded["t"][carried:]
        else:
            times = self.heads.times(starts, other)
        # everything else, in file order
        sideband: list[tuple] = []
        rounds_at: list[int] = []
        lost = 0
        sizes = u16[4 * starts[other] + 3].tolist()
        miscs = u16[4 * starts[other] + 2].tolist()
        decode = self.sideband.decode
        buf: Any = data.buf  # the mapped file
        for j, (i, rtype) in enumerate(zip(other.tolist(), types[other].tolist(), strict=True)):
            start = data.base + 8 * int(starts[i])
            size = sizes[j]
            if rtype in SIDEBAND:
                t, args = decode(rtype, miscs[j], buf, start, size, start)
                t = t or 0
                times[i] = t
                sideband.append((t, int(seqs[i]), rtype, args, miscs[j], i))
            elif rtype == F.RECORD_FINISHED_ROUND:
                rounds_at.append(i)
            elif rtype in LOSSES:
                lost += self.sideband.lost(rtype, buf, start, size)
            elif rtype == F.RECORD_ID_INDEX:
                self.pd._id_index(buf, start, size, start)  # checked as records() does
            elif rtype in BULK_REFUSED:
                raise NotBulk(f"record type {rtype}")
        return Window(n, decoded, sample_at, times, sideband, rounds_at, lost, carried)


def _unsigned_fields(decl: Any, base: int, names: tuple[str, ...]) -> list[tuple[str, str, int]]:
    """(name, numpy unsigned kind, byte offset from base) of the named fields of a
    construct Struct of fixed-size unsigned integers."""
    out = []
    pos = base
    for sc in decl.subcons:
        if sc.name in names:
            out.append((sc.name, f"u{sc.sizeof()}", pos))
        pos += sc.sizeof()
    return out
