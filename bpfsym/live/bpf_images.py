"""Which BPF image symbols exist now, as far as bpf() can tell: what the kallsyms split
reader (live/kallsyms_split.py) must find before it may stop reading.

The callers of bpf_image_ksym_add() in 6.18 are trampolines (one per attach target of
fentry/fexit/fmod_ret/lsm programs: tracing links), the xdp dispatcher (made at the
first XDP program registered with it, never freed) and struct_ops members
(kernel/bpf/bpf_struct_ops.c). Trampolines are named from their link's target ids; a
struct_ops map or link, an LSM cgroup shim or a tracing link of an attach type this
does not know has no name to look for: then the whole [bpf] part is read, as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from bpfsym.formats import bpf as fb
from bpfsym.formats import bpf_links as fl
from bpfsym.formats import fixed_head, struct_of
from bpfsym.live import progs
from bpfsym.live.sys import Buffer, bpf

_GET_ID = progs.GET_ID_ATTR
_INFO_ATTR = progs.INFO_ATTR
_LINK_HEAD = struct_of(fl.link_info_head)[0]  # type, id, prog_id
_LINK_TRACING = struct_of(fl.link_tracing)[0]  # attach_type, target_obj_id, target_btf_id
_LINK_CGROUP = struct_of(fl.link_cgroup)[0]  # cgroup_id, attach_type
_MAP_HEAD = struct_of(fl.map_info_head)[0]  # type, id
_PROG_HEAD = fixed_head(fb.prog_info().subcon, "tag")[0]  # bpf_prog_info: type, id
_XDP = fb.PROG_TYPES.index("xdp")


def _ids(cmd: int) -> Iterator[int]:
    cur = 0
    while True:
        attr = bytearray(_GET_ID.pack(cur, 0, 0))
        try:
            bpf(cmd, attr)
        except OSError:
            return  # ENOENT: the last one
        cur = _GET_ID.unpack(attr)[1]
        yield cur


def _info(get_fd_cmd: int, obj_id: int, size: int) -> bytes | None:
    """The first `size` bytes of an object's info, None when it is gone meanwhile."""
    try:
        fd = bpf(get_fd_cmd, _GET_ID.pack(obj_id, 0, 0))
    except OSError:
        return None
    try:
        buf = Buffer(size)
        bpf(fb.BPF_OBJ_GET_INFO_BY_FD, bytearray(_INFO_ATTR.pack(fd, size, buf.addr)))
        return buf.read()
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass
class Expected:
    """Image symbols that must be in /proc/kallsyms; each entry of `need` is satisfied by
    any of its names. `all_reasons`: why only a full read will do."""

    need: list[tuple[str, ...]] = field(default_factory=list)
    all_reasons: list[str] = field(default_factory=list)

    def answer(self) -> str:
        """The text kallsyms_split's reader takes (see its parse_answer)."""
        lines = ["need " + "|".join(alts) for alts in self.need]
        lines += ["all " + r.replace("\n", " ") for r in self.all_reasons]
        return "\n".join(lines)


def expected(check_xdp: bool) -> Expected:
    """What exists now. check_xdp: also require bpf_dispatcher_xdp when an XDP program
    exists (the caller saw no dispatcher among the lines it read)."""
    e = Expected()
    link_size = fl.LINK_INFO_SIZE
    union_at = _LINK_HEAD.size
    for link_id in _ids(fl.BPF_LINK_GET_NEXT_ID):
        info = _info(fl.BPF_LINK_GET_FD_BY_ID, link_id, link_size)
        if info is None:
            continue
        ltype = _LINK_HEAD.unpack_from(info)[0]
        if ltype == fl.BPF_LINK_TYPE_TRACING:
            attach, obj_id, btf_id = _LINK_TRACING.unpack_from(info, union_at)
            if attach in fl.TRAMPOLINE_ATTACH_TYPES:
                e.need.append(fl.trampoline_names(obj_id, btf_id))
            elif attach != 0:  # 0: freplace, a text poke without an image
                e.all_reasons.append(f"tracing link {link_id} of attach type {attach}")
        elif ltype == fl.BPF_LINK_TYPE_CGROUP:
            if _LINK_CGROUP.unpack_from(info, union_at)[1] == fl.BPF_LSM_CGROUP:
                e.all_reasons.append(f"LSM cgroup link {link_id} (shim trampoline)")
        elif ltype == fl.BPF_LINK_TYPE_STRUCT_OPS:
            e.all_reasons.append(f"struct_ops link {link_id}")
    for map_id in _ids(fl.BPF_MAP_GET_NEXT_ID):
        info = _info(fl.BPF_MAP_GET_FD_BY_ID, map_id, _MAP_HEAD.size)
        if info is not None and _MAP_HEAD.unpack_from(info)[0] == fl.BPF_MAP_TYPE_STRUCT_OPS:
            e.all_reasons.append(f"struct_ops map {map_id}")
    if check_xdp:
        for prog_id in _ids(fb.BPF_PROG_GET_NEXT_ID):
            info = _info(fb.BPF_PROG_GET_FD_BY_ID, prog_id, _PROG_HEAD.size)
            if info is not None and _PROG_HEAD.unpack_from(info)[0] == _XDP:
                e.need.append(("bpf_dispatcher_xdp",))
                break
    return e
