"""BPF links and maps, as far as `record` needs them: which BPF image symbols exist.

From include/uapi/linux/bpf.h (Linux 6.18): the heads of bpf_link_info and bpf_map_info
(the kernel fills min(info_len, its size) bytes), and the enum values that tell a
trampoline's link (its key: target object id << 32 | target BTF id,
bpf_trampoline_compute_key() in include/linux/bpf_verifier.h) or a struct_ops map.
"""

from __future__ import annotations

from construct import Int32ul, Int64ul, Padding, Struct

# enum bpf_cmd
BPF_MAP_GET_NEXT_ID = 12
BPF_MAP_GET_FD_BY_ID = 14
BPF_LINK_GET_FD_BY_ID = 30
BPF_LINK_GET_NEXT_ID = 31

# enum bpf_link_type
BPF_LINK_TYPE_TRACING = 2
BPF_LINK_TYPE_CGROUP = 3
BPF_LINK_TYPE_STRUCT_OPS = 9

# enum bpf_map_type
BPF_MAP_TYPE_STRUCT_OPS = 26

# enum bpf_attach_type: tracing links with a trampoline image (fentry, fexit, fmod_ret,
# lsm); 0 on a tracing link is freplace (BPF_PROG_TYPE_EXT: a text poke, no image)
BPF_TRACE_FENTRY, BPF_TRACE_FEXIT, BPF_MODIFY_RETURN, BPF_LSM_MAC = 24, 25, 26, 27
TRAMPOLINE_ATTACH_TYPES = frozenset(
    {BPF_TRACE_FENTRY, BPF_TRACE_FEXIT, BPF_MODIFY_RETURN, BPF_LSM_MAC}
)
BPF_LSM_CGROUP = 43  # a cgroup link of this attach type has a shim trampoline

# struct bpf_link_info: type, id, prog_id, then a union aligned to 8 (at offset 16)
link_info_head = Struct("type" / Int32ul, "id" / Int32ul, "prog_id" / Int32ul, Padding(4))
LINK_INFO_SIZE = 64  # the head and the largest union member bpfsym reads, with room
# the union's members bpfsym reads
link_tracing = Struct("attach_type" / Int32ul, "target_obj_id" / Int32ul, "target_btf_id" / Int32ul)
link_cgroup = Struct("cgroup_id" / Int64ul, "attach_type" / Int32ul)

# struct bpf_map_info, its first fields
map_info_head = Struct("type" / Int32ul, "id" / Int32ul)


TRAMPOLINE_KERNEL_TARGET = 0x80000000  # in the key of a kernel (BTF object) target


def trampoline_names(target_obj_id: int, target_btf_id: int) -> tuple[str, str]:
    """The kallsyms name a tracing link's trampoline has ("bpf_trampoline_%llu" of its key,
    kernel/bpf/trampoline.c): for a program target or for a kernel one, which set bit 31
    of the key (bpf_trampoline_compute_key); bpf_link_info cannot tell them apart, since
    bpf_trampoline_unpack_key() clears that bit."""
    key = (target_obj_id << 32) | target_btf_id
    return f"bpf_trampoline_{key}", f"bpf_trampoline_{key | TRAMPOLINE_KERNEL_TARGET}"
