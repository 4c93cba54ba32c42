"""Event names as perf 6.1 prints them ("cycles:ppp", "cache-references", "sched:sched_switch").

perf names an event (struct evsel) of a perf.data from, in this order of precedence:

1. a name read from the file: HEADER_EVENT_DESC (file mode, or a pipe-mode
   PERF_RECORD_HEADER_FEATURE holding it), matched to the events by their position, not by
   their ids (header.c process_event_desc -> evlist__set_event_name, which also keeps a
   name already set); a pipe-mode PERF_RECORD_EVENT_UPDATE of type NAME, matched by id and
   replacing any name (header.c perf_event__process_event_update);
2. for a tracepoint without a name, "system:name" of the format with the attr's config as
   ID in the tracing data (header.c evsel__prepare_tracepoint_event; HEADER_TRACING_DATA,
   or the pipe-mode PERF_RECORD_HEADER_TRACING_DATA whose payload follows the record);
3. the attr itself (evsel.c evsel__name): hardware, hardware-cache, software, raw,
   breakpoint names with a modifier suffix made from the exclude_* bits and precise_ip
   (evsel__add_modifiers); "unknown tracepoint"; "unknown attr type: N" for any other type
   (perf 6.1 does not use HEADER_PMU_MAPPINGS for names: a dynamic PMU's event without a
   name from the file is "unknown attr type: 8").

Names are bytes in perf.data; they are decoded here with surrogateescape, so that a name
is never refused over its encoding and encodes back to the same bytes.

``event_name`` names one attr; ``EventNames`` replays what perf does as the header and
records arrive (read.perfdata.PerfData feeds it). The layouts (PERF_RECORD_EVENT_UPDATE,
the tracing-data and AUXTRACE headers whose payload follows the record) are in
formats.perfdata.
"""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from bpfsym.formats import fixed_head, integers, struct_of
from bpfsym.formats import perf as K

# enum perf_type_id (include/uapi/linux/perf_event.h)
TYPE_HARDWARE = 0

TYPE_SOFTWARE = 1

TYPE_TRACEPOINT = 2

TYPE_HW_CACHE = 3

TYPE_RAW = 4

TYPE_BREAKPOINT = 5

# evsel.c evsel__hw_names (PERF_COUNT_HW_*)
HW_NAMES = (
    "cycles", "instructions", "cache-references", "cache-misses", "branches",
    "branch-misses", "bus-cycles", "stalled-cycles-frontend", "stalled-cycles-backend",
    "ref-cycles",
)  # fmt: skip

# evsel.c evsel__sw_names: perf 6.1 has no name for PERF_COUNT_SW_BPF_OUTPUT (10) and
# PERF_COUNT_SW_CGROUP_SWITCHES (11), which it calls "unknown-software"
SW_NAMES = (
    "cpu-clock", "task-clock", "page-faults", "context-switches", "cpu-migrations",
    "minor-faults", "major-faults", "alignment-faults", "emulation-faults", "dummy",
)  # fmt: skip

# evsel.c evsel__hw_cache / _op / _result: the first alias of each, and the op's second
# alias ("loads") for the name without a result
HW_CACHE = ("L1-dcache", "L1-icache", "LLC", "dTLB", "iTLB", "branch", "node")

HW_CACHE_OP = (("load", "loads"), ("store", "stores"), ("prefetch", "prefetches"))

HW_CACHE_RESULT = ("refs", "misses")

_R, _W, _P = 1, 2, 4  # 1 << PERF_COUNT_HW_CACHE_OP_{READ,WRITE,PREFETCH}

# evsel.c evsel__hw_cache_stat: the ops each cache type has
HW_CACHE_STAT = (_R | _W | _P, _R | _P, _R | _W | _P, _R | _W | _P, _R, _R, _R | _W | _P)

# include/uapi/linux/hw_breakpoint.h
HW_BREAKPOINT_R, HW_BREAKPOINT_W, HW_BREAKPOINT_X = 1, 2, 4

PERF_PMU_TYPE_SHIFT = 32  # extended hardware type: config's high half names the PMU

NAME_MAX = 127  # evsel__name formats into char bf[128]

# what perf 6.1's header.c perf_attr_check accepts in an EVENT_DESC attr (uapi of 6.1):
# any bit past these makes it drop every name of the section
SAMPLE_MAX = 1 << 25  # PERF_SAMPLE_MAX

FORMAT_MAX = 1 << 5  # PERF_FORMAT_MAX

BRANCH_MAX = 1 << 19  # PERF_SAMPLE_BRANCH_MAX

RESERVED_1 = ~((1 << 38) - 1) & (2**64 - 1)  # attr flag bits after sigtrap

ATTR_SIZE_61 = 128  # sizeof(struct perf_event_attr) in perf 6.1 (PERF_ATTR_SIZE_VER7)

ATTR_SIZE_VER0 = 64

# enum perf_event_update_type (tools/lib/perf/include/perf/event.h)
EVENT_UPDATE_NAME = 2


def _flag(attr: Any, name: str) -> bool:
    return bool(attr.flags[name])


def precise_ip(attr: Any) -> int:
    """attr.precise_ip, the 2-bit field at bits 15-16 of the flag word."""
    return _flag(attr, "precise_ip_lo") | _flag(attr, "precise_ip_hi") << 1


def modifiers(attr: Any) -> str:
    """The ":kuhpppHG" suffix perf gives a name made from the attr (evsel__add_modifiers).

    k/u/h are listed for the contexts not excluded when any one is; p repeats precise_ip
    times; H/G (contexts not excluded among host and guest) are listed when exclude_host is
    set or exclude_guest equals its default, which is set once k/u/h or p is printed.
    """
    out = []
    guest_default = False
    if _flag(attr, "exclude_kernel") or _flag(attr, "exclude_user") or _flag(attr, "exclude_hv"):
        for ctx, mod in (("kernel", "k"), ("user", "u"), ("hv", "h")):
            if not _flag(attr, f"exclude_{ctx}"):
                out.append(mod)
        guest_default = True
    p = precise_ip(attr)
    if p:
        out.append("ppp"[:p])
        guest_default = True
    if _flag(attr, "exclude_host") or _flag(attr, "exclude_guest") == guest_default:
        for ctx, mod in (("host", "H"), ("guest", "G")):
            if not _flag(attr, f"exclude_{ctx}"):
                out.append(mod)
    return ":" + "".join(out) if out else ""


def hw_name(config: int) -> str:
    """A hardware event's name, as the x86 build of perf 6.1 makes it
    (arch/x86/util/evsel.c arch_evsel__hw_name): with a PMU type in config's high half
    (a hybrid CPU's extended type) it is "cpu/cycles/" whatever the PMU, because the PMU
    name of an event read from a file is unknown to it."""
    event = config & 0xFFFFFFFF
    name = HW_NAMES[event] if event < len(HW_NAMES) else "unknown-hardware"
    return f"cpu/{name}/" if config >> PERF_PMU_TYPE_SHIFT else name


def hw_cache_name(config: int) -> str:
    """evsel.c __evsel__hw_cache_name: type-op-result from config's low three bytes."""
    ctype, op, result = config & 0xFF, (config >> 8) & 0xFF, (config >> 16) & 0xFF
    if ctype >= len(HW_CACHE):
        return "unknown-ext-hardware-cache-type"
    if op >= len(HW_CACHE_OP):
        return "unknown-ext-hardware-cache-op"
    if result >= len(HW_CACHE_RESULT):
        return "unknown-ext-hardware-cache-result"
    if not HW_CACHE_STAT[ctype] & (1 << op):
        return "invalid-cache"
    if result:
        return f"{HW_CACHE[ctype]}-{HW_CACHE_OP[op][0]}-{HW_CACHE_RESULT[result]}"
    return f"{HW_CACHE[ctype]}-{HW_CACHE_OP[op][1]}"


def bp_name(addr: int, bp_type: int) -> str:
    """evsel.c __evsel__bp_name: "mem:0x<addr>:" and the access letters."""
    rwx = "".join(c for bit, c in ((1, "r"), (2, "w"), (4, "x")) if bp_type & bit)
    return f"mem:0x{addr:x}:{rwx}"


def attr_name(attr: Any) -> str:
    """The name perf 6.1 makes from the attr alone (evsel.c evsel__name, no name set).

    attr is a parsed perf_event_attr (bpfsym.formats.perf PerfLayouts.attr, as
    bpfsym.perfdata.EventAttr.attr holds it)."""
    t, config = int(attr.type), int(attr.config)
    if t == TYPE_RAW:
        name = f"raw 0x{config:x}" + modifiers(attr)
    elif t == TYPE_HARDWARE:
        name = hw_name(config) + modifiers(attr)
    elif t == TYPE_HW_CACHE:
        name = hw_cache_name(config) + modifiers(attr)
    elif t == TYPE_SOFTWARE:
        name = (SW_NAMES[config] if config < len(SW_NAMES) else "unknown-software") + modifiers(
            attr
        )
    elif t == TYPE_TRACEPOINT:
        name = "unknown tracepoint"
    elif t == TYPE_BREAKPOINT:
        name = bp_name(int(attr.config1), int(attr.bp_type)) + modifiers(attr)
    else:
        # "%d" of the u32 type: perf prints it signed
        name = f"unknown attr type: {t - (1 << 32) if t >= 1 << 31 else t}"
    return name[:NAME_MAX]


def event_name(
    attr: Any, desc_name: str | None = None, tracepoints: dict[int, str] | None = None
) -> str:
    """perf's name for one event: the name the file gives it (HEADER_EVENT_DESC or
    EVENT_UPDATE), else a tracepoint's "system:name" from the tracing data, else the
    attr's (see attr_name)."""
    if desc_name is not None:
        return desc_name
    if int(attr.type) == TYPE_TRACEPOINT and tracepoints and int(attr.config) in tracepoints:
        return tracepoints[int(attr.config)][:NAME_MAX]
    return attr_name(attr)


TRACING_MAGIC = b"\x17\x08\x44tracing"

_NAME = re.compile(rb"name\s*:\s*([A-Za-z0-9_]+)")

_ID = re.compile(rb"ID\s*:\s*([0-9]+)")


class TracingDataError(ValueError):
    """Tracing data perf's trace_report would not read to the end."""


def tracing_data_size(data: bytes) -> int:
    """How many bytes of data are tracing data (trace_report's trace_data_size): a
    pipe-mode PERF_RECORD_HEADER_TRACING_DATA is followed by that many, padded to 8."""
    return _walk_tracing_data(data, {})


def tracepoint_names(data: bytes) -> dict[int, str]:
    """Tracepoint "system:name" by format ID, from tracing data (HEADER_TRACING_DATA, or the
    payload after a PERF_RECORD_HEADER_TRACING_DATA).

    The layout (trace-event-read.c): "\\x17\\x08\\x44tracing", a NUL-terminated version, the
    file's endianness (1 byte: big-endian if non-zero), long size (1 byte), page size (u32),
    "header_page\\0" + u64 size + text, "header_event\\0" + u64 size + text, u32 count of
    ftrace formats (system "ftrace") each u64 size + text, u32 count of systems each a
    NUL-terminated system name, u32 count, and formats as u64 size + text; then kallsyms,
    printk formats and (version >= 0.6) saved cmdlines, which names do not need. A format
    text starts "name: NAME\\nID: N\\n"; libtraceevent takes NAME as one token of letters,
    digits and '_' (event-parse.c event_read_name). Formats whose name or ID do not parse
    are left out, as tep_parse_event leaves them out. Raises TracingDataError when the data
    stops before the event formats end (perf then has no tracepoint formats at all).
    """
    out: dict[int, str] = {}
    _walk_tracing_data(data, out)
    return out


def _walk_tracing_data(data: bytes, out: dict[int, str]) -> int:
    if not data.startswith(TRACING_MAGIC):
        raise TracingDataError("no tracing data magic")
    pos = len(TRACING_MAGIC)
    end = data.find(b"\0", pos)
    if end < 0:
        raise TracingDataError("no version string")
    version = data[pos:end]
    pos = end + 1
    if pos + 6 > len(data):
        raise TracingDataError("truncated tracing data header")
    ints = integers(not data[pos])  # the endianness byte: 1 big
    pos += 2  # endianness, long size
    pos += 4  # page size
    u32, u64 = ints.u32, ints.u64

    def take(n: int) -> bytes:
        nonlocal pos
        if n > len(data) - pos:
            raise TracingDataError(f"tracing data ends inside a {n}-byte part at {pos}")
        b = data[pos : pos + n]
        pos += n
        return b

    def u(s: struct.Struct) -> int:
        return int(s.unpack(take(s.size))[0])

    def string() -> bytes:
        nonlocal pos
        end = data.find(b"\0", pos)
        if end < 0:
            raise TracingDataError("unterminated string in tracing data")
        s = data[pos:end]
        pos = end + 1
        return s

    if take(12) != b"header_page\0":
        raise TracingDataError("no header_page")
    take(u(u64))
    if take(13) != b"header_event\0":
        raise TracingDataError("no header_event")
    take(u(u64))
    for _ in range(u(u32)):
        _format(b"ftrace", take(u(u64)), out)
    for _ in range(u(u32)):
        system = string()
        for _ in range(u(u32)):
            _format(system, take(u(u64)), out)
    take(u(u32))  # kallsyms
    take(u(u32))  # ftrace printk formats
    try:
        if float(version.decode("ascii", "replace") or 0) >= 0.6:
            take(u(u64))  # saved cmdlines
    except ValueError:
        pass
    return pos


def _format(system: bytes, text: bytes, out: dict[int, str]) -> None:
    m = _NAME.search(text)
    i = _ID.search(text)
    if m and i:
        name = (system + b":" + m.group(1)).decode("utf-8", "surrogateescape")
        out.setdefault(int(i.group(1)), name)


@dataclass(repr=False, eq=False)
class _Event:
    attr: Any
    ids: list[int]
    name: str | None = None
    tp_ready: bool = False  # evsel->tp_format set


@dataclass(repr=False, eq=False)
class EventNames:
    """perf 6.1's naming of a perf.data's events, fed in the order perf reads things."""

    events: list[_Event] = field(default_factory=list)

    def add_attr(self, attr: Any, ids: list[int]) -> None:
        """An attr of the attrs section, or a pipe-mode PERF_RECORD_HEADER_ATTR."""
        self.events.append(_Event(attr, list(ids)))

    def event_desc(self, names: list[str] | None) -> None:
        """HEADER_EVENT_DESC (see event_desc_names): names by position, not overriding."""
        for i, name in enumerate(names or ()):
            if i < len(self.events) and self.events[i].name is None:
                self.events[i].name = name

    def event_update_name(self, ident: int, name: str) -> bool:
        """A PERF_RECORD_EVENT_UPDATE of type NAME. perf finds the event by id, or takes
        the first one when there is one event or the id is 0 (evlist__id2evsel); an unknown
        id is an error to perf (the pipe-mode reading stops): False here."""
        ev = self._by_id(ident)
        if ev is None:
            return False
        ev.name = name
        return True

    def _by_id(self, ident: int) -> _Event | None:
        if not self.events:
            return None
        if len(self.events) == 1 or not ident:
            return self.events[0]
        for ev in self.events:
            if ident in ev.ids:
                return ev
        return None

    def tracing_data(self, tracepoints: dict[int, str] | None) -> None:
        """Tracepoint names once the tracing data is read (evlist__prepare_tracepoint_events:
        in order, stopping at the first tracepoint whose ID the data lacks)."""
        for ev in self.events:
            if int(ev.attr.type) != TYPE_TRACEPOINT or ev.tp_ready:
                continue
            if tracepoints is None or int(ev.attr.config) not in tracepoints:
                return
            if ev.name is None:
                ev.name = tracepoints[int(ev.attr.config)][:NAME_MAX]
            ev.tp_ready = True

    def names(self) -> list[str]:
        return [ev.name if ev.name is not None else attr_name(ev.attr) for ev in self.events]


def parse_attr(raw: bytes, little: bool) -> Any:
    """A perf_event_attr of any size (zero-padded to the layout's size, as perf does)."""
    padded = raw[: K.PERF_ATTR_SIZE_VER8].ljust(K.PERF_ATTR_SIZE_VER8, b"\0")
    return K.layouts(little).attr.parse(padded)


@functools.cache
def _attr_struct(little: bool) -> tuple[struct.Struct, tuple[str, ...]]:
    return struct_of(K.layouts(little).attr)


# perf 6.1's __reserved_2: the u16 after sample_max_stack (a pad in the declaration)
_RESERVED_2_AT = fixed_head(K.layouts().attr, "sample_max_stack")[0].size + 2


def attr_check(raw: bytes, little: bool) -> bool:
    """header.c perf_attr_check on the first min(size, 128) bytes of an EVENT_DESC attr:
    perf 6.1 drops the whole section's names when one fails."""
    # the first 128 bytes, read through the declaration (136 bytes: config3 stays zero)
    a = raw[:ATTR_SIZE_61].ljust(K.PERF_ATTR_SIZE_VER8, b"\0")
    rec, names = _attr_struct(little)
    f = dict(zip(names, rec.unpack(a), strict=True))
    sample_type, read_format, flags = f["sample_type"], f["read_format"], f["flags"]
    branch_sample_type = f["branch_sample_type"]
    reserved_2 = integers(little).u16.unpack_from(a, _RESERVED_2_AT)[0]
    reserved_3 = f["aux_action"]  # perf 6.1's __reserved_3
    if flags & RESERVED_1 or reserved_2 or reserved_3:
        return False
    if sample_type & ~(SAMPLE_MAX - 1) or read_format & ~(FORMAT_MAX - 1):
        return False
    return not (sample_type & K.SAMPLE_BRANCH_STACK and branch_sample_type & ~(BRANCH_MAX - 1))


def event_desc_names(data: bytes, little: bool) -> list[str] | None:
    """HEADER_EVENT_DESC's names by event position (header.c read_event_desc), or None
    where perf 6.1 reads none: a section that ends early or an attr perf_attr_check
    refuses."""
    u32 = integers(little).u32
    try:
        nr, size = u32.unpack_from(data, 0)[0], u32.unpack_from(data, 4)[0]
        pos = 8
        out = []
        for _ in range(nr):
            raw = data[pos : pos + size]
            if len(raw) < size or not attr_check(raw, little):
                return None
            pos += size
            nr_ids = u32.unpack_from(data, pos)[0]
            slen = u32.unpack_from(data, pos + 4)[0]
            if pos + 8 + slen > len(data):
                return None
            name = data[pos + 8 : pos + 8 + slen].split(b"\0", 1)[0]
            pos += 8 + slen + 8 * nr_ids
            if pos > len(data):
                return None
            out.append(name.decode("utf-8", "surrogateescape"))
        return out
    except struct.error:
        return None
