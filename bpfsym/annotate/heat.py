"""Samples per native address inside BPF programs: perf.data samples placed by
(address, time) on the program timeline of a side file.

JIT addresses are recycled, so an address alone does not name a program: the
sample counts for the program whose function covered the address *at the
sample's time* (symbolize.timeline, the report's own lookup).

Big files are read in bulk (read.bulk, the report's reader of the data section):
only each sample's ip is gathered, its time only where the ip lies in BPF code, and
the timeline is asked once per distinct address and stretch of time in which the
same functions are alive, not once per sample. Files the bulk reader cannot take
(pipes, compressed or unusual records) are read record by record; both readings
give the same counts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.model import Capture, Program
from bpfsym.read.arrays import stable_argsort
from bpfsym.read.bulk import BulkData, NotBulk, file_size, load_numpy
from bpfsym.read.perfdata import SPECIAL_RECORDS, PerfData
from bpfsym.read.samples import field_offsets
from bpfsym.symbolize.symbols import FROM_SIDE
from bpfsym.symbolize.timeline import BpfTimeline, programs_timeline

Heat = dict[int, dict[int, int]]  # prog id -> native address -> samples

BULK_MIN_BYTES = 1 << 20  # smaller files: importing numpy costs more than it saves


def bpf_sample_counts(
    path: str, capture: Capture, progress: Callable[[int], None] | None = None
) -> Heat:
    """prog id -> native address -> samples, for every sample that fell in BPF code."""
    return program_sample_counts(path, capture.programs, progress)


def program_sample_counts(
    path: str, programs: list[Program], progress: Callable[[int], None] | None = None
) -> Heat:
    """bpf_sample_counts of a side file's programs (Program.outline() is enough)."""
    timeline = programs_timeline(programs, FROM_SIDE)
    if progress is None:
        np = load_numpy() if file_size(path) >= BULK_MIN_BYTES else None
        if np is not None:
            with PerfData(path) as pd:
                data = _bulk_data(pd, np)
                if data is not None:
                    try:
                        return _bulk_counts(pd, data, np, timeline)
                    except NotBulk:
                        pass  # the record-by-record reading copes, or says what is wrong
    return _record_counts(path, timeline, progress)


def _record_counts(
    path: str, timeline: BpfTimeline, progress: Callable[[int], None] | None
) -> Heat:
    lo, hi = timeline.lo, timeline.hi
    out: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    with PerfData(path) as pd:
        where: dict[int, tuple[int, int]] = {}
        for rtype, _misc, buf, start, size, off in pd.records():
            if rtype != K.RECORD_SAMPLE:
                continue
            ev = pd.attr_of_sample(buf, start, size)
            pos = where.get(ev.index)
            if pos is None:
                pos = where[ev.index] = (ev.field_index("ip"), ev.field_index("time"))
            if pos[0] < 0 or ev.prefix.size + 8 > size:
                continue
            v = ev.prefix.unpack_from(buf, start + 8)
            ip = v[pos[0]]
            if not lo <= ip < hi:
                continue
            fn = BpfTimeline.pick(timeline.candidates(ip), v[pos[1]] if pos[1] >= 0 else None)
            if fn is not None and fn.prog is not None:
                out[fn.prog.id][ip] += 1
            if progress is not None:
                progress(off)
    return {k: dict(v) for k, v in out.items()}


def _bulk_data(pd: PerfData, np: Any) -> BulkData | None:
    try:
        return pd.bulk(np)
    except ValueError:  # a data section past the end of the file: records() says so
        return None


def _bulk_counts(pd: PerfData, data: BulkData, np: Any, timeline: BpfTimeline) -> Heat:
    """The counts of _record_counts, with numpy: each window's samples are found by
    record type, their event by id (as PerfData.attr_of_sample), and ip and time are
    read at the event's fixed offsets. NotBulk: a record the bulk reading does not
    take in (those records() decodes or checks), or an event without TIME."""
    events = [_Fields(pd, ev) for ev in pd.attrs]
    if not events:
        raise NotBulk("no event attr")
    ids = sorted((i, a.index) for i, a in pd.id_to_attr.items())  # an id's last attr
    id_keys = np.array([i for i, _ in ids], dtype=np.uint64)
    id_events = np.array([e for _, e in ids], dtype=np.int64)
    id_pos = None if pd.single else pd.sample_id_pos
    # events whose samples hold ip and time at the same places: no need to tell them apart
    uniform = len({(f.ip, f.time, f.need) for f in events}) == 1
    # [lo, hi) of BPF code: none without functions; hi may be 2**64, past any u64
    top = (1 << 64) - 1
    none = timeline.lo >= timeline.hi
    lo, hi = np.uint64(min(timeline.lo, top)), np.uint64(min(timeline.hi, top))
    to_top = timeline.hi > top
    special = np.zeros(1 << 16, dtype=bool)
    checked = {F.RECORD_ID_INDEX: pd._id_index, F.RECORD_EVENT_UPDATE: pd._event_update}
    special[[t for t in SPECIAL_RECORDS if t not in checked]] = True
    u16, u32, u64 = data.u16, data.u32, data.u64
    buf: Any = data.buf  # the mapped file
    got_ips, got_times = [], []
    for starts in data.windows():
        types = u32[2 * starts]
        if bool(special[np.minimum(types, 0xFFFF)].any()):  # (no special type is that big)
            raise NotBulk("records that change the events or carry payloads")
        check = (types == F.RECORD_ID_INDEX) | (types == F.RECORD_EVENT_UPDATE)
        for i in starts[check].tolist():  # as records() does
            at = data.base + 8 * i
            checked[int(u32[2 * i])](buf, at, int(u16[4 * i + 3]), at)
        sample = starts[types == K.RECORD_SAMPLE]
        if not len(sample):
            continue
        size = u16[4 * sample + 3]
        if uniform or id_pos is None or not len(id_keys):
            ev = np.zeros(len(sample), dtype=np.int64)
        else:
            has_id = size >= 8 + id_pos + 8
            ev = np.zeros(len(sample), dtype=np.int64)
            sid = u64[sample[has_id] + 1 + id_pos // 8]
            at = np.minimum(np.searchsorted(id_keys, sid), len(id_keys) - 1)
            ev[has_id] = np.where(id_keys[at] == sid, id_events[at], 0)  # unknown: the first
        for e in np.flatnonzero(np.bincount(ev, minlength=len(events))).tolist():
            f = events[e]
            if f.ip is None:
                continue  # samples without an ip are in no program
            mine = sample[(ev == e) & (size >= f.need)]
            ip = u64[mine + f.ip]
            if none:
                continue
            bpf = (ip >= lo) & ((ip < hi) | to_top)
            if not bool(bpf.any()):
                continue
            if f.time is None:
                raise NotBulk("samples without TIME")
            got_ips.append(ip[bpf])
            got_times.append(u64[mine[bpf] + f.time])
    if not got_ips:
        return {}
    return place(np, timeline, np.concatenate(got_ips), np.concatenate(got_times))


class _Fields:
    """Word offsets of ip and time in one event's samples, and the size a sample needs."""

    def __init__(self, pd: PerfData, ev: Any) -> None:
        offs = field_offsets(pd.L.sample_prefix(ev.sample_type))
        self.need = 8 + ev.prefix.size
        self.ip = self._word(offs, "ip")
        self.time = self._word(offs, "time")

    @staticmethod
    def _word(offs: dict[str, int], name: str) -> int | None:
        at = offs.get(name)
        if at is None:
            return None
        if at % 8:
            raise NotBulk(f"{name} off a word boundary")
        return 1 + at // 8  # past the record header


def place(np: Any, timeline: BpfTimeline, ips: Any, times: Any) -> Heat:
    """prog id -> address -> samples for samples at ips (in BPF code) and times.

    Per distinct address, the functions that ever covered it are alive in fixed sets
    between their load and unload times; the timeline picks once per such stretch and
    each sample counts for the pick of the stretch its time falls in."""
    out: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    perm = stable_argsort(np, ips)  # one sort: each address's samples in a run
    ips, times = ips[perm], times[perm]
    new = np.empty(len(ips), dtype=bool)
    new[:1] = True
    np.not_equal(ips[1:], ips[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    uniq = ips[starts]
    bounds = [*starts.tolist(), len(ips)]
    for k, ip in enumerate(uniq.tolist()):
        cands = timeline.candidates(ip)
        if not cands:
            continue
        edges = sorted({x for fn in cands for x in (fn.load, fn.unload) if x is not None})
        # a time in each stretch: before the first edge, then each edge itself
        reps = [edges[0] - 1, *edges] if edges else [0]
        picks = [BpfTimeline.pick(cands, t) for t in reps]
        n = bounds[k + 1] - bounds[k]
        if len(set(map(id, picks))) == 1:
            counts = [n]
            picks = picks[:1]
        else:
            ts = times[bounds[k] : bounds[k + 1]]
            at = np.searchsorted(np.array(edges, dtype=np.uint64), ts, side="right")
            counts = np.bincount(at, minlength=len(reps)).tolist()
        for fn, c in zip(picks, counts, strict=True):
            if c and fn is not None and fn.prog is not None:
                out[fn.prog.id][ip] += c
    return {k: dict(v) for k, v in out.items()}
