"""kallsyms text: parsed, looked up (in full with numpy, or in place), relocated.

A kallsyms table names an address by the last symbol starting at or below it, as perf
does (its symbol_type__filter types only, no zero addresses, the last of several lines at
one address). Text comes from /proc/kallsyms (live.host), a side file or --kallsyms.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from bpfsym.errors import FormatError
from bpfsym.model import Capture, KernelSymbol
from bpfsym.read.arrays import kallsyms_lines, stable_argsort

KALLSYMS_TYPES = set("TtWwDdBbul")  # perf's symbol_type__filter for kallsyms

KALLSYMS_TYPES_B = b"TtWwDdBbul"


def parse_kallsyms(text: str) -> list[KernelSymbol]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mod = parts[3].strip("[]") if len(parts) > 3 else ""
        out.append(KernelSymbol(int(parts[0], 16), parts[1], parts[2], mod))
    out.sort(key=lambda s: s.addr)
    return out


def symbol_address(text: str, name: str) -> int | None:
    """The address of the first kallsyms line naming `name` (a ref-reloc symbol: _text)."""
    at = text.find(f" {name}\n")
    while at >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        parts = text[line_start:at].split()
        if len(parts) == 2:  # "addr type" before the name: a whole field, not a suffix
            try:
                return int(parts[0], 16)
            except ValueError:
                return None
        at = text.find(f" {name}\n", at + 1)
    return None


def relocate_kallsyms(text: str, delta: int) -> str:
    """kallsyms text with every address moved down by delta: the host's (KASLR) layout
    put back into the one a perf.data recorded, as perf's kallsyms__delta does."""
    if not delta:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        addr, sep, rest = line.partition(" ")
        try:
            out.append(f"{(int(addr, 16) - delta) & (2**64 - 1):0{len(addr)}x}{sep}{rest}")
        except ValueError:
            out.append(line)
    return "".join(out)


SEARCHES_IN_PLACE = 1000  # KernelSymbols.index: lookups before it makes a list of addresses


class KernelSymbols:
    """A kallsyms table: symbol at ip is the last one starting at or below it (as perf does)."""

    def __init__(self, syms: list[KernelSymbol], origin: str, note: str = "") -> None:
        self.origin = origin
        self.note = note or origin
        self._line: Any = None
        self._build([(s.addr, s.type, s.name, s.module) for s in syms])

    @classmethod
    def from_text(
        cls, text: str | bytes, origin: str, note: str = "", np: Any = None
    ) -> KernelSymbols:
        """From /proc/kallsyms text (as read: bytes; or str), without building a
        KernelSymbol per line.

        With numpy (np), addresses and types are read column-wise and a line is split
        (and decoded) only when a lookup lands on it.
        """
        self = cls.__new__(cls)
        self.origin = origin
        self.note = note or origin
        self._line = None
        if np is not None and self._columns(text, np):
            return self
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        rows = []
        for line in text.splitlines():
            parts = line.split(None, 3)
            if len(parts) < 3:
                continue
            mod = parts[3].strip()[1:-1] if len(parts) > 3 else ""
            try:
                rows.append((int(parts[0], 16), parts[1], parts[2], mod))
            except ValueError:
                continue  # not a kallsyms line
        self._build(rows)
        return self

    def _columns(self, text: str | bytes, np: Any) -> bool:
        """The numpy reading of from_text; False when the text is not plain kallsyms."""
        if not text.isascii():
            return False
        raw = text if isinstance(text, bytes) else text.encode("ascii")
        if not raw.endswith(b"\n"):
            raw += b"\n"
        got = kallsyms_lines(np, raw)
        if got is None:
            return False
        buf, starts, ends, width, addr = got
        wanted = np.zeros(256, dtype=bool)
        wanted[list(KALLSYMS_TYPES_B)] = True
        # lines ending "\t[bpf]": kernel_kallsyms cuts those, so this is other text
        tail = ends[ends >= 6]
        bpf = tail[(buf[tail - 5] == ord("[")) & (buf[tail - 4] == ord("b"))]
        if any(raw[e - 6 : e] == b"\t[bpf]" for e in bpf.tolist()):
            return False
        keep = np.flatnonzero(wanted[buf[starts + width + 1]] & (addr != 0))
        a = addr[keep]
        if bool((a[1:] < a[:-1]).any()):  # the kernel's own lines come sorted; modules may not
            order = keep[stable_argsort(np, a)]
            a = addr[order]
        else:
            order = keep
        last = np.ones(len(a), dtype=bool)  # of one address, the last line (see _build)
        last[:-1] = a[1:] != a[:-1]
        order = order[last]
        self._set_columns(raw, addr[order], starts[order], ends[order])
        return True

    def _set_columns(self, raw: Any, addr: Any, starts: Any, ends: Any) -> None:
        self._addr_np = addr
        self._addrs: list[int] | None = None  # made once one-by-one lookups are many
        self._searches = 0  # one-by-one lookups searched in the numpy column so far
        self._line = (raw, starts, ends)
        self._made: dict[int, KernelSymbol] = {}

    def columns(self) -> tuple[Any, Any, Any, Any] | None:
        """What the numpy reading made of the text: (the text, each symbol's address,
        its line's start and end in the text), by address; None for a table made another
        way. from_columns makes the same table of them (report's second process gets
        the first one's so: report.split.KernelHandoff)."""
        if self._line is None:
            return None
        raw, starts, ends = self._line
        return raw, self._addr_np, starts, ends

    @classmethod
    def from_columns(
        cls, raw: Any, addr: Any, starts: Any, ends: Any, origin: str, note: str = ""
    ) -> KernelSymbols:
        """The table columns() gave (raw: the text, as bytes or any buffer of them)."""
        self = cls.__new__(cls)
        self.origin = origin
        self.note = note or origin
        self._set_columns(raw, addr, starts, ends)
        return self

    def _build(self, rows: list[tuple[int, str, str, str]]) -> None:
        by_addr: dict[int, tuple[int, str, str, str]] = {}
        types = KALLSYMS_TYPES
        for r in rows:
            if r[1] not in types or r[3] == "bpf" or r[0] == 0:
                continue
            # perf fixes symbol ends before dropping duplicates, so of several symbols at
            # one address only the last has a length, and choose_best_symbol keeps it
            by_addr[r[0]] = r
        addrs = self._addrs = sorted(by_addr)
        self._syms = [KernelSymbol(*by_addr[a]) for a in addrs]

    @property
    def addrs(self) -> list[int]:
        """The symbols' start addresses, sorted (bulk lookups use addr_array instead)."""
        got = self._addrs
        if got is None:
            got = self._addrs = self._addr_np.tolist()
        return got

    @property
    def syms(self) -> list[KernelSymbol]:
        if self._line is not None:
            return [self._sym(i) for i in range(len(self.addrs))]
        return self._syms

    def _sym(self, i: int) -> KernelSymbol:
        s = self._made.get(i)
        if s is None:
            raw, starts, ends = self._line  # ASCII: a line decodes as it reads
            parts = str(raw[int(starts[i]) : int(ends[i])], "ascii").split(None, 3)
            mod = parts[3].strip()[1:-1] if len(parts) > 3 else ""
            s = self._made[i] = KernelSymbol(int(self._addr_np[i]), parts[1], parts[2], mod)
        return s

    def __len__(self) -> int:
        return len(self._addrs) if self._addrs is not None else len(self._addr_np)

    def lookup(self, ip: int) -> KernelSymbol | None:
        i = self.index(ip)
        return self.at(i) if i >= 0 else None

    def addr_array(self, np: Any) -> Any:
        """The symbols' start addresses as a numpy uint64 array (for bulk lookups)."""
        got = getattr(self, "_addr_np", None)
        if got is None:
            got = self._addr_np = np.array(self.addrs, dtype=np.uint64)
        return got

    def index(self, ip: int) -> int:
        """The index of the symbol covering ip (see at), -1 below the first one."""
        addrs = self._addrs
        if addrs is None:
            # the numpy reading: a few lookups search its column (a list of every address
            # costs 5 ms); once they are many, bisect over that list is quicker
            self._searches += 1
            if self._searches <= SEARCHES_IN_PLACE:
                return int(self._addr_np.searchsorted(ip, side="right")) - 1
            addrs = self.addrs
        return bisect.bisect_right(addrs, ip) - 1

    def at(self, i: int) -> KernelSymbol:
        return self._sym(i) if self._line is not None else self._syms[i]


GRID_BYTES = 4096


class SortedKallsyms(KernelSymbols):
    """/proc/kallsyms text looked up where it lies, for reports too small to be worth
    numpy: the kernel's own symbols come sorted by address (scripts/kallsyms sorts them
    and the kernel's lookups rely on it), so a lookup is a binary search over the text's
    lines; the module lines after them ("\t[name]") are read in full. It answers as
    KernelSymbols does: wanted types only, no zero addresses, the last line of one address.
    A symbol's index is its line's offset in the text (module symbols: past the kernel's).
    A line found not to parse raises bad(error) (default: a FormatError naming origin)."""

    def __init__(
        self,
        text: str,
        origin: str,
        note: str = "",
        bad: Callable[[Exception], Exception] | None = None,
    ) -> None:
        self.origin = origin
        self.note = note or origin
        self._line = None
        self.text = text
        self._bad = bad or (lambda e: FormatError(origin, 0, f"not a kallsyms line ({e})"))
        self._width = max(text.find(" "), 1)
        lo, hi = 0, len(text)  # the first module line: the kernel's lines have no "\t["
        while lo < hi:
            start = self._start(lo + (hi - lo) // 2)
            end = self._end(start)
            if "\t[" in text[start:end]:
                hi = start
            else:
                lo = end + 1
        self.core_end = min(lo, len(text))
        try:  # the few module lines, in full
            mods = KernelSymbols(parse_kallsyms(text[self.core_end :]), origin)
        except ValueError as e:
            raise self._bad(e) from None
        self._mod_addrs = mods.addrs
        self._mods = mods.syms
        self._made: dict[int, KernelSymbol] = {}
        grid = sorted({self._start(p) for p in range(0, self.core_end, GRID_BYTES)})
        self._grid = grid  # line starts about GRID_BYTES apart, and their addresses
        self._grid_addrs = [self._addr(g) for g in grid]
        self._windows: dict[int, tuple[list[int], list[int], list[bool]]] = {}

    def _start(self, pos: int) -> int:
        return self.text.rfind("\n", 0, pos) + 1

    def _end(self, start: int) -> int:
        end = self.text.find("\n", start)
        return len(self.text) if end < 0 else end

    def _addr(self, start: int) -> int:
        try:
            return int(self.text[start : start + self._width], 16)
        except ValueError as e:
            raise self._bad(e) from None

    def __len__(self) -> int:
        core = self.text.count("\n", 0, self.core_end)
        if core and not self._addr(self._start(self.core_end - 1)):
            core = 0  # every address zero (sorted): kptr_restrict hides them
        return core + len(self._mods)

    def _window(self, j: int) -> tuple[list[int], list[int], list[bool]]:
        """The lines from grid line j to the next: starts, addresses, wanted or not."""
        got = self._windows.get(j)
        if got is None:
            start = self._grid[j]
            end = self._grid[j + 1] if j + 1 < len(self._grid) else self.core_end
            starts, addrs, wanted = [], [], []
            w = self._width
            pos = start
            for line in self.text[start:end].splitlines(keepends=True):
                try:
                    a = int(line[:w], 16)
                except ValueError as e:
                    raise self._bad(e) from None
                starts.append(pos)
                addrs.append(a)
                wanted.append(line[w + 1 : w + 2] in KALLSYMS_TYPES and a != 0)
                pos += len(line)
            got = self._windows[j] = (starts, addrs, wanted)
        return got

    def index(self, ip: int) -> int:
        i = -1
        if self.core_end and self._grid_addrs[0] <= ip:
            # the 4 KB window (bisect in C), read once, then the line in it
            j = bisect.bisect_right(self._grid_addrs, ip) - 1
            starts, addrs, wanted = self._window(j)
            k = bisect.bisect_right(addrs, ip) - 1
            while True:
                while k >= 0 and not wanted[k]:
                    k -= 1
                if k >= 0 or j == 0:
                    break
                j -= 1  # none wanted here: the window before
                starts, addrs, wanted = self._window(j)
                k = len(starts) - 1
            i = starts[k] if k >= 0 else -1
        m = bisect.bisect_right(self._mod_addrs, ip) - 1
        if m >= 0 and (i < 0 or self._mod_addrs[m] >= self._addr(i)):
            return self.core_end + m  # modules come later in the text: theirs wins a tie
        return i

    def at(self, i: int) -> KernelSymbol:
        if i >= self.core_end:
            return self._mods[i - self.core_end]
        s = self._made.get(i)
        if s is None:
            parts = self.text[i : self._end(i)].split(None, 3)
            s = self._made[i] = KernelSymbol(int(parts[0], 16), parts[1], parts[2], "")
        return s

    def _order(self) -> list[int]:
        """Every symbol's index, by address (as KernelSymbols lists them)."""
        by_addr: dict[int, int] = {}
        for j in range(len(self._grid)):
            starts, addrs, wanted = self._window(j)
            for start, a, w in zip(starts, addrs, wanted, strict=True):
                if w:
                    by_addr[a] = start
        for k, a in enumerate(self._mod_addrs):
            by_addr[a] = self.core_end + k
        return [by_addr[a] for a in sorted(by_addr)]

    @property
    def addrs(self) -> list[int]:
        return [self.at(i).addr for i in self._order()]

    @property
    def syms(self) -> list[KernelSymbol]:
        return [self.at(i) for i in self._order()]

    def addr_array(self, np: Any) -> Any:
        return np.array(self.addrs, dtype=np.uint64)


def capture_kernel_symbols(cap: Capture) -> list[KernelSymbol]:
    """A side file's kallsyms snapshot (kernel part, then BPF trampolines and dispatchers),
    sorted by address; parsed from the stored text on first use (a report reads that text
    itself, faster)."""
    if not cap.kallsyms and cap.kallsyms_texts:
        rows = []
        for i, text in enumerate(cap.kallsyms_texts):
            try:
                rows += parse_kallsyms(text)
            except ValueError as e:
                raise bad_kallsyms(cap, i, e) from None
        cap.kallsyms = sorted(rows, key=lambda s: s.addr)
    return cap.kallsyms


def bad_kallsyms(cap: Capture, i: int, e: Exception) -> Exception:
    """The FormatError for a side file's KALLSYMS record i that does not parse."""
    from bpfsym.formats.sidefile import KALLSYMS

    path, off = cap.kallsyms_at[i] if i < len(cap.kallsyms_at) else ("side file", 0)
    return FormatError(path, off, f"bad record of type {KALLSYMS}: {type(e).__name__}")
