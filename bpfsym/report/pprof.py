"""Write a report analysis as a pprof profile (gzipped profile.proto), BPF code named.

Read by google/pprof, Pyroscope, Parca and other tools that take pprof profiles:

- sample types: per event, its samples (samples/count) and its period (cpu/nanoseconds for
  cpu-clock and task-clock, events/count otherwise); with several events each pair is
  named after its event (cpu-clock_samples, cpu-clock, task-clock_samples, ...);
- one Mapping per BPF program: named after its main function's kallsyms name, build_id the
  program tag, spanning the JIT images of its functions that were sampled; one Mapping per
  other shared object (kernel, modules, user-space files) with the build id perf.data
  recorded for it (HEADER_BUILD_ID);
- one Function per function, named as the report names it (BPF: the kallsyms name
  bpf_prog_<tag>_<name>), BPF ones with their BTF source file and first line;
- Locations: with the srcline sort key, one per sampled BPF address with the BTF line and
  column there (line info's line_col, kernel include/uapi/linux/bpf.h); otherwise, and for
  code without line info, one per function at its start address;
- with -g, every sample's call chain as its Location list, leaf first as pprof wants;
- the comm, pid and cpu sort keys as sample labels (comm, tid, cpu); --bpf-only keeps
  only samples in BPF programs, as the report's rows do.

Addresses are the kernel's for kernel and BPF code and file-relative (ELF virtual
addresses) for user-space code: the analysis keeps no per-process load addresses. Every
Mapping says it has functions, so pprof does not try to symbolize anything again.
"""

from __future__ import annotations

import gzip
import os
import re
import sys
from collections.abc import Iterable
from typing import Any

from bpfsym.formats import perf as K
from bpfsym.report.analysis import Analysis, EventStats
from bpfsym.report.render import header_lines
from bpfsym.symbolize.kernel import KERNEL_DSO
from bpfsym.symbolize.symbols import Sym
from bpfsym.symbolize.timeline import ProgLines

from . import profile_pb2 as pb

# the kallsyms name of a BPF function: bpf_prog_<tag>[_<name>] (kernel/bpf/core.c)
_BPF_NAME = re.compile(r"bpf_prog_([0-9a-f]{16})(?:_|$)")
_MODULE_FILE = re.compile(r"(.+)\.ko(?:\.[a-z]+)?$")  # name.ko, name.ko.xz, name.ko.zst


def period_type(st: EventStats) -> tuple[str, str]:
    """(type, unit) of an event's period: perf's cpu-clock and task-clock count nanoseconds
    (kernel/events/core.c cpu_clock_event_update, task_clock_event_update)."""
    if st.attr.type == K.PERF_TYPE_SOFTWARE and st.attr.config in (
        K.PERF_COUNT_SW_CPU_CLOCK,
        K.PERF_COUNT_SW_TASK_CLOCK,
    ):
        return "cpu", "nanoseconds"
    return "events", "count"


class _Builder:
    """The profile's tables, each entry made once; mappings and locations are emitted at
    the end, so that the mappings can be put in order first."""

    def __init__(self, an: Analysis) -> None:
        self.an = an
        self.prof = pb.Profile()
        self.strings: dict[str, int] = {"": 0}
        self.mappings: dict[tuple, list] = {}  # key -> [rank, filename, build_id, lines, lo, hi]
        self.functions: dict[tuple, int] = {}
        self.locations: dict[Any, int] = {}  # Sym or (Sym, ip) -> location id
        self.loc_rows: list[tuple] = []  # (mapping key, address, function id, line, column)
        self.by_base: dict[str, list[Any]] = {}  # base name, or [module] -> BuildIds
        for b in an.header.build_ids:
            base = os.path.basename(b.filename) or b.filename
            self.by_base.setdefault(base, []).append(b)
            m = _MODULE_FILE.match(base)
            if m:  # perf names a module [name], '-' made '_' (kmod_path__parse)
                self.by_base.setdefault(f"[{m.group(1).replace('-', '_')}]", []).append(b)

    def s(self, text: str) -> int:
        i = self.strings.get(text)
        if i is None:
            i = self.strings[text] = len(self.strings)
        return i

    # ---- mappings --------------------------------------------------------

    def mapping(self, s: Sym, address: int) -> tuple:
        """The key of the symbol's mapping, its span grown to cover the address."""
        f = s.bpf
        if f is not None:
            prog = f.prog
            if prog is not None:
                name = prog.main_name or s.name
                key: tuple = ("bpf", prog.id, prog.tag, name)
                tag, lines = prog.tag, bool(prog.lines)
            else:
                m = _BPF_NAME.match(s.name)
                name, tag, lines = s.name, m.group(1) if m else "", False
                key = ("bpf", -1, tag, name)
            got = self.mappings.get(key)
            if got is None:
                got = self.mappings[key] = [_RANK_BPF, name, tag, lines, f.addr, f.addr + 1]
            lo, hi = f.addr, f.addr + max(f.size, 1)
        else:
            key = ("dso", s.dso, s.kind)
            got = self.mappings.get(key)
            if got is None:
                filename, build_id = self._file_of(s.dso)
                got = self.mappings[key] = [
                    _rank(s.dso),
                    filename,
                    build_id,
                    False,
                    address,
                    address + 1,
                ]
            lo, hi = address, address + 1
        if lo < got[4]:
            got[4] = lo
        if hi > got[5]:
            got[5] = hi
        return key

    def _file_of(self, dso: str) -> tuple[str, str]:
        """A shared object's recorded path and build id (HEADER_BUILD_ID) by the name the
        report shows (the file's base name, [kernel.kallsyms], [module]); ambiguous or
        unrecorded: the name alone."""
        got = self.by_base.get(dso, [])
        if got and len({(b.filename, b.build_id) for b in got}) == 1:
            return got[0].filename, got[0].build_id
        return dso, ""

    # ---- functions and locations -------------------------------------------

    @staticmethod
    def _lines(s: Sym) -> ProgLines | None:
        """A BPF program's line table by native address, or None without one."""
        f = s.bpf
        if f is None or f.prog is None or not f.prog.lines:
            return None
        return f.lines_by_addr()

    @staticmethod
    def _entry(table: ProgLines, ip: int, lo: int) -> Any:
        """The line entry covering ip, or None when the last one before ip is below lo."""
        e = table.at(ip)
        if e is None or (e.jited_addr or 0) < lo:
            return None
        return e

    def function(self, s: Sym) -> int:
        filename = ""
        start_line = 0
        table = self._lines(s)
        if table is not None and s.bpf is not None:
            e = self._entry(table, s.bpf.addr, s.bpf.addr)
            if e is not None:
                filename, start_line = e.file, e.line
        key = (s.name, filename, start_line)
        fid = self.functions.get(key)
        if fid is None:
            fid = self.functions[key] = len(self.prof.function) + 1
            name = self.s(s.name)
            self.prof.function.add(
                id=fid,
                name=name,
                system_name=name,
                filename=self.s(filename),
                start_line=start_line,
            )
        return fid

    def location(self, s: Sym) -> int:
        """The function-level location of a symbol (at its start address, no line)."""
        lid = self.locations.get(s)
        if lid is None:
            lid = self.locations[s] = self._new_location(s, s.start, 0, 0)
        return lid

    def line_location(self, s: Sym, ip: int) -> int:
        """The location of a sampled address: its BTF line and column in BPF code, the
        function's otherwise."""
        table = self._lines(s) if s.bpf is not None else None
        if table is None or s.bpf is None:
            return self.location(s)
        key = (s, ip)
        lid = self.locations.get(key)
        if lid is None:
            e = self._entry(table, ip, s.bpf.addr)
            line, col = (e.line, e.col) if e is not None else (0, 0)
            lid = self.locations[key] = self._new_location(s, ip, line, col)
        return lid

    def _new_location(self, s: Sym, address: int, line: int, col: int) -> int:
        self.loc_rows.append((self.mapping(s, address), address, self.function(s), line, col))
        return len(self.loc_rows)

    # ---- samples ---------------------------------------------------------

    def labels(self, head: tuple) -> list[Any]:
        """Sample labels of a row's head (cpu?, comm, tid), as the sort keys ask."""
        keys = self.an.keys
        out = []
        i = 0
        if "cpu" in keys:
            out.append(pb.Label(key=self.s("cpu"), num=head[0]))
            i = 1
        if "comm" in keys or "pid" in keys:
            comm, tid = head[i], head[i + 1]
            if "comm" in keys:
                out.append(pb.Label(key=self.s("comm"), str=self.s(comm)))
            if "pid" in keys:
                out.append(pb.Label(key=self.s("tid"), num=tid))
        return out

    def finish(self) -> None:
        """Mappings in order (pprof takes the first as the main binary: the kernel, then
        BPF programs, other [objects], files), then the locations and strings."""
        prof = self.prof
        ids: dict[tuple, int] = {}
        for key, (_, filename, build_id, lines, lo, hi) in sorted(
            self.mappings.items(), key=lambda kv: (kv[1][0], kv[1][1], kv[0])
        ):
            ids[key] = len(prof.mapping) + 1
            prof.mapping.add(
                id=ids[key],
                memory_start=lo,
                memory_limit=hi,
                filename=self.s(filename),
                build_id=self.s(build_id),
                has_functions=True,
                has_filenames=lines,
                has_line_numbers=lines,
            )
        for lid, (mkey, address, fid, line, col) in enumerate(self.loc_rows, 1):
            loc = prof.location.add(id=lid, mapping_id=ids[mkey], address=address)
            loc.line.add(function_id=fid, line=line, column=col)
        # profile.proto strings are UTF-8: bytes that are not (a comm, a file name) replaced
        prof.string_table.extend(
            x.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for x in self.strings
        )


_RANK_KERNEL, _RANK_BPF, _RANK_OBJECT, _RANK_FILE = range(4)


def _rank(dso: str) -> int:
    if dso == KERNEL_DSO:
        return _RANK_KERNEL
    return _RANK_OBJECT if dso.startswith("[") else _RANK_FILE


def build_profile(an: Analysis, side: str | None = None) -> Any:
    """The analysis as a profile_pb2.Profile."""
    b = _Builder(an)
    prof = b.prof
    events = [st for st in an.events.values() if st.samples]
    many = len(events) > 1
    for st in events:
        kind, unit = period_type(st)
        name = st.attr.name
        prof.sample_type.add(type=b.s(f"{name}_samples" if many else "samples"), unit=b.s("count"))
        prof.sample_type.add(type=b.s(name if many else kind), unit=b.s(unit))
    if events:
        first = events[0]
        pt = prof.sample_type[1]
        prof.default_sample_type = pt.type
        prof.period_type.CopyFrom(pt)
        attr = first.attr.attr
        if not attr.flags.freq:
            prof.period = int(attr.sample_period)
        elif first.samples:
            prof.period = first.period // first.samples  # the mean: -F adjusts it per sample
    ntypes = 2 * len(events)
    keys = an.keys
    nhead = (1 if "cpu" in keys else 0) + (2 if ("comm" in keys or "pid" in keys) else 0)
    with_ip = "srcline" in keys
    # rows that become the same sample (other addresses of a function without line info)
    # are added up first
    merged: dict[tuple, list[int]] = {}
    location, line_location = b.location, b.line_location
    for k, st in enumerate(events):
        stacks = an.callchains and bool(st.stacks)
        items: Iterable[tuple[tuple, list[int]]] = st.stacks.items() if stacks else st.rows.items()
        for key, (period, n) in items:
            if stacks:
                head, syms = key
                locs = tuple([location(x) for x in syms])
            elif with_ip:
                head = key[:nhead]
                locs = (line_location(key[nhead], key[nhead + 1]),)
            else:
                head = key[:nhead]
                locs = (location(key[nhead]),)
            mk = (k, head, locs)
            r = merged.get(mk)
            if r is None:
                merged[mk] = [n, period]
            else:
                r[0] += n
                r[1] += period
    label_cache: dict[tuple, list[Any]] = {}
    add = prof.sample.add
    for (k, head, locs), (n, period) in merged.items():
        value = [0] * ntypes
        value[2 * k] = n
        value[2 * k + 1] = period
        labels = label_cache.get(head)
        if labels is None:
            labels = label_cache[head] = b.labels(head)
        add(location_id=locs, value=value, label=labels)
    _describe(an, prof, b, side, events)
    b.finish()
    return prof


def _describe(an: Analysis, prof: Any, b: _Builder, side: str | None, events: list) -> None:
    """Times and the report's header as the profile's comments (pprof -comments)."""
    t = an.header.sample_time
    if t is not None and t[1] > t[0]:
        prof.duration_nanos = t[1] - t[0]
        try:
            # perf report's "captured on" is the file's time too (end of the recording)
            prof.time_nanos = os.stat(an.path).st_mtime_ns - prof.duration_nanos
        except OSError:
            pass
    for line in header_lines(an, side):
        text = line[1:].strip()
        if text and not text.startswith("--bpf-only"):
            prof.comment.append(b.s(text))
    if an.bpf_only:
        for st in events:
            kept = sum(n for _p, n in st.rows.values())
            prof.comment.append(
                b.s(f"--bpf-only: {kept} of {st.samples} samples of {st.attr.name} (in BPF)")
            )


def write_pprof(an: Analysis, path: str, side: str | None = None) -> None:
    """Write the analysis to path ('-': standard output) as a gzipped profile.proto."""
    data = gzip.compress(build_profile(an, side).SerializeToString(), compresslevel=6, mtime=0)
    if path == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    with open(path, "wb") as f:
        f.write(data)
