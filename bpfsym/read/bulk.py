"""The data section of a perf.data file as numpy views, walked in windows of records
(report's bulk reader locates and decodes records a window at a time)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from bpfsym.read.arrays import runs

if TYPE_CHECKING:
    from bpfsym.read.perfdata import PerfData

MAX_RECORD = 1 << 16  # header.size is a u16
AUXTRACE = 71  # PERF_RECORD_AUXTRACE


def file_size(path: str) -> int:
    """The file's size; 0 when it cannot be seen (its reader then says what is wrong)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def usable_cpus() -> int:
    """The CPUs this process may run on: whether a second reading process is worth it."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_numpy() -> Any:
    """numpy, or None where it is not installed (the readers then go record by record)."""
    # no linear algebra here: one BLAS thread starts faster (numpy's import spawns them)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        import numpy
    except ImportError:
        return None
    return numpy


class NotBulk(Exception):
    """The data section needs the record-by-record reader (unusual records, bad sizes)."""


class BulkData:
    """numpy views of a mapped data section and a walk over it in windows of records.

    Records of perf.data written by perf are u64-aligned (the kernel and perf pad every
    record to 8), so a record header is a u64 word whose size half-word is a multiple of
    8: the words that qualify are found at once and the chain of records through them
    is checked, falling back to walking record by record where it does not hold.
    """

    def __init__(self, pd: PerfData, np: Any, buf: mmap.mmap) -> None:
        self.pd = pd
        self.np = np
        self.buf = buf
        e = "<" if pd.little else ">"
        off = pd.data_offset
        n = (pd.data_size or 0) // 8
        self.nwords = n
        self.base = off  # file offset of word 0
        self.u64 = np.frombuffer(buf, dtype=e + "u8", count=n, offset=off)
        self.u32 = np.frombuffer(buf, dtype=e + "u4", count=2 * n, offset=off)
        self.u16 = np.frombuffer(buf, dtype=e + "u2", count=4 * n, offset=off)
        self._heads: dict[int, Any] = {}

    def heads(self, words: int) -> Any:
        """A read-only view whose item i is the `words` words from word i on (raw bytes:
        arrays.runs), so that heads(words)[starts] gathers each record's first words in
        one go, to be viewed as the records' dtype."""
        got = self._heads.get(words)
        if got is None:
            got = self._heads[words] = runs(self.np, self.u64, words)
        return got

    def windows(
        self, window: int | list[int] = 32 << 20, given: Callable[[int], Any] | None = None
    ) -> Iterator[Any]:
        """Yield, per stretch of about window bytes, the word index of each record (int64).

        window may be a list: the size of each stretch in turn, the last one repeated.
        given(j): stretch j's record starts when someone located them already (another
        reader of the same stretches: report.split), else None."""
        sizes = window if isinstance(window, list) else [window]
        n = self.nwords
        pos = 0
        j = 0
        while pos < n:
            step = max(sizes[min(j, len(sizes) - 1)] // 8, 1)
            offs = given(j) if given is not None else None
            j += 1
            hi = min(n, pos + step)
            if offs is None or not len(offs) or int(offs[0]) != pos:
                offs = self._chain(pos, hi)
                if offs is None:
                    offs = self._walk(pos, hi)
            if bool((self.u32[2 * offs] == AUXTRACE).any()):
                # its trace follows it outside header.size: the walk would read it as records
                raise NotBulk("AUXTRACE records")
            last = int(offs[-1])
            pos = last + int(self.u16[4 * last + 3]) // 8
            if pos > n:
                raise NotBulk("the last record runs past the data section")
            yield offs
        if pos != n:
            raise NotBulk("records do not end at the end of the data section")

    def _chain(self, pos: int, hi: int) -> Any:
        """Record starts in [pos, hi) found in bulk, or None when the chain does not check."""
        np = self.np
        look = min(self.nwords, hi + (F_MAX_RECORD_WORDS))
        # the size half-words copied out first (contiguous, native order): the strided
        # view is read once, not by each test (a fifth less time over a whole file)
        sizes = self.u16[4 * pos + 3 : 4 * look : 4].astype(np.uint16)
        cand = np.flatnonzero((sizes >= 8) & ((sizes & 7) == 0))
        if not len(cand) or cand[0] != 0:
            return None
        cand += pos
        types = self.u32[2 * cand]
        cand = cand[(types > 0) & (types < 128)]
        nxt = cand + (self.u16[4 * cand + 3] // 8).astype(np.int64)
        mark = np.zeros(look - pos + 1, dtype=bool)
        for _ in range(8):
            inside = cand < hi
            c, x = cand[inside], nxt[inside]
            if len(c) and c[0] == pos and bool(np.all(x[:-1] == c[1:])):
                return c
            # a word no record points at is no record (unless it is the first)
            mark[:] = False
            mark[np.minimum(nxt, look) - pos] = True
            mark[0] = True
            pointed = mark[cand - pos]
            if bool(pointed.all()):
                return None
            cand, nxt = cand[pointed], nxt[pointed]
        return None

    def _walk(self, pos: int, hi: int) -> Any:
        sizes = self.u16
        out: list[int] = []
        add = out.append
        n = self.nwords
        while pos < hi:
            size = int(sizes[4 * pos + 3])
            if size < 8 or size & 7 or pos + size // 8 > n:
                raise NotBulk("a record of odd or too small size")
            add(pos)
            pos += size // 8
        return self.np.array(out, dtype=self.np.int64)


F_MAX_RECORD_WORDS = MAX_RECORD // 8
