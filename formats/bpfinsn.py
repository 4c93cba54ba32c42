"""eBPF instruction encoding: struct bpf_insn and the opcode fields the kernel's printer reads.

From include/uapi/linux/bpf.h, include/uapi/linux/bpf_common.h and kernel/bpf/disasm.c
(Linux 6.18). The xlated instructions of bpf_prog_info are in the byte order of the machine
that loaded them; within the regs byte, dst_reg is the low nibble on little-endian machines and
the high nibble on big-endian ones (a C bitfield `dst_reg:4, src_reg:4`).
"""

from __future__ import annotations

import functools
from typing import Any

from construct import BitsInteger, BitStruct, Int8ul, Int16sb, Int16sl, Int32sb, Int32sl, Struct

INSN_SIZE = 8


def _insn(little: bool, regs: Any) -> Struct:
    return Struct(
        "code" / Int8ul,
        "regs" / regs,
        "off" / (Int16sl if little else Int16sb),
        "imm" / (Int32sl if little else Int32sb),
    )


@functools.cache
def bpf_insn(little: bool = True) -> Struct:
    """struct bpf_insn { u8 code; u8 dst_reg:4, src_reg:4; s16 off; s32 imm; }"""
    regs = (
        BitStruct("src_reg" / BitsInteger(4), "dst_reg" / BitsInteger(4))
        if little
        else BitStruct("dst_reg" / BitsInteger(4), "src_reg" / BitsInteger(4))
    )
    return _insn(little, regs)


@functools.cache
def bpf_insn_packed(little: bool = True) -> Struct:
    """bpf_insn with its register byte whole (for struct_of): dst_reg is its low nibble in
    little-endian order, its high nibble in big-endian (the bitfields' allocation order)."""
    return _insn(little, Int8ul)


# instruction classes: BPF_CLASS(code) = code & 0x07
BPF_LD, BPF_LDX, BPF_ST, BPF_STX, BPF_ALU, BPF_JMP, BPF_JMP32, BPF_ALU64 = range(8)
CLASS_NAMES = ["ld", "ldx", "st", "stx", "alu", "jmp", "jmp32", "alu64"]

# ld/st size: BPF_SIZE(code) = code & 0x18
BPF_W, BPF_H, BPF_B, BPF_DW = 0x00, 0x08, 0x10, 0x18
# ld/st mode: BPF_MODE(code) = code & 0xe0
BPF_IMM, BPF_ABS, BPF_IND, BPF_MEM, BPF_MEMSX, BPF_ATOMIC = 0x00, 0x20, 0x40, 0x60, 0x80, 0xC0
BPF_NOSPEC = 0xC0  # BPF_ST | BPF_NOSPEC: kernel-internal, not in uapi

# alu/jmp source: BPF_SRC(code) = code & 0x08
BPF_K, BPF_X = 0x00, 0x08
BPF_TO_LE, BPF_TO_BE = 0x00, 0x08  # BPF_END reuses the source bit

# alu operations: BPF_OP(code) = code & 0xf0
BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV, BPF_OR, BPF_AND, BPF_LSH, BPF_RSH = range(0x00, 0x80, 0x10)
BPF_NEG, BPF_MOD, BPF_XOR, BPF_MOV, BPF_ARSH, BPF_END = range(0x80, 0xE0, 0x10)

# jmp operations
BPF_JA, BPF_JEQ, BPF_JGT, BPF_JGE, BPF_JSET, BPF_JNE, BPF_JSGT, BPF_JSGE = range(0x00, 0x80, 0x10)
BPF_CALL, BPF_EXIT, BPF_JLT, BPF_JLE, BPF_JSLT, BPF_JSLE, BPF_JCOND = range(0x80, 0xF0, 0x10)

# BPF_ATOMIC operations in imm
BPF_FETCH = 0x01
BPF_XCHG = 0xE0 | BPF_FETCH
BPF_CMPXCHG = 0xF0 | BPF_FETCH
BPF_LOAD_ACQ = 0x100
BPF_STORE_REL = 0x110

# src_reg of BPF_LD|BPF_IMM|BPF_DW
BPF_PSEUDO_MAP_FD = 1
BPF_PSEUDO_MAP_VALUE = 2
BPF_PSEUDO_BTF_ID = 3
BPF_PSEUDO_FUNC = 4
BPF_PSEUDO_MAP_IDX = 5
BPF_PSEUDO_MAP_IDX_VALUE = 6
# src_reg of BPF_JMP|BPF_CALL
BPF_PSEUDO_CALL = 1
BPF_PSEUDO_KFUNC_CALL = 2
# src_reg of BPF_JMP|BPF_JCOND
BPF_MAY_GOTO = 0
# off of BPF_ALU64|BPF_MOV|BPF_X
BPF_ADDR_SPACE_CAST = 1

ALU_OPS = {
    BPF_ADD: "+=", BPF_SUB: "-=", BPF_MUL: "*=", BPF_DIV: "/=", BPF_OR: "|=", BPF_AND: "&=",
    BPF_LSH: "<<=", BPF_RSH: ">>=", BPF_NEG: "neg", BPF_MOD: "%=", BPF_XOR: "^=", BPF_MOV: "=",
    BPF_ARSH: "s>>=", BPF_END: "endian",
}  # fmt: skip
ALU_SIGNED_OPS = {BPF_DIV: "s/=", BPF_MOD: "s%="}
MOVSX_CASTS = {8: "(s8)", 16: "(s16)", 32: "(s32)"}
ATOMIC_ALU_NAMES = {BPF_ADD: "add", BPF_AND: "and", BPF_OR: "or", BPF_XOR: "xor"}
LDST_TYPES = {BPF_W: "u32", BPF_H: "u16", BPF_B: "u8", BPF_DW: "u64"}
LDSX_TYPES = {BPF_W: "s32", BPF_H: "s16", BPF_B: "s8"}
JMP_OPS = {
    BPF_JA: "jmp", BPF_JEQ: "==", BPF_JGT: ">", BPF_JLT: "<", BPF_JGE: ">=", BPF_JLE: "<=",
    BPF_JSET: "&", BPF_JNE: "!=", BPF_JSGT: "s>", BPF_JSLT: "s<", BPF_JSGE: "s>=",
    BPF_JSLE: "s<=", BPF_CALL: "call", BPF_EXIT: "exit",
}  # fmt: skip

# enum bpf_func_id (___BPF_FUNC_MAPPER), index = helper id; frozen at 211 since Linux 6.2
HELPER_NAMES = [
    "unspec", "map_lookup_elem", "map_update_elem", "map_delete_elem", "probe_read",
    "ktime_get_ns", "trace_printk", "get_prandom_u32", "get_smp_processor_id", "skb_store_bytes",
    "l3_csum_replace", "l4_csum_replace", "tail_call", "clone_redirect", "get_current_pid_tgid",
    "get_current_uid_gid", "get_current_comm", "get_cgroup_classid", "skb_vlan_push",
    "skb_vlan_pop", "skb_get_tunnel_key", "skb_set_tunnel_key", "perf_event_read", "redirect",
    "get_route_realm", "perf_event_output", "skb_load_bytes", "get_stackid", "csum_diff",
    "skb_get_tunnel_opt", "skb_set_tunnel_opt", "skb_change_proto", "skb_change_type",
    "skb_under_cgroup", "get_hash_recalc", "get_current_task", "probe_write_user",
    "current_task_under_cgroup", "skb_change_tail", "skb_pull_data", "csum_update",
    "set_hash_invalid", "get_numa_node_id", "skb_change_head", "xdp_adjust_head", "probe_read_str",
    "get_socket_cookie", "get_socket_uid", "set_hash", "setsockopt", "skb_adjust_room",
    "redirect_map", "sk_redirect_map", "sock_map_update", "xdp_adjust_meta",
    "perf_event_read_value", "perf_prog_read_value", "getsockopt", "override_return",
    "sock_ops_cb_flags_set", "msg_redirect_map", "msg_apply_bytes", "msg_cork_bytes",
    "msg_pull_data", "bind", "xdp_adjust_tail", "skb_get_xfrm_state", "get_stack",
    "skb_load_bytes_relative", "fib_lookup", "sock_hash_update", "msg_redirect_hash",
    "sk_redirect_hash", "lwt_push_encap", "lwt_seg6_store_bytes", "lwt_seg6_adjust_srh",
    "lwt_seg6_action", "rc_repeat", "rc_keydown", "skb_cgroup_id", "get_current_cgroup_id",
    "get_local_storage", "sk_select_reuseport", "skb_ancestor_cgroup_id", "sk_lookup_tcp",
    "sk_lookup_udp", "sk_release", "map_push_elem", "map_pop_elem", "map_peek_elem",
    "msg_push_data", "msg_pop_data", "rc_pointer_rel", "spin_lock", "spin_unlock", "sk_fullsock",
    "tcp_sock", "skb_ecn_set_ce", "get_listener_sock", "skc_lookup_tcp", "tcp_check_syncookie",
    "sysctl_get_name", "sysctl_get_current_value", "sysctl_get_new_value", "sysctl_set_new_value",
    "strtol", "strtoul", "sk_storage_get", "sk_storage_delete", "send_signal", "tcp_gen_syncookie",
    "skb_output", "probe_read_user", "probe_read_kernel", "probe_read_user_str",
    "probe_read_kernel_str", "tcp_send_ack", "send_signal_thread", "jiffies64",
    "read_branch_records", "get_ns_current_pid_tgid", "xdp_output", "get_netns_cookie",
    "get_current_ancestor_cgroup_id", "sk_assign", "ktime_get_boot_ns", "seq_printf", "seq_write",
    "sk_cgroup_id", "sk_ancestor_cgroup_id", "ringbuf_output", "ringbuf_reserve", "ringbuf_submit",
    "ringbuf_discard", "ringbuf_query", "csum_level", "skc_to_tcp6_sock", "skc_to_tcp_sock",
    "skc_to_tcp_timewait_sock", "skc_to_tcp_request_sock", "skc_to_udp6_sock", "get_task_stack",
    "load_hdr_opt", "store_hdr_opt", "reserve_hdr_opt", "inode_storage_get",
    "inode_storage_delete", "d_path", "copy_from_user", "snprintf_btf", "seq_printf_btf",
    "skb_cgroup_classid", "redirect_neigh", "per_cpu_ptr", "this_cpu_ptr", "redirect_peer",
    "task_storage_get", "task_storage_delete", "get_current_task_btf", "bprm_opts_set",
    "ktime_get_coarse_ns", "ima_inode_hash", "sock_from_file", "check_mtu", "for_each_map_elem",
    "snprintf", "sys_bpf", "btf_find_by_name_kind", "sys_close", "timer_init",
    "timer_set_callback", "timer_start", "timer_cancel", "get_func_ip", "get_attach_cookie",
    "task_pt_regs", "get_branch_snapshot", "trace_vprintk", "skc_to_unix_sock",
    "kallsyms_lookup_name", "find_vma", "loop", "strncmp", "get_func_arg", "get_func_ret",
    "get_func_arg_cnt", "get_retval", "set_retval", "xdp_get_buff_len", "xdp_load_bytes",
    "xdp_store_bytes", "copy_from_user_task", "skb_set_tstamp", "ima_file_hash", "kptr_xchg",
    "map_lookup_percpu_elem", "skc_to_mptcp_sock", "dynptr_from_mem", "ringbuf_reserve_dynptr",
    "ringbuf_submit_dynptr", "ringbuf_discard_dynptr", "dynptr_read", "dynptr_write",
    "dynptr_data", "tcp_raw_gen_syncookie_ipv4", "tcp_raw_gen_syncookie_ipv6",
    "tcp_raw_check_syncookie_ipv4", "tcp_raw_check_syncookie_ipv6", "ktime_get_tai_ns",
    "user_ringbuf_drain", "cgrp_storage_get", "cgrp_storage_delete",
]  # fmt: skip
