"""Kernel names for annotate's call and jump targets: of the text (t/T) and weak (w/W)
symbols of kallsyms, the first name listed at an address (aliases: the first in
kallsyms order wins), and the nearest such symbol at or below an address.

An annotation looks up a few dozen addresses, while a side file's kallsyms has some
100k lines: TextNames reads the texts column-wise with numpy (addresses and types) and
splits only the lines a lookup lands on. It answers exactly as KernelNames over the
parsed list (read.kallsyms.capture_kernel_symbols) does, and declines texts that are
not plain kallsyms lines, which then go through the parser and its errors.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from bpfsym.model import KernelSymbol
from bpfsym.read.arrays import kallsyms_lines, stable_argsort

NAMED_TYPES = b"tTwW"


class KernelNames:
    """The names of a sorted list of kernel symbols."""

    def __init__(self, kallsyms: Iterable[KernelSymbol]) -> None:
        first: dict[int, str] = {}  # aliases: the first name in kallsyms order wins
        for s in kallsyms:
            if s.type.lower() in ("t", "w") or not s.type:
                first.setdefault(s.addr, s.name)
        kernel = sorted(first.items())
        self._addrs = [a for a, _ in kernel]
        self._names = [n for _, n in kernel]
        self._first = first

    def first_at(self, addr: int) -> str | None:
        return self._first.get(addr)

    def floor(self, addr: int) -> tuple[int, str] | None:
        """(address, name) of the last symbol starting at or below addr."""
        i = bisect.bisect_right(self._addrs, addr) - 1
        return (self._addrs[i], self._names[i]) if i >= 0 else None

    def find(self, name: str) -> int | None:
        """The lowest address whose first name is name."""
        for a, n in zip(self._addrs, self._names, strict=True):
            if n == name:
                return a
        return None


class TextNames(KernelNames):
    """KernelNames of kallsyms texts (in the order a side file stores them), read lazily."""

    def __init__(self, texts: list[str], cols: list[tuple[Any, Any]], np: Any) -> None:
        self._texts = texts
        addr = np.concatenate([c[0] for c in cols])
        text = np.concatenate([np.full(len(c[0]), i, dtype=np.int64) for i, c in enumerate(cols)])
        start = np.concatenate([c[1] for c in cols])
        order = stable_argsort(np, addr)  # text by text, line by line at one address
        a = addr[order]
        first = np.ones(len(a), dtype=bool)
        first[1:] = a[1:] != a[:-1]
        order = order[first]
        self._np = np
        self._addrs = addr[order]  # searched in place: a few dozen lookups, 100k+ symbols
        self._text = text[order]
        self._start = start[order]
        self._made: dict[int, str] = {}

    @classmethod
    def from_texts(cls, texts: list[str], np: Any) -> TextNames | None:
        """The names of texts, or None when one is not plain kallsyms text."""
        cols = []
        for t in texts:
            c = _columns(t, np)
            if c is None:
                return None
            cols.append(c)
        return cls(texts, cols, np)

    def _name(self, i: int) -> str:
        got = self._made.get(i)
        if got is None:
            text = self._texts[int(self._text[i])]
            start = int(self._start[i])
            end = text.find("\n", start)
            got = self._made[i] = text[start : end if end >= 0 else len(text)].split()[2]
        return got

    def first_at(self, addr: int) -> str | None:
        if not 0 <= addr < 1 << 64:
            return None
        i = int(self._np.searchsorted(self._addrs, addr, side="left"))
        return self._name(i) if i < len(self._addrs) and int(self._addrs[i]) == addr else None

    def floor(self, addr: int) -> tuple[int, str] | None:
        if addr < 0:
            return None
        if addr >= 1 << 64:
            i = len(self._addrs) - 1
        else:
            i = int(self._np.searchsorted(self._addrs, addr, side="right")) - 1
        return (int(self._addrs[i]), self._name(i)) if i >= 0 else None

    def find(self, name: str) -> int | None:
        found = set()
        for text in self._texts:
            at = text.find(name)
            while at >= 0:
                start = text.rfind("\n", 0, at) + 1
                end = text.find("\n", at)
                parts = text[start : end if end >= 0 else len(text)].split()
                if len(parts) >= 3 and parts[2] == name and parts[1] in ("t", "T", "w", "W"):
                    found.add(int(parts[0], 16))
                at = text.find(name, at + 1)
        for a in sorted(found):
            if self.first_at(a) == name:
                return a
        return None


# bytes str.splitlines() or str.split() would treat as line or field breaks
_BREAKS = b"\r\x0b\x0c\x1c\x1d\x1e\x1f"


def _columns(text: str, np: Any) -> tuple[Any, Any] | None:
    """(address, line start) of the t/T/w/W lines of text, or None unless every
    line is `<hex address of one width> <type> <name>...` (what parse_kallsyms reads
    without skipping or failing on a line)."""
    if not text:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    if not text.isascii():
        return None
    raw = text.encode("ascii")
    if not raw.endswith(b"\n"):
        raw += b"\n"
    if any(raw.find(bytes([c])) >= 0 for c in _BREAKS):  # (a search per byte: memchr)
        return None
    got = kallsyms_lines(np, raw)
    if got is None:
        return None
    buf, starts, _ends, width, addr = got
    graphic = np.zeros(256, dtype=bool)
    graphic[0x21:0x7F] = True
    if bool((~graphic[buf[starts + width + 1]]).any() or (~graphic[buf[starts + width + 3]]).any()):
        return None
    named = np.zeros(256, dtype=bool)
    named[list(NAMED_TYPES)] = True
    keep = named[buf[starts + width + 1]]
    return addr[keep], starts[keep]
