"""`bpfsym report --header-only`: a perf.data header printed as perf 6.1's
`perf report --header-only` prints it (tools/perf/util/header.c perf_header__fprintf and
the feature table's print functions; perf_event_attr_fprintf.c for the event lines).

File mode: the framing (captured on: the file's mtime; header version; data offset and
size; feat offset), then every feature present in bit order, each as perf prints it (those
perf keeps for -I as "# NAME info available, use -I to display"), then "# missing
features:". Pipe mode: the framing with zero offsets, then the HEADER_FEATURE records'
features in stream order, as perf prints them while it reads the stream.

Feature sections are read here from their bytes, apart from the report's reading
(read.features keeps only what a report needs).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from typing import IO, Any

from bpfsym.errors import FormatError
from bpfsym.formats import bpf as B
from bpfsym.formats import fixed_head, integers, struct_of
from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.formats.bpf import prog_info_values
from bpfsym.read.features import parse_bpf_btf, parse_bpf_prog_info

# enum of feature bits, names as perf's feat_ops (header.c) print them
FEATURE_NAMES = {
    1: "TRACING_DATA", 2: "BUILD_ID", 3: "HOSTNAME", 4: "OSRELEASE", 5: "VERSION",
    6: "ARCH", 7: "NRCPUS", 8: "CPUDESC", 9: "CPUID", 10: "TOTAL_MEM", 11: "CMDLINE",
    12: "EVENT_DESC", 13: "CPU_TOPOLOGY", 14: "NUMA_TOPOLOGY", 15: "BRANCH_STACK",
    16: "PMU_MAPPINGS", 17: "GROUP_DESC", 18: "AUXTRACE", 19: "STAT", 20: "CACHE",
    21: "SAMPLE_TIME", 22: "MEM_TOPOLOGY", 23: "CLOCKID", 24: "DIR_FORMAT",
    25: "BPF_PROG_INFO", 26: "BPF_BTF", 27: "COMPRESSED", 28: "CPU_PMU_CAPS",
    29: "CLOCK_DATA", 30: "HYBRID_TOPOLOGY", 31: "PMU_CAPS",
}  # fmt: skip
LAST_FEATURE = 32  # HEADER_LAST_FEATURE in perf 6.1

# printed in full only with -I (feat_ops full_only)
FULL_ONLY = {13, 14, 20, 22, 30}

# perf_event_attr_fprintf.c's bit names, in its order
SAMPLE_TYPE_BITS = [
    ("IP", 0), ("TID", 1), ("TIME", 2), ("ADDR", 3), ("READ", 4), ("CALLCHAIN", 5),
    ("ID", 6), ("CPU", 7), ("PERIOD", 8), ("STREAM_ID", 9), ("RAW", 10),
    ("BRANCH_STACK", 11), ("REGS_USER", 12), ("STACK_USER", 13), ("IDENTIFIER", 16),
    ("REGS_INTR", 18), ("DATA_SRC", 15), ("WEIGHT", 14), ("PHYS_ADDR", 19), ("AUX", 20),
    ("CGROUP", 21), ("DATA_PAGE_SIZE", 22), ("CODE_PAGE_SIZE", 23), ("WEIGHT_STRUCT", 24),
]  # fmt: skip
BRANCH_TYPE_BITS = [
    (n, i)
    for i, n in enumerate(
        "USER KERNEL HV ANY ANY_CALL ANY_RETURN IND_CALL ABORT_TX IN_TX NO_TX COND"
        " CALL_STACK IND_JUMP CALL NO_FLAGS NO_CYCLES TYPE_SAVE HW_INDEX".split()
    )
]
READ_FORMAT_BITS = [
    ("TOTAL_TIME_ENABLED", 0), ("TOTAL_TIME_RUNNING", 1), ("ID", 2), ("GROUP", 3), ("LOST", 4),
]  # fmt: skip
CLOCK_NAMES = {  # header.c clockid_name
    0: "realtime", 1: "monotonic", 4: "monotonic_raw", 7: "boottime", 11: "tai",
}  # fmt: skip

_FUNC_INFO_TYPE_ID = fixed_head(B.func_info, "type_id")[0].size  # its offset in a record
ATTR_SIZE = K.PERF_ATTR_SIZE_VER8  # shorter attrs read zero-extended


class _Reader:
    """Little readers over one feature section (FormatError past its end)."""

    def __init__(self, data: bytes, little: bool, path: str, offset: int) -> None:
        self.data = data
        self.ints = integers(little)
        self.pos = 0
        self.path = path
        self.offset = offset

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise FormatError(self.path, self.offset + self.pos, "feature section truncated")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def u32(self) -> int:
        return int(self.ints.u32.unpack(self.take(4))[0])

    def u64(self) -> int:
        return int(self.ints.u64.unpack(self.take(8))[0])

    def string(self) -> str:
        """struct perf_header_string: u32 len (NUL padding included), then the text."""
        n = self.u32()
        return _text(self.take(n))

    def strings(self) -> list[str]:
        return [self.string() for _ in range(self.u32())]


def _text(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _string(label: str) -> Callable[[Any, _Reader], list[str]]:
    """The printer of a one-string feature: "# label : text"."""
    return lambda _self, r: [f"# {label} : {r.string()}"]


def _bits(value: int, names: list[tuple[str, int]]) -> str:
    return "|".join(n for n, b in names if value >> b & 1)


def attr_fields(raw: bytes, little: bool) -> list[tuple[str, str]]:
    """(name, value) of an attr's non-zero fields, as perf_event_attr__fprintf lists them."""
    a = K.layouts(little).attr.parse(raw[:ATTR_SIZE].ljust(ATTR_SIZE, b"\0"))
    flags = a.flags
    out: list[tuple[str, str]] = []

    def put(name: str, v: int, show: Callable[[int], str] = str) -> None:
        if v:
            out.append((name, show(v)))

    put("type", a.type)
    put("size", a.size)
    put("config", a.config, hex)
    put("{ sample_period, sample_freq }", a.sample_period)
    put("sample_type", a.sample_type, lambda v: _bits(v, SAMPLE_TYPE_BITS))
    put("read_format", a.read_format, lambda v: _bits(v, READ_FORMAT_BITS))
    for name in K.ATTR_FLAG_BITS:  # in bit order, as perf prints them
        if name == "precise_ip_lo":
            put("precise_ip", flags.precise_ip_lo + 2 * flags.precise_ip_hi)
        elif name != "precise_ip_hi":
            put(name, int(flags[name]))
    put("{ wakeup_events, wakeup_watermark }", a.wakeup_events)
    put("bp_type", a.bp_type)
    put("{ bp_addr, config1 }", a.config1, hex)
    put("{ bp_len, config2 }", a.config2, hex)
    put("branch_sample_type", a.branch_sample_type, lambda v: _bits(v, BRANCH_TYPE_BITS))
    put("sample_regs_user", a.sample_regs_user, hex)
    put("sample_stack_user", a.sample_stack_user)
    put("clockid", a.clockid)
    put("sample_regs_intr", a.sample_regs_intr, hex)
    put("aux_watermark", a.aux_watermark)
    put("sample_max_stack", a.sample_max_stack)
    put("aux_sample_size", a.aux_sample_size)
    put("sig_data", a.sig_data)
    return out


class HeaderPrinter:
    """Prints feature sections as perf does, one feature at a time."""

    def __init__(self, path: str, little: bool) -> None:
        self.path = path
        self.little = little
        self.L = F.perfdata_layouts(little)
        self.btfs: dict[int, bytes] = {}  # BPF_BTF, for BPF_PROG_INFO's function names
        self.event_names: list[str] = []  # EVENT_DESC's, for GROUP_DESC

    def file_features(self, sections: list[tuple[int, bytes, int]]) -> list[str]:
        """The lines of a file's feature sections. perf reads them all into its env at
        open, in bit order, and stops at the first it cannot read (header.c
        perf_header__process_sections); its printers then show what the env holds: the
        features from that one on print as empty ("(null)", 0, "not available"), but for
        EVENT_DESC, which perf reads again from the file to print it."""
        done: dict[int, list[str]] = {}
        for bit, data, off in sections:
            got = self._lines(bit, data, off)
            if got is None:
                break
            done[bit] = got
        if F.HEADER_BPF_BTF in done and F.HEADER_BPF_PROG_INFO in done:
            # printed after all were read: the programs' names use the BTF read after them
            for bit, data, off in sections:
                if bit == F.HEADER_BPF_PROG_INFO:
                    done[bit] = self._lines(bit, data, off) or []
        out = []
        for bit, data, off in sections:
            if bit in FULL_ONLY:
                out.append(f"# {FEATURE_NAMES[bit]} info available, use -I to display")
            elif bit in done:
                out += done[bit]
            elif bit == F.HEADER_EVENT_DESC:
                out += self._lines(bit, data, off) or []
            else:
                out += EMPTY.get(bit, [])
        return out

    def _lines(self, bit: int, data: bytes, offset: int) -> list[str] | None:
        """A section's lines, None when it does not read."""
        show = self.PRINTERS.get(bit)
        if show is None:
            return []
        try:
            return show(self, _Reader(data, self.little, self.path, offset))
        except (FormatError, struct.error, ValueError, IndexError):
            return None

    def feature(self, bit: int, data: bytes, offset: int) -> list[str]:
        """The lines perf prints for one feature section ([] for one it prints nothing of)."""
        if bit in FULL_ONLY:
            return [f"# {FEATURE_NAMES[bit]} info available, use -I to display"]
        show = self.PRINTERS.get(bit)
        if show is None:
            return []
        r = _Reader(data, self.little, self.path, offset)
        try:
            return show(self, r)
        except (FormatError, struct.error, ValueError, IndexError):
            return []  # perf could not read it at open either: nothing printed

    def _nrcpus(self, r: _Reader) -> list[str]:
        online, avail = r.u32(), r.u32()
        return [f"# nrcpus online : {online}", f"# nrcpus avail : {avail}"]

    def _total_mem(self, r: _Reader) -> list[str]:
        return [f"# total memory : {r.u64()} kB"]

    def _cmdline(self, r: _Reader) -> list[str]:
        return ["# cmdline : " + "".join(f"{a} " for a in r.strings())]

    def _event_desc(self, r: _Reader) -> list[str]:
        nr, size = r.u32(), r.u32()
        out = []
        names = []
        for _ in range(nr):
            raw = r.take(size)
            nids = r.u32()
            name = r.string()
            ids = [r.u64() for _ in range(nids)]
            names.append(name)
            fields = attr_fields(raw, self.little)
            if not dict(fields).get("size"):
                break  # perf's list ends at an attr of size 0
            line = f"# event : name = {name}, "
            if ids:
                line += ", id = {" + ",".join(f" {i}" for i in ids) + " }"
            line += "".join(f", {k} = {v}" for k, v in fields)
            out.append(line)
        self.event_names = names
        return out

    def _pmu_mappings(self, r: _Reader) -> list[str]:
        n = r.u32()
        if not n:
            return ["# pmu mappings: not available"]
        parts = []
        for _ in range(n):
            typ = r.u32()
            parts.append(f"{r.string()} = {typ}")
        return ["# pmu mappings: " + ", ".join(parts)]

    def _group_desc(self, r: _Reader) -> list[str]:
        out = []
        names = self.event_names
        for _ in range(r.u32()):
            name, leader, members = r.string(), r.u32(), r.u32()
            if members <= 1 or leader + members > len(names):
                continue
            label = "" if name == "{anon_group}" else name
            out.append(f"# group: {label}{{{','.join(names[leader : leader + members])}}}")
        return out

    def _sample_time(self, r: _Reader) -> list[str]:
        first, last = r.u64(), r.u64()
        return [
            f"# time of first sample : {_usec(first)}",
            f"# time of last sample : {_usec(last)}",
            f"# sample duration : {(last - first) / 1e6:10.3f} ms",
        ]

    def _clockid(self, r: _Reader) -> list[str]:
        return [f"# clockid frequency: {r.u64() * 1000} MHz"]

    def _dir_format(self, r: _Reader) -> list[str]:
        return [f"# directory data version : {r.u64()}"]

    def _compressed(self, r: _Reader) -> list[str]:
        _version, typ, level, ratio = r.u32(), r.u32(), r.u32(), r.u32()
        kind = "Zstd" if typ == 1 else "Unknown"
        return [f"# compressed : {kind}, level = {level}, ratio = {ratio}"]

    def _caps(self, r: _Reader) -> list[str]:
        return [f"{r.string()}={r.string()}" for _ in range(r.u32())]

    def _cpu_pmu_caps(self, r: _Reader) -> list[str]:
        caps = self._caps(r)
        return ["# cpu pmu capabilities: " + (", ".join(caps) or "not available")]

    def _pmu_caps(self, r: _Reader) -> list[str]:
        out = []
        for _ in range(r.u32()):
            caps = self._caps(r)
            pmu = r.string()
            out.append(f"# {pmu} pmu capabilities: " + (", ".join(caps) or "not available"))
        return out

    def _clock_data(self, r: _Reader) -> list[str]:
        _version, clockid = r.u32(), r.u32()
        tod, clock = r.u64(), r.u64()
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(tod // 10**9))
        usec = tod % 10**9 // 1000
        name = CLOCK_NAMES.get(clockid, "")
        return [
            f"# clockid: {name} ({clockid})",
            f"# reference time: {when}.{usec:06d} = {tod // 10**9}.{usec:06d} (TOD)"
            f" = {clock // 10**9}.{clock % 10**9:09d} ({name})",
        ]

    def _bpf_btf(self, r: _Reader) -> list[str]:
        self.btfs = parse_bpf_btf(self.L, r.data, self.path, r.offset)
        return [f"# btf info of id {i}" for i in sorted(self.btfs)]

    def _bpf_prog_info(self, r: _Reader) -> list[str]:
        progs = parse_bpf_prog_info(self.L, r.data, self.path, r.offset)
        by_id = {}
        for blobs in progs:
            info = prog_info_values(blobs["info"], self.little)
            by_id[int(info["id"])] = (info, blobs)
        out = []
        for pid in sorted(by_id):
            out += self._prog_lines(pid, *by_id[pid])
        return out

    def _prog_lines(self, pid: int, info: dict[str, Any], blobs: dict[str, bytes]) -> list[str]:
        """bpf-event.c __bpf_event__print_bpf_prog_info: one line, or one per function."""
        n = int(info["nr_jited_ksyms"])
        addrs = _array(self.little, "Q", blobs.get("ksyms", b""), n)
        lens = _array(self.little, "I", blobs.get("func_lens", b""), n)
        tags = blobs.get("prog_tags", b"")
        names = [self._prog_name(info, blobs, tags, i, n) for i in range(n)]
        if n == 1:
            return [f"# bpf_prog_info {pid}: {names[0]} addr {addrs[0]:#x} size {lens[0]}"]
        out = [f"# bpf_prog_info {pid}:"]
        for i in range(n):
            out.append(f"# \tsub_prog {i}: {names[i]} addr {addrs[i]:#x} size {lens[i]}")
        return out

    def _prog_name(
        self, info: dict[str, Any], blobs: dict[str, bytes], tags: bytes, i: int, n: int
    ) -> str:
        """bpf-event.c synthesize_bpf_prog_name: bpf_prog_<tag>[_<BTF func or prog name>]."""
        tag = tags[8 * i : 8 * i + 8].ljust(8, b"\0").hex()
        short = None
        btf = self.btfs.get(int(info["btf_id"])) if info["btf_id"] else None
        rec = int(info["func_info_rec_size"])
        finfo = blobs.get("func_info", b"")
        if btf is not None and rec >= 8 and len(finfo) >= rec * (i + 1):
            from bpfsym.read.btf import type_name

            at = rec * i + _FUNC_INFO_TYPE_ID  # bpf_func_info's type_id, in the file's order
            type_id = integers(self.little).u32.unpack_from(finfo, at)
            try:
                short = type_name(btf, type_id[0])
            except FormatError:
                short = None
        elif i == 0 and n == 1:
            short = info["name"] or None
        else:
            short = "F"
        return f"bpf_prog_{tag}" + (f"_{short}" if short is not None else "")

    PRINTERS: dict[int, Callable[[Any, _Reader], list[str]]] = {
        F.HEADER_HOSTNAME: _string("hostname"),
        F.HEADER_OSRELEASE: _string("os release"),
        F.HEADER_VERSION: _string("perf version"),
        F.HEADER_ARCH: _string("arch"),
        F.HEADER_NRCPUS: _nrcpus,
        F.HEADER_CPUDESC: _string("cpudesc"),
        F.HEADER_CPUID: _string("cpuid"),
        F.HEADER_TOTAL_MEM: _total_mem,
        F.HEADER_CMDLINE: _cmdline,
        F.HEADER_EVENT_DESC: _event_desc,
        15: lambda self, r: ["# contains samples with branch stack"],
        16: _pmu_mappings,
        17: _group_desc,
        18: lambda self, r: ["# contains AUX area data (e.g. instruction trace)"],
        19: lambda self, r: ["# contains stat data"],
        F.HEADER_SAMPLE_TIME: _sample_time,
        F.HEADER_CLOCKID: _clockid,
        24: _dir_format,
        F.HEADER_BPF_PROG_INFO: _bpf_prog_info,
        F.HEADER_BPF_BTF: _bpf_btf,
        F.HEADER_COMPRESSED: _compressed,
        28: _cpu_pmu_caps,
        29: _clock_data,
        31: _pmu_caps,
    }


# what perf prints of a feature it has not read into its env (see file_features)
EMPTY = {
    F.HEADER_HOSTNAME: ["# hostname : (null)"],
    F.HEADER_OSRELEASE: ["# os release : (null)"],
    F.HEADER_VERSION: ["# perf version : (null)"],
    F.HEADER_ARCH: ["# arch : (null)"],
    F.HEADER_NRCPUS: ["# nrcpus online : 0", "# nrcpus avail : 0"],
    F.HEADER_CPUDESC: ["# cpudesc : (null)"],
    F.HEADER_CPUID: ["# cpuid : (null)"],
    F.HEADER_TOTAL_MEM: ["# total memory : 0 kB"],
    F.HEADER_CMDLINE: ["# cmdline : "],
    15: ["# contains samples with branch stack"],
    16: ["# pmu mappings: not available"],
    18: ["# contains AUX area data (e.g. instruction trace)"],
    19: ["# contains stat data"],
    F.HEADER_SAMPLE_TIME: [
        "# time of first sample : 0.000000",
        "# time of last sample : 0.000000",
        f"# sample duration : {0.0:10.3f} ms",
    ],
    F.HEADER_CLOCKID: ["# clockid frequency: 0 MHz"],
    24: ["# directory data version : 0"],
    F.HEADER_COMPRESSED: ["# compressed : Unknown, level = 0, ratio = 0"],
    28: ["# cpu pmu capabilities: not available"],
    29: ["# reference time disabled"],
}


def _array(little: bool, code: str, data: bytes, n: int) -> list[int]:
    """n integers of struct code `code` from data, zeros where data ends first."""
    size = integers(little).array(code, 1).size
    k = min(n, len(data) // size)
    got = list(integers(little).array(code, k).unpack_from(data)) if k else []
    return got + [0] * (n - len(got))


def _usec(ns: int) -> str:
    """timestamp__scnprintf_usec: sec.usec."""
    return f"{ns // 10**9}.{ns % 10**9 // 1000:06d}"


def _framing(path: str, stream: IO[bytes] | None, offsets: tuple[int, int, int]) -> list[str]:
    try:
        mtime = os.fstat(stream.fileno()).st_mtime if stream is not None else os.stat(path).st_mtime
    except OSError:
        mtime = time.time()
    data_off, data_size, feat_off = offsets
    return [
        "# ========",
        f"# captured on    : {time.ctime(mtime)}",
        "# header version : 1",
        f"# data offset    : {data_off}",
        f"# data size      : {data_size}",
        f"# feat offset    : {feat_off}",
    ]


def header_text(path: str, stream: IO[bytes] | None = None) -> str:
    """What `perf report --header-only -i path` prints (stream: read instead of path)."""
    try:
        f = stream if stream is not None else open(path, "rb")  # noqa: SIM115
    except FileNotFoundError as e:
        raise FormatError(e.filename or path, 0, "no such file") from None
    with f:
        head = f.read(F.FILE_HEADER_SIZE)
        little = head[:8] != F.MAGIC_BE
        if head[:8] in (F.MAGIC_LE, F.MAGIC_BE) and len(head) >= 16:
            size = integers(little).u64.unpack_from(head, 8)[0]  # perf_file_header.size
            if size == F.FILE_HEADER_SIZE and len(head) == size and stream is None:
                return _file_text(path, f, head, little)
        from bpfsym.read.perfdata import PerfData

        # a pipe-mode stream (or not a perf.data file: PerfData says what is wrong)
        with PerfData(path, _Replay(head, f)) as pd:  # type: ignore[arg-type]
            printer = HeaderPrinter(path, pd.little)
            out = _framing(path, stream, (0, 0, 0)) + ["# ========", "#"]
            out += _pipe_features(pd, printer)
            return "\n".join(out) + "\n"


class _Replay:
    """A stream whose first bytes were read already: they come first again."""

    def __init__(self, first: bytes, rest: IO[bytes]) -> None:
        self.first = first
        self.rest = rest

    def read(self, n: int = -1) -> bytes:
        if not self.first:
            return self.rest.read(n)
        if n < 0:
            out, self.first = self.first + self.rest.read(), b""
            return out
        out, self.first = self.first[:n], self.first[n:]
        if len(out) < n:
            out += self.rest.read(n - len(out))
        return out

    def close(self) -> None:
        pass  # the caller's


def _file_text(path: str, f: IO[bytes], head: bytes, little: bool) -> str:
    """A file-mode header: perf_file_header, then the feature table after the data."""
    L = F.perfdata_layouts(little)
    fh = L.file_header.parse(head)
    data_off, data_size = int(fh.data.offset), int(fh.data.size)
    bits = [n * 64 + b for n, w in enumerate(fh.features) for b in range(64) if w >> b & 1]
    feat_off = data_off + data_size
    out = _framing(path, None, (data_off, data_size, feat_off))
    f.seek(feat_off)
    section = struct_of(L.section)[0]  # perf_file_section: offset, size
    table = f.read(section.size * len(bits))
    sections = []
    for i, bit in enumerate(bits):
        if section.size * (i + 1) > len(table):
            break
        off, size = section.unpack_from(table, section.size * i)
        if bit not in FEATURE_NAMES:
            continue  # perf warns of an unknown feature and prints nothing of it
        f.seek(off)
        sections.append((bit, f.read(min(size, 1 << 30)), off))
    out += HeaderPrinter(path, little).file_features(sections)
    missing = [FEATURE_NAMES[b] for b in range(1, LAST_FEATURE) if b not in bits]
    out.append("# missing features: " + "".join(f"{n} " for n in missing))
    out += ["# ========", "#"]
    return "\n".join(out) + "\n"


def _pipe_features(pd: Any, printer: HeaderPrinter) -> list[str]:
    """The HEADER_FEATURE records' lines, in stream order, up to the first kernel record
    (perf record writes the features first; perf prints each as it reads it)."""
    out: list[str] = []
    u64 = pd.u64.unpack_from
    try:
        for rtype, _misc, buf, start, size, off in pd.records():
            if rtype == F.RECORD_HEADER_FEATURE and size >= 16:
                bit = u64(buf, start + 8)[0]
                if bit in FEATURE_NAMES:
                    out += printer.feature(bit, bytes(buf[start + 16 : start + size]), off + 16)
            elif rtype < F.RECORD_HEADER_ATTR:
                break
    except FormatError:
        pass  # what came before the damage is printed, as perf does
    return out
