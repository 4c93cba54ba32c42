"""perf.data file layouts: file and pipe headers, feature sections, perf-tool records, samples.

From tools/perf/Documentation/perf.data-file-format.txt, tools/perf/util/header.c and
tools/lib/perf/include/perf/event.h (perf 6.x). Every field is in the byte order
of the machine that wrote the file (told by the magic), so everything here is
built per endianness by ``perfdata_layouts(little)``, composing the kernel ABI
structures of formats/perf.py.
"""

from __future__ import annotations

import functools

from construct import (
    Array,
    Bytes,
    Const,
    CString,
    If,
    PaddedString,
    Padding,
    PrefixedArray,
    Struct,
    this,
)

from .perf import (
    SAMPLE_AUX,
    SAMPLE_BRANCH_STACK,
    SAMPLE_CALLCHAIN,
    SAMPLE_CGROUP,
    SAMPLE_CODE_PAGE_SIZE,
    SAMPLE_CPU,
    SAMPLE_DATA_PAGE_SIZE,
    SAMPLE_DATA_SRC,
    SAMPLE_ID,
    SAMPLE_IDENTIFIER,
    SAMPLE_PHYS_ADDR,
    SAMPLE_PREFIX_ORDER,
    SAMPLE_RAW,
    SAMPLE_READ,
    SAMPLE_REGS_INTR,
    SAMPLE_REGS_USER,
    SAMPLE_STACK_USER,
    SAMPLE_STREAM_ID,
    SAMPLE_TID,
    SAMPLE_TIME,
    SAMPLE_TRANSACTION,
    SAMPLE_WEIGHT,
    SAMPLE_WEIGHT_STRUCT,
    PerfLayouts,
    layouts,
)

MAGIC_LE = b"PERFILE2"  # the u64 0x32454c4946524550 written little-endian
MAGIC_BE = MAGIC_LE[::-1]
FILE_HEADER_SIZE = 104
PIPE_HEADER_SIZE = 16

# enum perf_user_event_type (tools/lib/perf/include/perf/event.h)
RECORD_HEADER_ATTR = 64
RECORD_HEADER_EVENT_TYPE = 65
RECORD_HEADER_TRACING_DATA = 66
RECORD_HEADER_BUILD_ID = 67
RECORD_FINISHED_ROUND = 68
RECORD_ID_INDEX = 69
RECORD_AUXTRACE_INFO = 70
RECORD_AUXTRACE = 71
RECORD_AUXTRACE_ERROR = 72
RECORD_THREAD_MAP = 73
RECORD_CPU_MAP = 74
RECORD_STAT_CONFIG = 75
RECORD_STAT = 76
RECORD_STAT_ROUND = 77
RECORD_EVENT_UPDATE = 78
RECORD_TIME_CONV = 79
RECORD_HEADER_FEATURE = 80
RECORD_COMPRESSED = 81
RECORD_FINISHED_INIT = 82
RECORD_COMPRESSED2 = 83

# enum auxtrace_type (tools/perf/util/auxtrace.h): AUXTRACE_INFO.type
AUXTRACE_INTEL_PT = 1
AUXTRACE_NAMES = {
    1: "Intel PT",
    2: "Intel BTS",
    3: "ARM CoreSight ETM",
    4: "ARM SPE",
    5: "s390 CPU-MF",
    6: "HiSilicon PTT",
}

# perf_event_header.misc of PERF_RECORD_SWITCH(_CPU_WIDE): the task is switched out
MISC_SWITCH_OUT = 1 << 13

# enum of perf.data feature bits (tools/perf/util/header.h)
HEADER_TRACING_DATA = 1
HEADER_BUILD_ID = 2
HEADER_HOSTNAME = 3
HEADER_OSRELEASE = 4
HEADER_VERSION = 5
HEADER_ARCH = 6
HEADER_NRCPUS = 7
HEADER_CPUDESC = 8
HEADER_CPUID = 9
HEADER_TOTAL_MEM = 10
HEADER_CMDLINE = 11
HEADER_EVENT_DESC = 12
HEADER_SAMPLE_TIME = 21
HEADER_CLOCKID = 23
HEADER_BPF_PROG_INFO = 25
HEADER_BPF_BTF = 26
HEADER_COMPRESSED = 27
HEADER_FEAT_BITS = 256

# perf_event_header.misc
MISC_CPUMODE_MASK = 7
MISC_KERNEL = 1
MISC_USER = 2
MISC_HYPERVISOR = 3
MISC_GUEST_KERNEL = 4
MISC_GUEST_USER = 5
MISC_MMAP_BUILD_ID = 1 << 14  # MMAP2 carries a build id instead of maj/min/ino
MISC_BUILD_ID_SIZE = 1 << 15  # HEADER_BUILD_ID record carries its build id size
MISC_COMM_EXEC = 1 << 13

# callchain context markers (enum perf_callchain_context), as u64
CONTEXT_HV = 2**64 - 32
CONTEXT_KERNEL = 2**64 - 128
CONTEXT_USER = 2**64 - 512
CONTEXT_GUEST = 2**64 - 2048
CONTEXT_MAX = 2**64 - 4095  # every ip >= this is a marker

# perf_event_attr.read_format
FORMAT_TOTAL_TIME_ENABLED = 1 << 0
FORMAT_TOTAL_TIME_RUNNING = 1 << 1
FORMAT_ID = 1 << 2
FORMAT_GROUP = 1 << 3
FORMAT_LOST = 1 << 4

# perf_event_attr.branch_sample_type bits that change the branch stack layout
BRANCH_CALL_STACK = 1 << 11  # perf record --call-graph lbr
BRANCH_HW_INDEX = 1 << 17
BRANCH_COUNTERS = 1 << 19

# struct perf_bpil.arrays bits (tools/perf/util/bpf-utils.h, enum perf_bpil_array_types)
BPIL_JITED_INSNS = 0
BPIL_XLATED_INSNS = 1
BPIL_MAP_IDS = 2
BPIL_JITED_KSYMS = 3
BPIL_JITED_FUNC_LENS = 4
BPIL_FUNC_INFO = 5
BPIL_LINE_INFO = 6
BPIL_JITED_LINE_INFO = 7
BPIL_PROG_TAGS = 8

SAMPLE_ID_FIELDS = SAMPLE_TID | SAMPLE_TIME | SAMPLE_ID | SAMPLE_STREAM_ID | SAMPLE_CPU
SAMPLE_ID_FIELDS |= SAMPLE_IDENTIFIER


def regs_count(mask: int) -> int:
    """Registers a sample holds for a sample_regs_user/intr mask."""
    return bin(mask).count("1")


class PerfDataLayouts:
    """perf.data structures for one byte order. Get one from perfdata_layouts()."""

    def __init__(self, little: bool) -> None:
        k: PerfLayouts = layouts(little)
        t = k.ints
        self.kernel = k
        self.ints = t
        self.little = little
        section = Struct("offset" / t.u64, "size" / t.u64)
        self.section = section
        # struct perf_file_header
        self.file_header = Struct(
            "magic" / Const(MAGIC_LE if little else MAGIC_BE),
            "size" / t.u64,
            "attr_size" / t.u64,
            "attrs" / section,
            "data" / section,
            "event_types" / section,
            "features" / Array(HEADER_FEAT_BITS // 64, t.u64),  # flags + flags1[3]
        )
        # struct perf_pipe_file_header
        self.pipe_header = Struct("magic" / Const(MAGIC_LE if little else MAGIC_BE), "size" / t.u64)
        # struct perf_header_string: len includes the NUL padding
        self.string = Struct("len" / t.u32, "value" / PaddedString(this.len, "utf8"))
        self.string_list = PrefixedArray(t.u32, self.string)
        self.nrcpus = Struct("online" / t.u32, "available" / t.u32)
        self.sample_time = Struct("first" / t.u64, "last" / t.u64)
        self.u64 = t.u64
        self.u32 = t.u32
        self.header = k.header
        # struct perf_record_header_build_id (after perf_event_header)
        # HEADER_BPF_BTF entry: u32 id, u32 size, then size bytes of BTF (header.c write_bpf_btf)
        self.bpf_btf_entry = Struct("id" / t.u32, "size" / t.u32)
        self.build_id = Struct(
            "pid" / t.s32,
            "build_id" / Bytes(20),
            "size" / t.u8,  # valid when misc has MISC_BUILD_ID_SIZE
            Padding(3),
            "filename" / CString("utf8"),
        )
        # struct perf_bpil header: info_len bytes of bpf_prog_info and data_len of arrays follow
        self.bpil = Struct("info_len" / t.u32, "data_len" / t.u32, "arrays" / t.u64)
        # one HEADER_BPF_BTF entry (struct btf_node minus the rb_node)
        self.btf_entry = Struct("id" / t.u32, "data_size" / t.u32, "data" / Bytes(this.data_size))
        # PERF_RECORD_MMAP body
        self.mmap = Struct(
            "pid" / t.u32,
            "tid" / t.u32,
            "addr" / t.u64,
            "len" / t.u64,
            "pgoff" / t.u64,
            "filename" / CString("utf8"),
        )
        # PERF_RECORD_MMAP2 body; the 24 bytes after pgoff are maj/min/ino/ino_generation or,
        # with MISC_MMAP_BUILD_ID, build_id_size:u8 + 3 reserved + build_id[20]
        self.mmap2 = Struct(
            "pid" / t.u32,
            "tid" / t.u32,
            "addr" / t.u64,
            "len" / t.u64,
            "pgoff" / t.u64,
            "dev_or_build_id" / Bytes(24),
            "prot" / t.u32,
            "flags" / t.u32,
            "filename" / CString("utf8"),
        )
        self.mmap2_ids = Struct(
            "maj" / t.u32, "min" / t.u32, "ino" / t.u64, "ino_generation" / t.u64
        )
        self.mmap2_build_id = Struct("size" / t.u8, Padding(3), "build_id" / Bytes(20))
        # PERF_RECORD_COMM body
        self.comm = Struct("pid" / t.u32, "tid" / t.u32, "comm" / CString("utf8"))
        # PERF_RECORD_FORK / PERF_RECORD_EXIT body
        self.fork = Struct(
            "pid" / t.u32, "ppid" / t.u32, "tid" / t.u32, "ptid" / t.u32, "time" / t.u64
        )
        # PERF_RECORD_TEXT_POKE body (bytes: old then new, padded to 8 with sample_id after)
        self.text_poke = Struct(
            "addr" / t.u64,
            "old_len" / t.u16,
            "new_len" / t.u16,
            "bytes" / Bytes(this.old_len + this.new_len),
        )
        self.lost_samples = Struct("lost" / t.u64)
        # struct perf_record_event_update (after perf_event_header); type NAME (2): a C string
        self.event_update = Struct("type" / t.u64, "id" / t.u64)
        # struct perf_record_header_tracing_data: u32 size (and u32 pad since perf 4.x; older
        # perf wrote a 12-byte record); `size` bytes of tracing data follow the record
        self.tracing_data = Struct("size" / t.u32)
        # struct perf_record_auxtrace: u64 size, offset, reference; u32 idx, tid, cpu,
        # reserved; `size` bytes of AUX-area trace follow the record
        self.auxtrace = Struct(
            "size" / t.u64, "offset" / t.u64, "reference" / t.u64,
            "idx" / t.u32, "tid" / t.u32, "cpu" / t.u32, "reserved" / t.u32,
        )  # fmt: skip
        # struct perf_record_auxtrace_info (after perf_event_header): u32 type (enum
        # auxtrace_type), u32 reserved, then u64 priv[] to header.size (per trace type:
        # Intel PT's in tools/perf/util/intel-pt.h, INTEL_PT_PMU_TYPE ...)
        self.auxtrace_info = Struct("type" / t.u32, "reserved" / t.u32)
        # PERF_RECORD_ITRACE_START body (perf_event.h): the task whose tracing started
        self.itrace_start = Struct("pid" / t.u32, "tid" / t.u32)
        # PERF_RECORD_SWITCH_CPU_WIDE body: the task switched to (out) or from (in)
        self.switch_cpu_wide = Struct("next_prev_pid" / t.u32, "next_prev_tid" / t.u32)
        # PERF_RECORD_ID_INDEX body: nr then struct id_index_entry[nr]
        self.id_index = Struct(
            "nr" / t.u64,
            "entries"
            / Array(this.nr, Struct("id" / t.u64, "idx" / t.u64, "cpu" / t.u64, "tid" / t.u64)),
        )
        # PERF_RECORD_HEADER_FEATURE body: the feature id, then the feature section itself
        self.header_feature = Struct("feat_id" / t.u64)
        # PERF_RECORD_COMPRESSED2 body: the compressed size (header.size is padded to 8)
        self.compressed2 = Struct("data_size" / t.u64)

    def file_attr(self, attr_size: int) -> Struct:
        """One entry of the attrs section: attr_size bytes of perf_event_attr, then its ids."""
        return Struct("attr" / Bytes(attr_size), "ids" / self.section)

    def event_desc(self) -> Struct:
        """HEADER_EVENT_DESC: attrs with their names and ids."""
        t = self.ints
        return Struct(
            "nr" / t.u32,
            "attr_size" / t.u32,
            "events"
            / Array(
                this.nr,
                Struct(
                    "attr" / Bytes(this._.attr_size),
                    "nr_ids" / t.u32,
                    "name" / self.string,
                    "ids" / Array(this.nr_ids, t.u64),
                ),
            ),
        )

    def read_value(self, read_format: int) -> Struct:
        """The SAMPLE_READ part of a sample (struct read_format)."""
        t = self.ints
        per_value = ["value" / t.u64]
        if read_format & FORMAT_ID:
            per_value.append("id" / t.u64)
        if read_format & FORMAT_LOST:
            per_value.append("lost" / t.u64)
        times = []
        if read_format & FORMAT_TOTAL_TIME_ENABLED:
            times.append("time_enabled" / t.u64)
        if read_format & FORMAT_TOTAL_TIME_RUNNING:
            times.append("time_running" / t.u64)
        if read_format & FORMAT_GROUP:
            return Struct("nr" / t.u64, *times, "values" / Array(this.nr, Struct(*per_value)))
        return Struct(per_value[0], *times, *per_value[1:])

    def sample_fields(
        self,
        sample_type: int,
        read_format: int = 0,
        branch_sample_type: int = 0,
        regs_user: int = 0,
        regs_intr: int = 0,
    ) -> tuple[list, list]:
        """PERF_RECORD_SAMPLE fields in ABI order, split into the fixed-size prefix and the rest.

        The prefix (everything up to SAMPLE_PERIOD) has the same size in every sample of
        the event; the hot path reads it with a struct.Struct derived from it.
        """
        t = self.ints
        fixed = self.kernel.flag_fields(sample_type, SAMPLE_PREFIX_ORDER)
        rest: list = []
        if sample_type & SAMPLE_READ:
            rest.append("read" / self.read_value(read_format))
        if sample_type & SAMPLE_CALLCHAIN:
            rest.append("callchain" / PrefixedArray(t.u64, t.u64))
        if sample_type & SAMPLE_RAW:
            rest.append("raw" / Struct("size" / t.u32, "data" / Bytes(this.size)))
        if sample_type & SAMPLE_BRANCH_STACK:
            entry = Struct("from_ip" / t.u64, "to_ip" / t.u64, "flags" / t.u64)
            branch = ["nr" / t.u64]
            if branch_sample_type & BRANCH_HW_INDEX:
                branch.append("hw_idx" / t.u64)
            branch.append("entries" / Array(this.nr, entry))
            if branch_sample_type & BRANCH_COUNTERS:
                branch.append("counters" / Array(this.nr, t.u64))
            rest.append("branch_stack" / Struct(*branch))
        if sample_type & SAMPLE_REGS_USER:
            rest.append("regs_user" / self._regs(regs_user))
        if sample_type & SAMPLE_STACK_USER:
            rest.append(
                "stack_user"
                / Struct(
                    "size" / t.u64,
                    "data" / Bytes(this.size),
                    "dyn_size" / If(this.size != 0, t.u64),
                )
            )
        if sample_type & (SAMPLE_WEIGHT | SAMPLE_WEIGHT_STRUCT):
            rest.append("weight" / t.u64)  # union with struct { u32 var1_dw; u16 var2_w, var3_w; }
        if sample_type & SAMPLE_DATA_SRC:
            rest.append("data_src" / t.u64)
        if sample_type & SAMPLE_TRANSACTION:
            rest.append("transaction" / t.u64)
        if sample_type & SAMPLE_REGS_INTR:
            rest.append("regs_intr" / self._regs(regs_intr))
        if sample_type & SAMPLE_PHYS_ADDR:
            rest.append("phys_addr" / t.u64)
        if sample_type & SAMPLE_CGROUP:
            rest.append("cgroup" / t.u64)
        if sample_type & SAMPLE_DATA_PAGE_SIZE:
            rest.append("data_page_size" / t.u64)
        if sample_type & SAMPLE_CODE_PAGE_SIZE:
            rest.append("code_page_size" / t.u64)
        if sample_type & SAMPLE_AUX:
            rest.append("aux" / Struct("size" / t.u64, "data" / Bytes(this.size)))
        return fixed, rest

    def _regs(self, mask: int) -> Struct:
        t = self.ints
        # abi is PERF_SAMPLE_REGS_ABI_NONE (0) when no registers follow
        return Struct("abi" / t.u64, "regs" / If(this.abi != 0, Array(regs_count(mask), t.u64)))

    def sample(
        self,
        sample_type: int,
        read_format: int = 0,
        branch_sample_type: int = 0,
        regs_user: int = 0,
        regs_intr: int = 0,
    ) -> Struct:
        """The whole PERF_RECORD_SAMPLE body for an event's attr."""
        fixed, rest = self.sample_fields(
            sample_type, read_format, branch_sample_type, regs_user, regs_intr
        )
        return Struct(*fixed, *rest)

    def sample_prefix(self, sample_type: int) -> Struct:
        """The fixed-size prefix of PERF_RECORD_SAMPLE (identifier .. period)."""
        return Struct(*self.sample_fields(sample_type)[0])


@functools.cache
def perfdata_layouts(little: bool) -> PerfDataLayouts:
    """perf.data layouts for a byte order."""
    return PerfDataLayouts(little)
