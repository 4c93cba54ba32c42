"""Plain data the rest of bpfsym speaks: programs, their functions, lines, kernel symbols.

Times are perf-clock nanoseconds (the clock named in the side-file header), the
same clock as perf.data sample times when both used the same clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Program.origin values
ORIGIN_SNAPSHOT = "snapshot"  # existed when capture started
ORIGIN_SIDEBAND = "sideband"  # seen loading through PERF_RECORD_BPF_EVENT / KSYMBOL
ORIGIN_RESCAN = "rescan"  # found by re-enumerating after lost side-band records
ORIGIN_PERF = "perf.data"  # from a perf.data file's HEADER_BPF_PROG_INFO


def ksym_name(tag: bytes | str, name: str) -> str:
    """A BPF function's /proc/kallsyms name: bpf_prog_<tag>_<name>, or bpf_prog_<tag>
    when unnamed (bpf_get_prog_name(), kernel/bpf/core.c)."""
    tag_hex = tag if isinstance(tag, str) else tag.hex()
    return f"bpf_prog_{tag_hex}_{name}" if name else f"bpf_prog_{tag_hex}"


@dataclass
class Function:
    """One JIT-compiled function (the main program or a sub-program)."""

    name: str  # exactly as /proc/kallsyms: bpf_prog_<tag>_<name>
    addr: int
    size: int
    image: bytes | None = None  # native code, None when not captured


@dataclass
class LineEntry:
    """One bpf_line_info record, resolved against the program's BTF strings."""

    insn_off: int  # index of the first xlated instruction of this line
    file: str
    text: str  # the source line itself, from the BTF string section
    line: int
    col: int
    jited_addr: int | None = None  # native address of this line, from jited_line_info


@dataclass
class FuncInfo:
    """One bpf_func_info record: where a function starts in the xlated code."""

    insn_off: int
    type_id: int
    name: str = ""  # BTF name of the FUNC type, when BTF was captured


@dataclass
class Program:
    """A BPF program, keyed by (id, load_time): ids are unique per boot, tags are content hashes."""

    id: int
    name: str  # bpf_prog_info.name (may be empty or truncated to 15 chars)
    tag: str  # 16 hex digits
    type: int  # enum bpf_prog_type
    load_time: int | None = None  # perf-clock ns of PERF_BPF_EVENT_PROG_LOAD; None: before capture
    unload_time: int | None = None  # None: alive when capture ended
    functions: list[Function] = field(default_factory=list)
    xlated: bytes | None = None  # struct bpf_insn array after verifier rewrites
    btf: bytes | None = None  # raw BTF blob of btf_id
    btf_id: int = 0
    func_info: list[FuncInfo] = field(default_factory=list)
    lines: list[LineEntry] = field(default_factory=list)
    map_ids: list[int] = field(default_factory=list)
    prog_tags: list[str] = field(default_factory=list)  # per function, as in bpf_prog_info
    run_time_ns: int = 0
    run_cnt: int = 0
    recursion_misses: int = 0
    origin: str = ORIGIN_SNAPSHOT
    missing: str = ""  # why info/image could not be fetched; "" when complete
    info: dict[str, object] = field(default_factory=dict)  # every other bpf_prog_info field

    @property
    def main_name(self) -> str:
        """The program's kallsyms name: its main function's ("" while none is known)."""
        return self.functions[0].name if self.functions else ""

    @property
    def has_image(self) -> bool:
        return bool(self.functions) and all(f.image is not None for f in self.functions)

    def outline(self) -> Program:
        """The program without its images, instructions, BTF and line info: its identity,
        lifetime, origin and functions (names, addresses, sizes), what placing an address
        at a time needs; for sending to another process."""
        out = Program(self.id, self.name, self.tag, self.type, self.load_time, self.unload_time)
        out.functions = [Function(f.name, f.addr, f.size) for f in self.functions]
        out.origin = self.origin
        return out

    def alive_at(self, t: int) -> bool:
        if self.load_time is not None and t < self.load_time:
            return False
        return self.unload_time is None or t < self.unload_time


@dataclass
class KernelSymbol:
    addr: int
    type: str  # nm-style letter from /proc/kallsyms
    name: str
    module: str = ""


@dataclass
class StatsSample:
    """Runtime stats of one program over one interval of `record --stats`."""

    time: int
    prog_id: int
    run_time_ns: int
    run_cnt: int
    recursion_misses: int


@dataclass
class CaptureHeader:
    kernel_release: str
    arch: str  # uname machine: x86_64, aarch64, ...
    page_size: int
    boot_id: str
    clock_id: int  # perf clock: -1 for perf's default (local_clock), else a CLOCK_* id
    start_time: int  # perf-clock ns when capture started
    hostname: str = ""
    version: int = 1


@dataclass
class Capture:
    """Everything a side file holds, as read back by bpfsym.read.sidefile.read_capture()."""

    header: CaptureHeader
    programs: list[Program] = field(default_factory=list)
    kallsyms: list[KernelSymbol] = field(default_factory=list)  # read.kallsyms parses texts
    kallsyms_texts: list[str] = field(default_factory=list)  # KALLSYMS records, as stored
    kallsyms_at: list[tuple[str, int]] = field(default_factory=list)  # (file, offset) of each
    sysctls: dict[str, str] = field(default_factory=dict)
    lost: int = 0  # PERF_RECORD_LOST side-band records
    stats: list[StatsSample] = field(default_factory=list)
    end_time: int | None = None
    torn: str = ""  # non-empty: the file ended in a torn record (writer killed); what and where
    warnings: list[str] = field(default_factory=list)

    def has_kallsyms(self) -> bool:
        return bool(self.kallsyms or self.kallsyms_texts)
