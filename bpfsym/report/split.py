"""The bulk pass in two processes: the first half of the samples here, the second in a
forked child whose sums come back through a pipe (pickled) and are merged; the kernel
symbols the first makes are handed to the second (KernelHandoff).

Both processes apply every side-band record in the same order as a single pass would,
so each sample meets the state it would have met there; each only resolves and adds up
its own share of the samples. The result is the same as one process's.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import mmap
import os
import pickle
import signal
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from bpfsym.read.bulk import NotBulk, usable_cpus
from bpfsym.read.kallsyms import KernelSymbols
from bpfsym.report.aggregates import add_to
from bpfsym.symbolize.symbols import Sym

if TYPE_CHECKING:
    from bpfsym.report.bulk import BulkPass

WINDOW = 16 << 20  # bytes of records located and decoded at once (see docs/python-speed.md)

PARALLEL_MIN_BYTES = 16 << 20  # below this a second reading process costs what it saves

FIRST_SHARE = 0.56  # of the file, read by the first of two processes (the second also reads
# the side-band records of the first share and loads its own ELF files; the first makes the
# kernel symbols for both: KernelHandoff, docs/python-speed.md)
FIRST_SHARE_CHAINS = 0.53  # the same with call chains: per sample work dwarfs those costs

TAIL_WINDOW = 1 << 20  # the first process's windows past its share


class Share(NamedTuple):
    """Which samples a process takes: those of the first `split_at` windows (second
    False) or of the windows after them (second True); all when split_at is None."""

    windows: int | list[int]  # window sizes in bytes (a list: in turn, the last repeated)
    split_at: int | None
    second: bool = False

    def mine(self, index: int) -> bool:
        """Whether the samples of window index are this share's."""
        return self.split_at is None or (index >= self.split_at) == self.second

    def done(self, index: int) -> bool:
        """Whether the first share has read all its windows by window index."""
        return self.split_at is not None and not self.second and index >= self.split_at

    def size(self) -> int | None:
        """The first share's bytes (for its progress bar), else None: the whole file."""
        if isinstance(self.windows, list) and self.split_at:
            return sum(self.windows[: self.split_at])
        return None


SINGLE = Share(WINDOW, None)


def shares(
    size: int, parallel: bool | None, first_share: float = FIRST_SHARE
) -> tuple[Share, Share] | None:
    """When two processes should share the samples of a data section of size bytes (a
    large file and a second CPU; parallel forces it either way): the first's and the
    second's share; None to read it in one."""
    if parallel is None:
        cpus = usable_cpus()
        if size < PARALLEL_MIN_BYTES or cpus < 2:
            return None
    elif not parallel or size < 16:
        return None
    first = max(int(size * first_share) // 8 * 8, 8)
    k = -(-first // WINDOW)
    m = max(-(-(size - first) // WINDOW), 1)
    share = [max(-(-first // (8 * k)) * 8, 8)] * k
    rest = [max(-(-(size - first) // (8 * m)) * 8, 8)]
    # past its share, the first process only waits for its last samples' round
    return Share(share + [TAIL_WINDOW], k), Share(share + rest, k, True)


def run_split(bulk: BulkPass, first: Share, second: Share) -> None:
    """bulk.read(first) here and bulk.read(second) in a forked child, then the child's
    sums merged into bulk.agg."""
    rfd, wfd = os.pipe()
    hand = KernelHandoff()
    located = StartsHandoff()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        sideband = bulk.sideband
        if sideband.host is not None:
            sideband.host = sideband.host.inherit()  # the text read once, for both
        sideband.handoff = hand.second()
        bulk.located = located.second()
        try:
            try:
                bulk.read(second)
                said: tuple = ("ok", portable(bulk))
            except BaseException as e:  # noqa: BLE001 - told to the parent, which decides
                said = ("error", f"{type(e).__name__}: {e}")
            with os.fdopen(wfd, "wb") as w:
                pickle.dump(said, w, pickle.HIGHEST_PROTOCOL)  # read as it is written
        finally:
            os._exit(0)
    os.close(wfd)
    reader = os.fdopen(rfd, "rb")
    bulk.sideband.handoff = hand.first()
    bulk.located = located.first(bulk.np)
    try:
        try:
            bulk.read(first)
        finally:
            hand.done()  # what was not handed over by now, the child makes itself
            located.done()
            bulk.located = None
        same = own_symbols(bulk)  # while the child may still be reading: its merge's half
        try:
            # unpickled frame by frame as the child pickles (pickling and unpickling the
            # call chains took a fifth of a second one after the other)
            status, body = pickle.load(reader)
        except Exception:  # noqa: BLE001 - the child died before it said all
            status, body = "died", None
    except BaseException:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        reader.close()
    # the child's exit (unmapping its memory) takes a while: reaped on a thread
    threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
    if status == "died":
        raise NotBulk("the second reading process failed")
    if status != "ok":
        raise NotBulk(f"the second reading process failed: {body}")
    merge(bulk, body, same)


class KernelHandoff:
    """The kernel symbols, made once for both processes: by the first after the fork.

    The first process chooses them at its first delivery (Sideband.prepare), or before
    its first window when no side-band record moves them (a kallsyms file, a side file,
    --symfs: Sideband.relocation_free), and, when
    they are a kallsyms table read with numpy, writes its text and columns into an
    anonymous file the second one maps, which then neither reads nor parses the kallsyms
    (0.02-0.03 s for a 5 MB text, no longer before the fork). Anything else (a table made
    another way, none, or the first process's share read without one) is not handed
    over: the second process makes its own, as it would alone. Both make theirs of the
    same kallsyms source; what side-band records change (the kernel map's relocation,
    where it moves them) goes with the table as its key, and a second process that got
    another makes its own.

    The second process waits for the first one's word on a pipe, which comes when the
    first one has chosen them or at the end of its share (done): the table's key, notes
    and where its parts lie in the file (pickled), or nothing.
    """

    def __init__(self) -> None:
        self.fd = os.memfd_create("bpfsym-kernel-symbols", os.MFD_CLOEXEC)
        self.said_r, self.said_w = os.pipe()
        self.giving = self.taking = False

    def first(self) -> KernelHandoff:
        os.close(self.said_r)
        self.giving = True
        return self

    def second(self) -> KernelHandoff:
        os.close(self.said_w)
        self.taking = True
        return self

    def give(self, kernel: Any, note: str, key: Any) -> None:
        """Hand the first process's kernel symbols over (once; key: what else they
        depend on), or say there are none to take."""
        if not self.giving:
            return
        cols = kernel.columns() if isinstance(kernel, KernelSymbols) else None
        try:
            if cols is not None:
                parts = []  # (offset, length, numpy type or None for the text) of each
                pos = 0
                for part in cols:
                    pos = _aligned(pos)  # numpy reads the arrays in place (a gap reads 0)
                    parts.append((pos, len(part), getattr(part, "dtype", None)))
                    pos = _write_at(self.fd, part, pos)
                word = pickle.dumps((key, note, kernel.origin, kernel.note, parts))
                os.write(self.said_w, word)  # far under the pipe's 64 KiB: never waits
        except OSError:
            pass  # not all written: the second process makes its own (as it would alone)
        finally:
            self.done()

    def done(self) -> None:
        """The first process gives nothing more: the second stops waiting."""
        if self.giving:
            self.giving = False
            os.close(self.said_w)
            os.close(self.fd)

    def take(self, np: Any, key: Any) -> tuple[KernelSymbols, str] | None:
        """In the second process: the first one's kernel symbols and their note, made
        of the same key; None where it handed none over (waits for its word once)."""
        if not self.taking:
            return None
        self.taking = False
        try:
            with os.fdopen(self.said_r, "rb") as said:
                word = said.read()  # to the first process's done
            if not word:
                return None
            m = mmap.mmap(self.fd, 0, prot=mmap.PROT_READ)
        except OSError:
            return None  # makes its own
        finally:
            os.close(self.fd)
        given, note, origin, knote, parts = pickle.loads(word)
        if given != key:
            return None
        (at, size, _), *arrays = parts
        raw = memoryview(m)[at : at + size]  # lines are decoded from it when looked up
        addr, starts, ends = (
            np.frombuffer(m, dtype=dtype, count=n, offset=pos) for pos, n, dtype in arrays
        )
        return KernelSymbols.from_columns(raw, addr, starts, ends, origin, knote), note


class StartsHandoff:
    """The record starts of the first share's windows, located once for both processes.

    The second process walks the first share's windows before its own (for their
    side-band records), so it locates their records long before the first process
    reaches its second window: it writes each window's starts into an anonymous file
    and says where on a pipe. The first process takes what has been said when it gets
    to a window and never waits: a window not handed over yet it locates itself."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("bpfsym-record-starts", os.MFD_CLOEXEC)
        self.said_r, self.said_w = os.pipe()
        self.giving = self.taking = False
        self.end = -1  # this process's end of the pipe
        self.pos = 0  # where the next window's starts go (second process)
        self.where: dict[int, tuple[int, int]] = {}  # window -> (offset, count) (first)
        self.np: Any = None

    def first(self, np: Any) -> StartsHandoff:
        os.close(self.said_w)
        os.set_blocking(self.said_r, False)
        self.taking, self.np, self.end = True, np, self.said_r
        return self

    def second(self) -> StartsHandoff:
        os.close(self.said_r)
        self.giving, self.end = True, self.said_w
        return self

    def give(self, index: int, starts: Any) -> None:
        """In the second process: window index's record starts (int64)."""
        if not self.giving:
            return
        try:
            end = _write_at(self.fd, starts, self.pos)
            # one small write: whole on the pipe or not at all (PIPE_BUF)
            os.write(self.said_w, pickle.dumps((index, self.pos, len(starts))))
            self.pos = end
        except OSError:
            self.done()  # the first process locates the rest itself

    def take(self, index: int) -> Any:
        """In the first process: window index's record starts if the second has said
        where they are by now, else None."""
        if self.taking:
            try:
                got = os.read(self.said_r, 1 << 16)
            except BlockingIOError:
                got = None
            except OSError:
                got = b""
            if got == b"":
                self.taking = False  # the second process is done giving
            elif got:
                said = io.BytesIO(got)
                while said.tell() < len(got):
                    i, pos, n = pickle.load(said)
                    self.where[i] = (pos, n)
        at = self.where.pop(index, None)
        if at is None:
            return None
        pos, n = at
        try:
            raw = os.pread(self.fd, 8 * n, pos)
        except OSError:
            return None
        if len(raw) != 8 * n:
            return None
        return self.np.frombuffer(raw, dtype=self.np.int64)

    def done(self) -> None:
        """Hand nothing more over (either process); closes its ends, once."""
        for fd in (self.end, self.fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.end = self.fd = -1
        self.giving = self.taking = False


def _write_at(fd: int, data: Any, pos: int) -> int:
    """Write all of data's bytes (any buffer) into file fd at pos; where they end."""
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n
    return pos


def _aligned(pos: int) -> int:
    return -(-pos // 8) * 8


def portable(bulk: BulkPass) -> tuple:
    """What the parent needs of this part: per event (first-sample order) its counts,
    rows and stacks, plus the totals; symbols travel as pickled Sym objects."""
    agg = bulk.agg
    events = [(e, st.samples, st.period, st.rows, st.stacks) for e, st in agg.events.items()]
    sym = bulk.sideband.sym
    return events, agg.total, agg.lost, bulk.seq, sym.side_used, sym.comms


def _distinct_syms(events: list[tuple[dict, dict]]) -> dict[Sym, None]:
    """Each distinct symbol of (rows, stacks) pairs once, by object, in first-seen order."""
    parts: list[Iterable[Sym]] = []
    for rows, stacks in events:  # per event: its rows' symbols, then its chains'
        parts.append([x for key in rows for x in key if type(x) is Sym])
        parts.append(itertools.chain.from_iterable(chain for _head, chain in stacks))
    return dict.fromkeys(itertools.chain.from_iterable(parts))


def own_symbols(bulk: BulkPass) -> dict[tuple, Sym]:
    """This part's symbols by what they name (the first object of each): merge's half
    that needs nothing of the other part."""
    events = [(st.rows, st.stacks) for st in bulk.agg.events.values()]
    same: dict[tuple, Sym] = {}
    for x in _distinct_syms(events):
        same.setdefault(_sym_identity(x), x)
    return same


def merge(bulk: BulkPass, body: tuple, same: dict[tuple, Sym]) -> None:
    """Add the other part's sums, its symbols made these when they are alike (same: this
    part's own_symbols)."""
    events, total, lost, seq, side_used, comms = body
    sym, agg, attrs = bulk.sideband.sym, bulk.agg, bulk.pd.attrs
    theirs = _distinct_syms([(rows, stacks) for _e, _s, _p, rows, stacks in events])
    mine: dict[Sym, Sym] = {}  # the other part's symbol -> this one's
    for x in theirs:
        key = _sym_identity(x)
        got = same.get(key)
        if got is None:
            got = same[key] = x
            sym.adopt(x)
        mine[x] = got
    as_mine = mine.__getitem__

    for e, samples, period, rows, stacks in events:
        st = agg.event(attrs[e])
        st.samples += samples
        st.period += period
        for key, (p, n) in rows.items():
            add_to(st.rows, tuple(mine[x] if type(x) is Sym else x for x in key), p, n)
        for (head, chain), (p, n) in stacks.items():
            add_to(st.stacks, (head, tuple(map(as_mine, chain))), p, n)
    agg.total += total
    agg.lost += lost
    agg.records = max(bulk.seq, seq)  # the first process may stop before the end
    sym.side_used = sym.side_used or side_used
    sym.comms.update(comms)  # the comms as of the end (the first process may stop early)


def _sym_identity(s: Sym) -> tuple:
    """What makes two Sym objects (from two reading processes) the same symbol."""
    f = s.bpf
    fn = None if f is None else (f.name, f.addr, f.size, f.load, f.unload)
    return (s.name, s.dso, s.kind, s.origin, s.reason, s.start, fn)
