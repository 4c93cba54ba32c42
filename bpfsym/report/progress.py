"""A report's progress bar: on stderr, only on a TTY and only for large files."""

from __future__ import annotations

import sys

from bpfsym.read.perfdata import PerfData

PROGRESS_MIN_BYTES = 64 << 20


class Progress:
    """The share of the file read so far, as a bar that done() wipes again."""

    def __init__(self, pd: PerfData, size: int | None = None) -> None:
        self.size = (pd.file_size or 0) if size is None else size  # or a part's share
        self.on = self.size >= PROGRESS_MIN_BYTES and sys.stderr.isatty()
        self.next = 0
        self.step = max(self.size // 100, 1)

    def tick(self, off: int) -> None:
        if self.on and off >= self.next:
            pct = min(100, off * 100 // self.size)
            bar = "#" * (pct // 4)
            sys.stderr.write(f"\r[{bar:<25}] {pct:3d}% reading {self.size >> 20} MB")
            sys.stderr.flush()
            self.next = off + self.step

    def done(self) -> None:
        if self.on:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()
