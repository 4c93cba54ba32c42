"""perf_event ABI layouts: perf_event_attr, the mmap control page, side-band records.

From include/uapi/linux/perf_event.h (Linux 6.18). Layouts that appear in
perf.data files of either byte order are built by a factory per endianness;
the live side (mmap page, attr for perf_event_open) uses native order.
"""

from __future__ import annotations

import functools
import struct
import sys

from construct import (
    Bytes,
    CString,
    Enum,
    FlagsEnum,
    Int8ub,
    Int8ul,
    Int16sb,
    Int16sl,
    Int16ub,
    Int16ul,
    Int32sb,
    Int32sl,
    Int32ub,
    Int32ul,
    Int64sb,
    Int64sl,
    Int64ub,
    Int64ul,
    Padding,
    Struct,
)

from . import fixed_head, struct_of

# enum perf_type_id
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_COUNT_SW_TASK_CLOCK = 1
PERF_COUNT_SW_DUMMY = 9

# enum perf_event_sample_format
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_READ = 1 << 4
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_STREAM_ID = 1 << 9
SAMPLE_RAW = 1 << 10
SAMPLE_BRANCH_STACK = 1 << 11
SAMPLE_REGS_USER = 1 << 12
SAMPLE_STACK_USER = 1 << 13
SAMPLE_WEIGHT = 1 << 14
SAMPLE_DATA_SRC = 1 << 15
SAMPLE_IDENTIFIER = 1 << 16
SAMPLE_TRANSACTION = 1 << 17
SAMPLE_REGS_INTR = 1 << 18
SAMPLE_PHYS_ADDR = 1 << 19
SAMPLE_AUX = 1 << 20
SAMPLE_CGROUP = 1 << 21
SAMPLE_DATA_PAGE_SIZE = 1 << 22
SAMPLE_CODE_PAGE_SIZE = 1 << 23
SAMPLE_WEIGHT_STRUCT = 1 << 24

# enum perf_event_type
RECORD_MMAP = 1
RECORD_LOST = 2
RECORD_COMM = 3
RECORD_EXIT = 4
RECORD_THROTTLE = 5
RECORD_UNTHROTTLE = 6
RECORD_FORK = 7
RECORD_READ = 8
RECORD_SAMPLE = 9
RECORD_MMAP2 = 10
RECORD_AUX = 11
RECORD_ITRACE_START = 12
RECORD_LOST_SAMPLES = 13
RECORD_SWITCH = 14
RECORD_SWITCH_CPU_WIDE = 15
RECORD_NAMESPACES = 16
RECORD_KSYMBOL = 17
RECORD_BPF_EVENT = 18
RECORD_CGROUP = 19
RECORD_TEXT_POKE = 20
RECORD_AUX_OUTPUT_HW_ID = 21

# enum perf_record_ksymbol_type
KSYMBOL_TYPE_UNKNOWN = 0
KSYMBOL_TYPE_BPF = 1
KSYMBOL_TYPE_OOL = 2
KSYMBOL_FLAGS_UNREGISTER = 1 << 0

# enum perf_bpf_event_type
BPF_EVENT_UNKNOWN = 0
BPF_EVENT_PROG_LOAD = 1
BPF_EVENT_PROG_UNLOAD = 2

# the attr flag word, bit by bit (__u64 disabled:1, inherit:1, ...)
ATTR_FLAG_BITS = {
    "disabled": 1 << 0,
    "inherit": 1 << 1,
    "pinned": 1 << 2,
    "exclusive": 1 << 3,
    "exclude_user": 1 << 4,
    "exclude_kernel": 1 << 5,
    "exclude_hv": 1 << 6,
    "exclude_idle": 1 << 7,
    "mmap": 1 << 8,
    "comm": 1 << 9,
    "freq": 1 << 10,
    "inherit_stat": 1 << 11,
    "enable_on_exec": 1 << 12,
    "task": 1 << 13,
    "watermark": 1 << 14,
    "precise_ip_lo": 1 << 15,  # precise_ip:2
    "precise_ip_hi": 1 << 16,
    "mmap_data": 1 << 17,
    "sample_id_all": 1 << 18,
    "exclude_host": 1 << 19,
    "exclude_guest": 1 << 20,
    "exclude_callchain_kernel": 1 << 21,
    "exclude_callchain_user": 1 << 22,
    "mmap2": 1 << 23,
    "comm_exec": 1 << 24,
    "use_clockid": 1 << 25,
    "context_switch": 1 << 26,
    "write_backward": 1 << 27,
    "namespaces": 1 << 28,
    "ksymbol": 1 << 29,
    "bpf_event": 1 << 30,
    "aux_output": 1 << 31,
    "cgroup": 1 << 32,
    "text_poke": 1 << 33,
    "build_id": 1 << 34,
    "inherit_thread": 1 << 35,
    "remove_on_exec": 1 << 36,
    "sigtrap": 1 << 37,
}

PERF_ATTR_SIZE_VER8 = 136


class _Ints:
    """The integer types of one byte order."""

    def __init__(self, little: bool) -> None:
        self.u8 = Int8ul if little else Int8ub
        self.u16 = Int16ul if little else Int16ub
        self.u32 = Int32ul if little else Int32ub
        self.u64 = Int64ul if little else Int64ub
        self.s16 = Int16sl if little else Int16sb
        self.s32 = Int32sl if little else Int32sb
        self.s64 = Int64sl if little else Int64sb


class PerfLayouts:
    """perf_event structures for one byte order. Get one from layouts()."""

    def __init__(self, little: bool) -> None:
        t = _Ints(little)
        self.little = little
        self.ints = t
        # struct perf_event_attr, PERF_ATTR_SIZE_VER8 (136 bytes)
        self.attr = Struct(
            "type" / t.u32,
            "size" / t.u32,
            "config" / t.u64,
            "sample_period" / t.u64,  # union with sample_freq
            "sample_type" / t.u64,
            "read_format" / t.u64,
            "flags" / FlagsEnum(t.u64, **ATTR_FLAG_BITS),
            "wakeup_events" / t.u32,  # union with wakeup_watermark
            "bp_type" / t.u32,
            "config1" / t.u64,  # union with bp_addr, kprobe_func, uprobe_path
            "config2" / t.u64,  # union with bp_len, kprobe_addr, probe_offset
            "branch_sample_type" / t.u64,
            "sample_regs_user" / t.u64,
            "sample_stack_user" / t.u32,
            "clockid" / t.s32,
            "sample_regs_intr" / t.u64,
            "aux_watermark" / t.u32,
            "sample_max_stack" / t.u16,
            Padding(2),
            "aux_sample_size" / t.u32,
            "aux_action" / t.u32,
            "sig_data" / t.u64,
            "config3" / t.u64,
        )
        # struct perf_event_header
        self.header = Struct("type" / t.u32, "misc" / t.u16, "size" / t.u16)
        # PERF_RECORD_KSYMBOL body (after the header, before sample_id)
        self.ksymbol = Struct(
            "addr" / t.u64,
            "len" / t.u32,
            "ksym_type" / t.u16,
            "flags" / t.u16,
            "name" / CString("utf8"),
        )
        # PERF_RECORD_BPF_EVENT body
        self.bpf_event = Struct(
            "type" / Enum(t.u16, unknown=0, prog_load=1, prog_unload=2),
            "flags" / t.u16,
            "id" / t.u32,
            "tag" / Bytes(8),
        )
        # PERF_RECORD_LOST body
        self.lost = Struct("id" / t.u64, "lost" / t.u64)
        # struct perf_event_mmap_page: only the fields bpfsym reads, at their ABI offsets
        self.mmap_page = Struct(
            "version" / t.u32,
            "compat_version" / t.u32,
            Padding(1024 - 8),
            "data_head" / t.u64,  # offset 1024
            "data_tail" / t.u64,
            "data_offset" / t.u64,
            "data_size" / t.u64,
        )

    @functools.cached_property
    def fast(self) -> FastLayouts:
        """struct views of the side-band records, for readers of many of them."""
        return FastLayouts(self)

    def sample_id(self, sample_type: int) -> Struct:
        """The sample_id trailer (sample_id_all) for a sample_type, fields in ABI order."""
        return Struct(*self.flag_fields(sample_type, SAMPLE_ID_ORDER))

    def flag_fields(self, sample_type: int, order: tuple[int, ...]) -> list:
        """The fixed-size fields of the sample_type bits in order (one declaration each,
        shared by the sample_id trailer and PERF_RECORD_SAMPLE's prefix)."""
        t = self.ints
        decl = {
            SAMPLE_IDENTIFIER: ["identifier" / t.u64],
            SAMPLE_IP: ["ip" / t.u64],
            SAMPLE_TID: ["pid" / t.u32, "tid" / t.u32],
            SAMPLE_TIME: ["time" / t.u64],
            SAMPLE_ADDR: ["addr" / t.u64],
            SAMPLE_ID: ["id" / t.u64],
            SAMPLE_STREAM_ID: ["stream_id" / t.u64],
            SAMPLE_CPU: ["cpu" / t.u32, Padding(4)],  # u32 cpu, res
            SAMPLE_PERIOD: ["period" / t.u64],
        }
        return [f for bit in order if sample_type & bit for f in decl[bit]]


# perf_event_open(2) / include/uapi/linux/perf_event.h: the order of the fixed-size fields
# of the sample_id trailer (struct sample_id) and of PERF_RECORD_SAMPLE up to its period
SAMPLE_ID_ORDER = (
    SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER,
)  # fmt: skip
SAMPLE_PREFIX_ORDER = (
    SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR, SAMPLE_ID,
    SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_PERIOD,
)  # fmt: skip


class FastLayouts:
    """struct.Struct views of PerfLayouts' fixed-size record parts (see struct_of)."""

    def __init__(self, lay: PerfLayouts) -> None:
        self.header = struct_of(lay.header)[0]  # type, misc, size
        self.ksymbol = fixed_head(lay.ksymbol, "name")[0]  # addr, len, ksym_type, flags
        self.bpf_event = struct_of(lay.bpf_event)[0]  # type (an int here), flags, id, tag
        self.lost = struct_of(lay.lost)[0]  # id, lost
        self._lay = lay

    def sample_id(self, sample_type: int) -> tuple[struct.Struct, tuple[str, ...]]:
        """struct_of(PerfLayouts.sample_id(sample_type)): the trailer and its field names."""
        return struct_of(self._lay.sample_id(sample_type))


@functools.cache
def layouts(little: bool = sys.byteorder == "little") -> PerfLayouts:
    """perf_event layouts for a byte order (default: this machine's)."""
    return PerfLayouts(little)


def ksymbol_name_size(name_len: int) -> int:
    """Bytes the kernel writes for a KSYMBOL name: the string, NUL, padded to 8 (perf_event_ksymbol)."""
    return (name_len + 1 + 7) & ~7


MMAP_DATA_HEAD_OFFSET = 1024  # offsetof(struct perf_event_mmap_page, data_head)
