"""BPF syscall layouts: bpf_attr pieces, bpf_prog_info, bpf_func_info, bpf_line_info, and the
record top's holder iterator program writes.

From include/uapi/linux/bpf.h (Linux 6.18). These are read from the running
kernel (native byte order) and stored as-is in side files, whose header names
the byte order of the machine that wrote them.
"""

from __future__ import annotations

import functools
import struct
import sys
from typing import Any

from construct import (
    Aligned,
    Bytes,
    Construct,
    Int32ub,
    Int32ul,
    Int64ub,
    Int64ul,
    PaddedString,
    Struct,
)

from . import struct_of
from .bpfinsn import bpf_insn_packed

# enum bpf_cmd
BPF_PROG_LOAD = 5
BPF_OBJ_GET = 7
BPF_PROG_TEST_RUN = 10
BPF_PROG_GET_NEXT_ID = 11
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_BTF_GET_FD_BY_ID = 19
BPF_ENABLE_STATS = 32

# enum bpf_stats_type
BPF_STATS_RUN_TIME = 0

# enum bpf_prog_type, names as bpftool prints them
PROG_TYPES = [
    "unspec", "socket_filter", "kprobe", "sched_cls", "sched_act", "tracepoint", "xdp",
    "perf_event", "cgroup_skb", "cgroup_sock", "lwt_in", "lwt_out", "lwt_xmit", "sock_ops",
    "sk_skb", "cgroup_device", "sk_msg", "raw_tracepoint", "cgroup_sock_addr", "lwt_seg6local",
    "lirc_mode2", "sk_reuseport", "flow_dissector", "cgroup_sysctl", "raw_tracepoint_writable",
    "cgroup_sockopt", "tracing", "struct_ops", "ext", "lsm", "sk_lookup", "syscall", "netfilter",
]  # fmt: skip


def prog_type_name(t: int) -> str:
    return PROG_TYPES[t] if 0 <= t < len(PROG_TYPES) else f"type{t}"


# bpf_attr for BPF_*_GET_NEXT_ID and BPF_*_GET_FD_BY_ID
get_id_attr = Struct("id" / Int32ul, "next_id" / Int32ul, "open_flags" / Int32ul)
# bpf_attr.info for BPF_OBJ_GET_INFO_BY_FD
info_attr = Struct("bpf_fd" / Int32ul, "info_len" / Int32ul, "info" / Int64ul)
# bpf_attr.enable_stats
enable_stats_attr = Struct("type" / Int32ul)
# bpf_attr.test for BPF_PROG_TEST_RUN
test_run_attr = Struct(
    "prog_fd" / Int32ul,
    "retval" / Int32ul,
    "data_size_in" / Int32ul,
    "data_size_out" / Int32ul,
    "data_in" / Int64ul,
    "data_out" / Int64ul,
    "repeat" / Int32ul,
    "duration" / Int32ul,
    "ctx_size_in" / Int32ul,
    "ctx_size_out" / Int32ul,
    "ctx_in" / Int64ul,
    "ctx_out" / Int64ul,
    "flags" / Int32ul,
    "cpu" / Int32ul,
    "batch_size" / Int32ul,
)
# bpf_attr for BPF_OBJ_GET (open a pinned object)
obj_get_attr = Struct("pathname" / Int64ul, "bpf_fd" / Int32ul, "file_flags" / Int32ul)


def _prog_info(u32: Construct, u64: Construct) -> Struct:
    # struct bpf_prog_info { ... } __attribute__((aligned(8)))
    return Aligned(
        8,
        Struct(
            "type" / u32,
            "id" / u32,
            "tag" / Bytes(8),
            "jited_prog_len" / u32,
            "xlated_prog_len" / u32,
            "jited_prog_insns" / u64,
            "xlated_prog_insns" / u64,
            "load_time" / u64,  # ns since boot (CLOCK_BOOTTIME)
            "created_by_uid" / u32,
            "nr_map_ids" / u32,
            "map_ids" / u64,
            "name" / PaddedString(16, "utf8"),
            "ifindex" / u32,
            "gpl_compatible" / u32,  # gpl_compatible:1, 31 bits unused
            "netns_dev" / u64,
            "netns_ino" / u64,
            "nr_jited_ksyms" / u32,
            "nr_jited_func_lens" / u32,
            "jited_ksyms" / u64,
            "jited_func_lens" / u64,
            "btf_id" / u32,
            "func_info_rec_size" / u32,
            "func_info" / u64,
            "nr_func_info" / u32,
            "nr_line_info" / u32,
            "line_info" / u64,
            "jited_line_info" / u64,
            "nr_jited_line_info" / u32,
            "line_info_rec_size" / u32,
            "jited_line_info_rec_size" / u32,
            "nr_prog_tags" / u32,
            "prog_tags" / u64,
            "run_time_ns" / u64,
            "run_cnt" / u64,
            "recursion_misses" / u64,
            "verified_insns" / u32,
            "attach_btf_obj_id" / u32,
            "attach_btf_id" / u32,
        ),
    )


@functools.cache
def prog_info(little: bool = sys.byteorder == "little") -> Struct:
    return _prog_info(Int32ul if little else Int32ub, Int64ul if little else Int64ub)


@functools.cache
def prog_info_struct(
    little: bool = sys.byteorder == "little",
) -> tuple[struct.Struct, tuple[str, ...]]:
    """struct_of(prog_info(little)): the same declaration, read at struct's speed (construct
    takes ~30 µs a bpf_prog_info; side files and perf.data headers hold thousands)."""
    return struct_of(prog_info(little))


def prog_info_values(raw: bytes, little: bool = sys.byteorder == "little") -> dict[str, Any]:
    """bpf_prog_info bytes as {field: value}, as prog_info(little).parse gives them: shorter
    info (an older kernel) reads as zero-extended, longer (a newer one) is cut; `name` is
    text up to its first NUL (undecodable bytes replaced), `tag` 8 raw bytes."""
    fast, names = prog_info_struct(little)
    values = dict(zip(names, fast.unpack(raw[: fast.size].ljust(fast.size, b"\0")), strict=True))
    values["name"] = prog_name(values["name"])
    return values


def prog_name(raw: bytes) -> str:
    """bpf_prog_info.name's 16 bytes as text: up to the first NUL, undecodable bytes replaced."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


# struct bpf_btf_info
btf_info = Aligned(
    8,
    Struct(
        "btf" / Int64ul,
        "btf_size" / Int32ul,
        "id" / Int32ul,
        "name" / Int64ul,
        "name_len" / Int32ul,
        "kernel_btf" / Int32ul,
    ),
)

# struct bpf_func_info
func_info = Struct("insn_off" / Int32ul, "type_id" / Int32ul)
# struct bpf_line_info; line_col is (line << 10) | col
line_info = Struct(
    "insn_off" / Int32ul,
    "file_name_off" / Int32ul,
    "line_off" / Int32ul,
    "line_col" / Int32ul,
)
# struct bpf_insn as the host ABI has it (little-endian), its register byte whole:
# declared in formats.bpfinsn with the opcode fields
bpf_insn = bpf_insn_packed(True)


def line_number(line_col: int) -> int:
    return line_col >> 10  # BPF_LINE_INFO_LINE_NUM


def line_column(line_col: int) -> int:
    return line_col & 0x3FF  # BPF_LINE_INFO_LINE_COL


# bpf_attr for BPF_PROG_LOAD, the leading fields (the kernel zero-extends the rest)
prog_load_attr = Struct(
    "prog_type" / Int32ul,
    "insn_cnt" / Int32ul,
    "insns" / Int64ul,
    "license" / Int64ul,
    "log_level" / Int32ul,
    "log_size" / Int32ul,
    "log_buf" / Int64ul,
    "kern_version" / Int32ul,
    "prog_flags" / Int32ul,
    "prog_name" / PaddedString(16, "utf8"),
)

# bpf_attr for BPF_PROG_LOAD up to attach_btf_obj_fd (offsets 0..116), 120 bytes: the leading
# fields, then what a program attaching to a kernel BTF id (tracing: iterators) sets:
# expected_attach_type (68), attach_btf_id (108), attach_btf_obj_fd (112, a union with
# attach_prog_fd). Aligned pads it to the union's 8 bytes, where core_relo_cnt lies (zero).
prog_load_btf_attr = Aligned(
    8,
    Struct(
        *prog_load_attr.subcons,
        "prog_ifindex" / Int32ul,
        "expected_attach_type" / Int32ul,
        "prog_btf_fd" / Int32ul,
        "func_info_rec_size" / Int32ul,
        "func_info" / Int64ul,
        "func_info_cnt" / Int32ul,
        "line_info_rec_size" / Int32ul,
        "line_info" / Int64ul,
        "line_info_cnt" / Int32ul,
        "attach_btf_id" / Int32ul,
        "attach_btf_obj_fd" / Int32ul,
    ),
)
# bpf_attr.link_create for BPF_LINK_CREATE, up to iter_info_len (a union's member: the
# iterator's bpf_iter_link_info), padded to 8 bytes
link_create_attr = Aligned(
    8,
    Struct(
        "prog_fd" / Int32ul,
        "target_fd" / Int32ul,
        "attach_type" / Int32ul,
        "flags" / Int32ul,
        "iter_info" / Int64ul,
        "iter_info_len" / Int32ul,
    ),
)
# bpf_attr.iter_create for BPF_ITER_CREATE
iter_create_attr = Struct("link_fd" / Int32ul, "flags" / Int32ul)

# Not a kernel layout: bpfsym's own record, which top's task_file iterator program
# (bpfsym/top/holders.py) writes with bpf_seq_write for every BPF program or link file:
# the holder's tgid, the program's id, the thread-group leader's comm (NUL-padded, raw bytes)
holder_record = Struct("tgid" / Int32ul, "prog_id" / Int32ul, "comm" / Bytes(16))
