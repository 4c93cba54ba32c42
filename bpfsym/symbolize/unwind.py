"""User stacks of `perf record --call-graph dwarf` samples, unwound with DWARF CFI.

Such samples carry the user registers (PERF_SAMPLE_REGS_USER) and a copy of the top of
the user stack (PERF_SAMPLE_STACK_USER) instead of a user call chain; perf record sets
attr.exclude_callchain_user, so PERF_SAMPLE_CALLCHAIN holds only the kernel part. perf
report unwinds them with libunwind or libdw; this module does the same with the call
frame information of the mapped binaries (.eh_frame, else .debug_frame, read with
pyelftools), the sampled registers and the sampled stack bytes only: never the live
process, never code bytes.

    unwinder = Unwinder()
    got = unwinder.unwind("x86_64", regs, stack, maps)   # maps(addr) -> mapped file or None
    got.ips     # leaf pc first, then each caller's return address - 1, as perf reports them
    got.reason  # None, or why unwinding stopped early (counted by the report)

Caller addresses are reported as perf does (tools/perf/util/unwind-libunwind-local.c,
get_entries; unwind-libdw.c, frame_callback): the return address minus one, so that the
address falls in the call instruction (a noreturn call may be the last instruction of a
function), except for the frame a signal interrupted (the one above a signal trampoline,
whose CIE has augmentation "S"): its pc is exact. The trampoline's own frame is reported
at its "return address" minus one too, which perf 6.1 shows as [unknown] (glibc's
__restore_rt FDE starts one byte before the symbol for this lookup). The frame limit is
perf's: 127 entries, the leaf included (kernel.perf_event_max_stack's default, which
perf report uses as its max_stack).

Where perf 6.1 (x86-64, libunwind) and this module differ, perf is wrong:
- perf cannot read the last word of the stack copy (access_mem's `addr + 8 >= end`), so
  where a return address sits there its chain is one frame shorter;
- where a stack read fails (a truncated copy) perf appends one bogus entry, 0 - 1,
  shown as [unknown]; here the chain stops with the reason TRUNCATED;
- perf's libunwind reads no .debug_frame on x86-64: code with CFI only there stops at
  its leaf; here .debug_frame is read after .eh_frame.

Speed: each binary's FDEs are found through .eh_frame_hdr and decoded when first used;
the rule of each address is kept per maps object, and so is a memo of whole walks keyed
by (pc, sp) and checked against only the stack words the result depended on (saved
registers that decide nothing are not compared), so a sample whose stack repeats an
earlier one's call path costs one struct.unpack.

The sampled fields are read from a raw PERF_RECORD_SAMPLE with ``UserSampleLayout``; the
record layout is include/uapi/linux/perf_event.h's (PERF_RECORD_SAMPLE).
"""

from __future__ import annotations

import bisect
import os
import struct
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from bpfsym.read.elf import DEBUG_ROOT, build_id_cache_file
from bpfsym.read.user_stack import (
    REGS_ABI_32,
    REGS_ABI_64,
    REGS_ABI_NONE,
    UserSampleLayout,
)
from bpfsym.symbolize.cfi import (
    ARCH_NAMES,
    R_EXPRESSION,
    R_REGISTER,
    R_UNDEFINED,
    R_VAL_EXPRESSION,
    R_VAL_OFFSET,
    REGSETS,
    X86_64,
    Binary,
    RegSet,
    Row,
    load_binary,
)
from bpfsym.symbolize.dwarf_expr import _MASK, SRC_KNOWN, SRC_SAMPLE, _Frame
from bpfsym.symbolize.unwind_stops import (
    ABI_32,
    FRAME_LIMIT,
    MAX_FRAMES,
    NO_BINARY,
    NO_MAP,
    NO_PROGRESS,
    NO_REGISTER,
    NO_REGS,
    NO_STACK,
    UNSUPPORTED,
    UnwindError,
    _Stop,
)


class MappedFile(Protocol):
    """What ``maps`` gives for an address (bpfsym.symbolize.MapEntry has these)."""

    start: int
    end: int
    pgoff: int
    filename: str
    build_id: str


MapLookup = Callable[[int], "MappedFile | None"]


class Unwound(NamedTuple):
    """One unwound user stack: perf's callchain entries, leaf first, and why it stopped."""

    ips: tuple[int, ...]
    reason: str | None = None  # None: unwound to the outermost frame
    detail: str = ""  # the address, file or size behind the reason


# the memo of whole unwindings: at most this many per maps object, and this many stack
# layouts per (pc, sp) (a function called from several places at the same depth)
MEMO_ENTRIES = 200_000

MEMO_WAYS = 8


class _Rows(dict):
    """Lookup address -> its Row or (reason, detail), for one maps object."""

    def __init__(self, maps: MapLookup) -> None:
        super().__init__()
        self.maps = maps


class _MapsState:
    """What an Unwinder keeps per maps object (valid while the maps do not change)."""

    def __init__(self, maps: MapLookup) -> None:
        self.maps = maps
        self.rows: dict[str, _Rows] = {}  # by register set
        # (pc, sp, stack length, arch) -> [(struct of the words compared, their values,
        # the result)]: a walk whose result depends only on those is not done again
        self.memo: dict[tuple, list[tuple[struct.Struct, tuple, Unwound]]] = {}
        self.entries = 0


class Unwinder:
    """Unwinds sampled user stacks; keeps every binary's CFI and decoded rows it used.

    root is prepended to mapped file names (perf's --symfs); buildid_dir is perf's
    build-id cache ($PERF_BUILDID_DIR, else ~/.debug), where perf record keeps a copy of
    every binary with samples; binaries whose file is gone, replaced (another build id)
    or never a file ([vdso]) are looked up there (unless cache is False: a report with
    --symfs reads nothing of the host), then in debug_dirs (separate debug files, which
    may hold .debug_frame).
    """

    def __init__(
        self,
        max_frames: int = MAX_FRAMES,
        root: str = "",
        buildid_dir: str | None = None,
        debug_dirs: Sequence[str] = (DEBUG_ROOT,),
        little: bool = True,
        cache: bool = True,
    ) -> None:
        if max_frames < 1:
            raise UnwindError(f"frame limit {max_frames} < 1")
        self.max_frames = max_frames
        self.root = root
        self.buildid_dir = buildid_dir
        self.debug_dirs = tuple(debug_dirs)
        self.little = little
        self.cache = cache
        self.binaries: dict[tuple[str, str], Binary | tuple[str, str]] = {}
        # per maps object: the rule of each address, and the memo of unwindings
        self._by_maps: weakref.WeakKeyDictionary[Any, _MapsState]
        self._by_maps = weakref.WeakKeyDictionary()

    def binary(self, filename: str, build_id: str) -> Binary | tuple[str, str]:
        """The CFI of a mapped file (cached), or (reason, detail)."""
        key = (filename, build_id)
        got = self.binaries.get(key)
        if got is None:
            got = self.binaries[key] = self._find(filename, build_id)
        return got

    def _find(self, filename: str, build_id: str) -> Binary | tuple[str, str]:
        first: Binary | tuple[str, str] | None = None
        if not filename.startswith("["):
            first = load_binary(self.root + filename, build_id)
            if isinstance(first, Binary):
                return first
        cands = []
        if build_id:
            cached = None
            if self.cache:
                cached = build_id_cache_file(build_id, self.buildid_dir, ("elf", "vdso", "debug"))
            if cached is not None:
                cands.append(cached)
            for d in self.debug_dirs:
                cands.append(os.path.join(d, build_id[:2], build_id[2:] + ".debug"))
        for c in cands:
            if os.path.isfile(c):
                got = load_binary(c, build_id)
                if isinstance(got, Binary):
                    return got
                if first is None:
                    first = got
        if first is None:
            first = (NO_BINARY, f"{filename} (build id {build_id or 'unknown'})")
        return first

    def unwind(
        self,
        arch: str,
        regs: Mapping[int, int],
        stack: bytes,
        maps: MapLookup,
        sp: int | None = None,
        abi: int = REGS_ABI_64,
    ) -> Unwound:
        """Unwind one sample: regs by perf register number, stack the bytes copied from
        sp (default regs[SP]) up, maps the address -> mapped file lookup of the process
        at the sample's time. Never raises for bad data: it stops with a reason.

        The rule found for each address is kept per maps object (a MapList, or any
        callable that can be weakly referenced): give the same one for every sample of
        a process while its maps do not change."""
        rs = REGSETS.get(ARCH_NAMES.get(arch, arch))
        if rs is None:
            raise UnwindError(f"no DWARF unwinding for architecture {arch!r}")
        if abi == REGS_ABI_NONE or not regs:
            return Unwound((), NO_REGS)
        pc = regs.get(rs.perf_ip)
        if pc is None:
            return Unwound((), NO_REGS, "no instruction pointer among the registers")
        if abi == REGS_ABI_32:
            return Unwound((pc,), ABI_32)
        if not stack:
            return Unwound((pc,), NO_STACK)
        base = sp if sp is not None else regs.get(rs.perf_sp)
        if base is None:
            return Unwound((pc,), NO_REGS, "no stack pointer among the registers")
        state = self._state_for(maps)
        key = (pc, base, len(stack), rs.name)
        seen = state.memo.get(key)
        if seen is not None:
            for words, values, result in seen:
                if words.unpack_from(stack, 0) == values:
                    return result
        get = regs.get
        dregs = [get(p) for p in rs.perf_of_dwarf]
        src = [SRC_SAMPLE] * rs.nregs
        src[rs.sp] = SRC_KNOWN  # sp and pc are the memo's key
        if rs.ip >= 0:
            src[rs.ip] = SRC_KNOWN
        fr = _Frame(dregs, src, stack, base, self.little)
        ips = [pc]
        try:
            rows = state.rows.get(rs.name)
            if rows is None:
                rows = state.rows[rs.name] = _Rows(maps)
            self._walk(rs, fr, pc, ips, rows)
            result = Unwound(tuple(ips), None)
        except _Stop as s:
            result = Unwound(tuple(ips), s.reason, s.detail)
        if fr.pure and state.entries < MEMO_ENTRIES and (seen is None or len(seen) < MEMO_WAYS):
            # the same pc and sp with these stack words unwind the same way
            offs = sorted(fr.needed)
            fmt = ["<" if self.little else ">"]
            at = 0
            for o in offs:
                fmt.append(f"{o - at}xQ" if o > at else "Q")
                at = o + 8
            words = struct.Struct("".join(fmt))
            state.memo.setdefault(key, []).append((words, words.unpack_from(stack, 0), result))
            state.entries += 1
        return result

    def _state_for(self, maps: MapLookup) -> _MapsState:
        try:
            got = self._by_maps.get(maps)
            if got is None:
                got = self._by_maps[maps] = _MapsState(maps)
            return got
        except TypeError:  # not weakly referable: nothing kept across samples
            return _MapsState(maps)

    def _resolve(self, rs: RegSet, maps: MapLookup, addr: int) -> Row | tuple[str, str]:
        m = maps(addr)
        if m is None or not m.start <= addr < m.end:
            return (NO_MAP, f"{addr:#x}")
        b = self.binary(m.filename, m.build_id)
        if not isinstance(b, Binary):
            return b
        if b.arch != rs.name:
            return (UNSUPPORTED, f"{os.path.basename(b.path)} is for {b.arch}, not {rs.name}")
        return b.row(addr - m.start + m.pgoff)

    def _walk(self, rs: RegSet, fr: _Frame, pc: int, ips: list[int], rows: _Rows) -> None:
        exact = True  # pc is exact (the leaf, or a frame a signal interrupted)
        cfa_prev = -1
        limit = self.max_frames
        regs = fr.regs
        src = fr.src
        needed = fr.needed
        stack = fr.stack
        base = fr.base
        last = len(stack) - 8  # the last offset a u64 can be read at
        unpack = fr.u64
        ip_col = rs.ip
        sp_col = rs.sp
        mask = rs.addr_mask
        while True:
            look = pc if exact else pc - 1
            row = rows.get(look)
            if row is None:
                row = rows[look] = self._resolve(rs, rows.maps, look)
            if row.__class__ is not Row:
                raise _Stop(*row)  # type: ignore[misc]
            assert isinstance(row, Row)
            if ip_col >= 0:
                regs[ip_col] = pc
            cr = row.cfa_reg
            if cr >= 0:
                v = regs[cr]
                if v is None:
                    raise _Stop(NO_REGISTER, f"DWARF register {cr} for the CFA")
                if src[cr] != SRC_KNOWN:
                    fr.use(cr)
                cfa = (v + row.cfa_off) & _MASK
            else:
                cfa = fr.expr(row.cfa_expr, [])
            new = regs.copy()
            nsrc = src.copy()
            for r, off in row.saved:
                o = cfa + off - base
                if 0 <= o <= last:
                    new[r] = unpack(stack, o)[0]
                    nsrc[r] = o
                else:
                    fr.read((cfa + off) & _MASK)  # raises: says why it cannot
            if row.other:
                self._other(fr, row, regs, new, nsrc, cfa)
            if row.ra_undefined:
                return  # the outermost frame
            ra_col = row.ra
            ra = new[ra_col]
            if ra is None:
                raise _Stop(NO_REGISTER, f"return address column {ra_col}")
            s = nsrc[ra_col]
            if s >= 0:
                needed.add(s)
            elif s == SRC_SAMPLE:
                fr.pure = False
            if not row.sp_rule:
                new[sp_col] = cfa  # the caller's stack pointer is the CFA
                nsrc[sp_col] = SRC_KNOWN
            ra &= mask
            if ra == 0:
                return  # a zero return address ends the chain, as in libunwind
            if cfa == cfa_prev and ra == pc:
                raise _Stop(NO_PROGRESS, f"{pc:#x}, CFA {cfa:#x}")
            if len(ips) >= limit:
                raise _Stop(FRAME_LIMIT, f"{limit} frames")
            cfa_prev = cfa
            # after a signal frame the pc is where the signal interrupted: exact, not a
            # return address (libdw's "activation" frames, dwfl_frame_pc)
            exact = row.signal
            regs[:] = new
            src[:] = nsrc
            pc = ra
            ips.append(ra if exact else ra - 1)

    @staticmethod
    def _other(
        fr: _Frame, row: Row, regs: list[int | None], new: list, nsrc: list[int], cfa: int
    ) -> None:
        for r, kind, arg in row.other:
            if kind == R_REGISTER:
                new[r] = regs[arg]
                nsrc[r] = fr.src[arg]
                continue
            if kind == R_VAL_OFFSET:
                new[r] = (cfa + arg) & _MASK
            elif kind == R_UNDEFINED:
                new[r] = None
            elif kind == R_EXPRESSION:
                new[r] = fr.read(fr.expr(arg, [cfa]))  # the word read is in fr.needed
            elif kind == R_VAL_EXPRESSION:
                new[r] = fr.expr(arg, [cfa])
            else:
                raise _Stop(UNSUPPORTED, f"register rule {kind}")
            nsrc[r] = SRC_KNOWN


@dataclass
class FileMap:
    """A mapped file (for callers without their own map type, and the tests)."""

    start: int
    end: int
    pgoff: int
    filename: str
    build_id: str = ""


class MapList:
    """A process's maps sorted by start, looked up by address (a ``maps`` for unwind)."""

    def __init__(self, maps: Sequence[MappedFile]) -> None:
        self.maps = sorted(maps, key=lambda m: m.start)
        self.starts = [m.start for m in self.maps]

    def __call__(self, addr: int) -> MappedFile | None:
        return find_map(self.maps, self.starts, addr)


def overlay(maps: Sequence[FileMap], new: FileMap) -> list[FileMap]:
    """maps with new mapped over them: what it overlaps is cut away, the rest of a map
    kept with its file offset moved along (perf's maps__fixup_overlappings)."""
    out = []
    for m in maps:
        if m.end <= new.start or m.start >= new.end:
            out.append(m)
            continue
        if m.start < new.start:
            out.append(FileMap(m.start, new.start, m.pgoff, m.filename, m.build_id))
        if m.end > new.end:
            moved = m.pgoff + (new.end - m.start)
            out.append(FileMap(new.end, m.end, moved, m.filename, m.build_id))
    out.append(new)
    out.sort(key=lambda m: m.start)
    return out


def find_map(maps: Sequence[MappedFile], starts: Sequence[int], addr: int) -> MappedFile | None:
    """The map holding addr in maps sorted by start (starts: their starts), or None."""
    i = bisect.bisect_right(starts, addr) - 1
    if i < 0:
        return None
    m = maps[i]
    return m if addr < m.end else None


@dataclass
class UnwoundSample:
    """One sample of a file read by ``unwind_samples``."""

    pid: int
    tid: int
    time: int
    period: int
    cpumode: int  # header.misc & 7 (1 kernel, 2 user)
    ip: int
    kernel: tuple[int, ...]  # PERF_SAMPLE_CALLCHAIN without its context markers
    user: Unwound | None  # None: the event samples no user stack
    maps: MapList  # the process's maps at the sample


def unwind_samples(path: str, unwinder: Unwinder | None = None, arch: str = "") -> Any:
    """Yield an UnwoundSample for every sample of a perf.data file, in file order.

    A reference pass for tests and bench/, until bpfsym report's aggregator unwinds in
    its own (time-ordered) pass: maps are those of MMAP/MMAP2 records seen so far (in
    file order: perf writes a process's maps before its samples), build ids from the
    header's HEADER_BUILD_ID (or the MMAP2 record), the architecture from HEADER_ARCH
    unless given.
    """
    from bpfsym.formats import fixed_head, struct_of
    from bpfsym.formats import perf as K
    from bpfsym.formats import perfdata as F
    from bpfsym.read.perfdata import PerfData

    with PerfData(path) as pd:
        if unwinder is None:
            unwinder = Unwinder(little=pd.little)
        arch = arch or pd.header.arch or X86_64
        bids = {b.filename: b.build_id for b in pd.header.build_ids}
        maps: dict[int, list[FileMap]] = {}
        lists: dict[int, MapList] = {}
        layouts: dict[int, UserSampleLayout] = {}
        at: dict[int, tuple[int, ...]] = {}  # per event: where pid, tid, time, period, ip are
        L = pd.L  # the records' heads, as report.sideband reads them
        mmap_head = fixed_head(L.mmap, "filename")[0]  # pid, tid, addr, len, pgoff
        mmap2_head = fixed_head(L.mmap2, "filename")[0]  # ... dev_or_build_id, prot, flags
        mmap2_bid = struct_of(L.mmap2_build_id)[0]  # size, build_id
        comm_head = fixed_head(L.comm, "comm")[0]  # pid, tid
        fork_body = fixed_head(L.fork, "time")[0]  # pid, ppid, tid, ptid
        for rtype, misc, buf, start, size, _off in pd.records():
            if rtype in (K.RECORD_MMAP, K.RECORD_MMAP2):
                head = mmap2_head if rtype == K.RECORD_MMAP2 else mmap_head
                pid, _tid, addr, length, pgoff, *rest = head.unpack_from(buf, start + 8)
                raw = bytes(buf[start + 8 + head.size : start + size])
                filename = raw[: raw.find(b"\0")].decode("utf-8", "replace")
                bid = bids.get(filename, "")
                if rtype == K.RECORD_MMAP2 and misc & F.MISC_MMAP_BUILD_ID:
                    n, got_bid = mmap2_bid.unpack_from(rest[0])
                    bid = got_bid[: min(n, 20)].hex()
                lst = maps.setdefault(pid, [])
                lst[:] = overlay(lst, FileMap(addr, addr + length, pgoff, filename, bid))
                lists.pop(pid, None)
            elif rtype == K.RECORD_COMM and misc & F.MISC_COMM_EXEC:
                pid = comm_head.unpack_from(buf, start + 8)[0]
                maps.pop(pid, None)
                lists.pop(pid, None)
            elif rtype == K.RECORD_FORK:
                pid, ppid = fork_body.unpack_from(buf, start + 8)[:2]
                if pid != ppid and ppid in maps and pid not in maps:
                    maps[pid] = list(maps[ppid])
            elif rtype == K.RECORD_SAMPLE:
                ev = pd.attr_of_sample(buf, start, size)
                lay = layouts.get(ev.index)
                if lay is None:
                    lay = layouts[ev.index] = UserSampleLayout.of(ev, pd.little)
                    at[ev.index] = tuple(
                        ev.fields.index(f) if f in ev.fields else -1
                        for f in ("pid", "tid", "time", "period", "ip")
                    )
                pid_i, tid_i, t_i, per_i, ip_i = at[ev.index]
                v = ev.prefix.unpack_from(buf, start + 8)
                pid = v[pid_i] if pid_i >= 0 else -1
                ml = lists.get(pid)
                if ml is None:
                    ml = lists[pid] = MapList(maps.get(pid, []))
                chain: tuple[int, ...] = ()
                if ev.sample_type & K.SAMPLE_CALLCHAIN:
                    c = pd.callchain(ev, buf, start, size)
                    if c:
                        chain = tuple([x for x in c if x < F.CONTEXT_MAX])
                us = lay.extract(buf, start, size)
                got = None
                if us is not None:
                    got = unwinder.unwind(arch, us.regs, us.stack, ml, abi=us.abi)
                yield UnwoundSample(
                    pid,
                    v[tid_i] if tid_i >= 0 else -1,
                    v[t_i] if t_i >= 0 else 0,
                    v[per_i] if per_i >= 0 else 1,
                    misc & 7,
                    v[ip_i] if ip_i >= 0 else 0,
                    chain,
                    got,
                    ml,
                )
