"""Which processes hold each BPF program open (top's PIDS column, --serve's owner label): one
read() per refresh.

Walking /proc costs a readlink per open file of every process and three more
syscalls per BPF fd (open, read, close of /proc/PID/fdinfo/FD): ~20 ms a
refresh when one process holds 1000 programs. The kernel walks the same files
for a BPF iterator (bpf_iter task_file, Linux 5.8) in one read(): top loads
one small iterator program that, for every task's file whose anon-inode
dentry is named "bpf-prog" or "bpf_link", emits (tgid, program id, comm of
the thread-group leader), which is what /proc/PID/fdinfo's prog_id and
/proc/PID/comm say. The program is assembled here: the field offsets it reads
come from the running kernel's BTF (/sys/kernel/btf/vmlinux), so no compiler
or libbpf is needed at run time.

`open_holders()` returns that iterator, or, when it cannot be loaded (no
vmlinux BTF, a kernel layout it does not expect, top in a pid namespace of its
own, no permission), the /proc walk (live.stats.prog_holders) read on every
refresh, as before. Either way holders are read fresh at every refresh.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from bpfsym.formats import bpf as fb
from bpfsym.formats import btf as fbtf
from bpfsym.formats import integers, struct_of
from bpfsym.formats.errors import FormatError
from bpfsym.live import progs
from bpfsym.live.stats import prog_holders
from bpfsym.live.sys import Buffer, bpf

VMLINUX_BTF = "/sys/kernel/btf/vmlinux"
PROG_NAME = "bpfsym_holders"  # what bpftool and top's peers see while top runs

Holders = dict[int, list[tuple[int, str]]]  # program id -> [(pid, comm)]


class HolderSource(Protocol):
    """What top asks of a holder reader."""

    kind: str  # "iterator" or "proc"
    prog_id: int  # top's own program (the iterator), 0 when none: top leaves it out

    def read(self) -> Holders: ...

    def close(self) -> None: ...


# include/uapi/linux/bpf.h: enum bpf_cmd, bpf_prog_type, bpf_attach_type, helper ids
BPF_PROG_LOAD = 5
BPF_LINK_CREATE = 28
BPF_ITER_CREATE = 33
BPF_PROG_TYPE_TRACING = 26
BPF_TRACE_ITER = 28
FUNC_PROBE_READ_KERNEL = 113
FUNC_SEQ_WRITE = 127

# The layouts, declared in formats/bpf.py; packed positionally in their fields' order.
# union bpf_attr for BPF_PROG_LOAD up to attach_btf_obj_fd, 120 bytes: prog_type, insn_cnt,
# insns, license, log_level, log_size, log_buf, kern_version, prog_flags, prog_name[16],
# prog_ifindex, expected_attach_type, prog_btf_fd, func_info_rec_size, func_info,
# func_info_cnt, line_info_rec_size, line_info, line_info_cnt, attach_btf_id, attach_btf_obj_fd
_LOAD_ATTR = struct_of(fb.prog_load_btf_attr)[0]
# link_create: prog_fd, target_fd, attach_type, flags, iter_info, iter_info_len (+pad)
_LINK_ATTR = struct_of(fb.link_create_attr)[0]
_ITER_ATTR = struct_of(fb.iter_create_attr)[0]  # iter_create: link_fd, flags

# one record the program writes with bpf_seq_write: tgid, prog id, comm[16]
RECORD = struct_of(fb.holder_record)[0]


class LayoutError(Exception):
    """The running kernel's BTF lacks a type or member the iterator program reads."""


# --- vmlinux BTF: the few struct members the program reads -------------------------------

# little-endian only (KernelTypes refuses other BTF), from formats/btf.py's declarations
_TYPE_HEAD = struct_of(fbtf.btf_type_head(True))[0]  # name_off, info, size_type
_MEMBER = struct_of(fbtf.btf_member(True))[0]  # name_off, type, offset
_ARRAY = struct_of(fbtf.btf_array(True))[0]  # type, index_type, nelems
_PARAM = struct_of(fbtf.btf_param(True))[0]  # name_off, type

_MODIFIERS = {
    fbtf.KIND_TYPEDEF,
    fbtf.KIND_VOLATILE,
    fbtf.KIND_CONST,
    fbtf.KIND_RESTRICT,
    fbtf.KIND_TYPE_TAG,
}


# the named types the iterator program needs (anonymous ones are reached through these)
ITER_TYPES = (
    "file", "dentry", "bpf_prog", "bpf_prog_aux", "bpf_link", "task_struct", "bpf_iter_meta",
    "bpf_iter_task_file",
)  # fmt: skip


class KernelTypes:
    """Named structs and functions of a BTF blob, with member offsets resolved on demand.

    Walks the type section once for each record's position (~50 ms for vmlinux's ~127k
    types) and indexes the types called `names`; only the records asked about are
    decoded."""

    def __init__(
        self, blob: bytes, path: str = VMLINUX_BTF, names: Iterable[str] = ITER_TYPES
    ) -> None:
        lay = fbtf.parse_header(blob, path)
        if not lay.little:
            raise LayoutError("big-endian BTF")  # the program below is little-endian too
        self.blob = blob
        self.path = path
        self.strings = blob[lay.str_start : lay.str_end]
        self._pos = [0]  # type id -> offset of its record (id 0: void)
        self._by_name: dict[tuple[int, bytes], int] = {}
        want_off = {}
        for w in (n.encode() for n in names):
            at = self.strings.find(b"\0" + w + b"\0")
            if at >= 0:
                want_off[at + 1] = w
        unpack = _TYPE_HEAD.unpack_from
        pos, end = lay.type_start, lay.type_end
        positions = self._pos
        while pos < end:
            name_off, info, _ = unpack(blob, pos)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF  # fbtf.btf_info's bits
            size = fbtf.type_size(kind, vlen)
            if size is None or kind == fbtf.KIND_UNKN:
                raise FormatError(path, pos, f"BTF type {len(positions)}: unknown kind {kind}")
            positions.append(pos)
            if name_off in want_off:
                self._by_name.setdefault((kind, want_off[name_off]), len(positions) - 1)
            pos += size
        if pos != end:
            raise FormatError(path, pos, "BTF type section ends inside a type")

    def _head(self, tid: int) -> tuple[int, int, int, int, int]:
        """(name_off, kind, vlen, kind_flag, size_or_type) of type tid."""
        if not 0 < tid < len(self._pos):
            raise LayoutError(f"BTF type id {tid} out of range")
        name_off, info, st = _TYPE_HEAD.unpack_from(self.blob, self._pos[tid])
        return name_off, (info >> 24) & 0x1F, info & 0xFFFF, info >> 31, st

    def _name(self, off: int) -> bytes:
        end = self.strings.find(b"\0", off)
        return self.strings[off:end] if off < len(self.strings) and end >= 0 else b""

    def named(self, kind: int, name: str) -> int:
        tid = self._by_name.get((kind, name.encode()))
        if tid is None:
            raise LayoutError(f"no {fbtf.KIND_NAMES[kind]} {name} in the kernel's BTF")
        return tid

    def strip(self, tid: int) -> int:
        """tid without typedefs and qualifiers."""
        for _ in range(32):
            _, kind, _, _, st = self._head(tid)
            if kind not in _MODIFIERS:
                return tid
            tid = st
        raise LayoutError(f"BTF type {tid}: modifier loop")

    def members(self, tid: int) -> Iterable[tuple[bytes, int, int]]:
        """(name, type id, byte offset) of a struct's or union's members."""
        _, kind, vlen, kflag, _ = self._head(tid)
        if kind not in (fbtf.KIND_STRUCT, fbtf.KIND_UNION):
            raise LayoutError(f"BTF type {tid} is not a struct")
        at = self._pos[tid] + _TYPE_HEAD.size
        for i in range(vlen):
            name_off, mtype, bits = _MEMBER.unpack_from(self.blob, at + _MEMBER.size * i)
            if kflag:
                if bits >> 24:  # a bitfield: never a member the program reads
                    continue
                bits &= 0xFFFFFF
            if bits % 8 == 0:
                yield self._name(name_off), mtype, bits // 8

    def member(self, tid: int, name: str) -> tuple[int, int]:
        """(byte offset, type id) of member `name` of struct tid, looking into anonymous
        struct and union members as C does."""
        want = name.encode()
        for mname, mtype, off in self.members(self.strip(tid)):
            if mname == want:
                return off, mtype
            if not mname:
                inner = self.strip(mtype)
                if self._head(inner)[1] in (fbtf.KIND_STRUCT, fbtf.KIND_UNION):
                    try:
                        sub, stype = self.member(inner, name)
                    except LayoutError:
                        continue
                    return off + sub, stype
        raise LayoutError(f"no member {name} in BTF type {tid}")

    def offset(self, struct_name: str, dotted: str) -> tuple[int, int]:
        """Offset and type of struct_name.a.b (nested members, not through pointers)."""
        tid = self.named(fbtf.KIND_STRUCT, struct_name)
        total = 0
        for part in dotted.split("."):
            off, tid = self.member(tid, part)
            total += off
        return total, tid

    def size(self, tid: int) -> int:
        """Bytes of an int, pointer, enum, struct or array type."""
        tid = self.strip(tid)
        _, kind, _, _, st = self._head(tid)
        if kind == fbtf.KIND_PTR:
            return 8
        if kind == fbtf.KIND_ARRAY:
            elem, _, nelems = _ARRAY.unpack_from(self.blob, self._pos[tid] + _TYPE_HEAD.size)
            return self.size(elem) * nelems
        if kind in (fbtf.KIND_INT, fbtf.KIND_ENUM, fbtf.KIND_STRUCT, fbtf.KIND_UNION):
            return st
        raise LayoutError(f"BTF type {tid}: no size for kind {fbtf.KIND_NAMES[kind]}")

    def func_params(self, name: str) -> list[bytes]:
        """Parameter names of function `name` (its FUNC_PROTO)."""
        fid = self.named(fbtf.KIND_FUNC, name)
        proto = self._head(fid)[4]
        _, kind, vlen, _, _ = self._head(proto)
        if kind != fbtf.KIND_FUNC_PROTO:
            raise LayoutError(f"{name} has no prototype")
        at = self._pos[proto] + _TYPE_HEAD.size
        return [
            self._name(_PARAM.unpack_from(self.blob, at + _PARAM.size * i)[0]) for i in range(vlen)
        ]


@dataclass(frozen=True)
class Layout:
    """The offsets the iterator program reads, all in bytes."""

    attach_btf_id: int  # FUNC bpf_iter_task_file: what an iter/task_file program attaches to
    ctx_meta: int  # bpf_iter__task_file: one u64 slot per argument of bpf_iter_task_file
    ctx_task: int
    ctx_file: int
    meta_seq: int  # bpf_iter_meta.seq
    file_dentry: int  # file.f_path.dentry
    file_private: int  # file.private_data: struct bpf_prog * or struct bpf_link *
    dentry_name: int  # dentry.d_name.name
    link_prog: int  # bpf_link.prog
    prog_aux: int  # bpf_prog.aux
    aux_id: int  # bpf_prog_aux.id
    task_tgid: int
    task_leader: int  # task_struct.group_leader (/proc/PID/comm is the leader's)
    task_comm: int


def kernel_layout(types: KernelTypes) -> Layout:
    params = types.func_params("bpf_iter_task_file")
    try:
        meta, task, file = (params.index(n) for n in (b"meta", b"task", b"file"))
    except ValueError:
        raise LayoutError(f"bpf_iter_task_file takes {params}") from None

    def at(struct_name: str, dotted: str, size: int) -> int:
        off, tid = types.offset(struct_name, dotted)
        got = types.size(tid)
        if got != size:
            raise LayoutError(f"{struct_name}.{dotted} is {got} bytes, not {size}")
        return off

    return Layout(
        attach_btf_id=types.named(fbtf.KIND_FUNC, "bpf_iter_task_file"),
        ctx_meta=8 * meta,
        ctx_task=8 * task,
        ctx_file=8 * file,
        meta_seq=at("bpf_iter_meta", "seq", 8),
        file_dentry=at("file", "f_path.dentry", 8),
        file_private=at("file", "private_data", 8),
        dentry_name=at("dentry", "d_name.name", 8),
        link_prog=at("bpf_link", "prog", 8),
        prog_aux=at("bpf_prog", "aux", 8),
        aux_id=at("bpf_prog_aux", "id", 4),
        task_tgid=at("task_struct", "tgid", 4),
        task_leader=at("task_struct", "group_leader", 8),
        task_comm=at("task_struct", "comm", 16),
    )


# --- the program ---------------------------------------------------------------------------

_INSN = struct_of(fb.bpf_insn)[0]  # code, regs (src_reg << 4 | dst_reg), off, imm
_U64 = integers(True).u64
_S32X2 = integers(True).array("i", 2)  # a 64-bit immediate's low and high halves


class _Asm:
    """A few eBPF instructions (include/uapi/linux/bpf.h, Documentation/bpf/standardization)."""

    def __init__(self) -> None:
        self.insns: list[tuple[int, int, int, int, int]] = []  # code, dst, src, off, imm
        self.jumps: list[tuple[int, str]] = []
        self.labels: dict[str, int] = {}

    def emit(self, code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> None:
        self.insns.append((code, dst, src, off, imm))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.insns)

    def jump(self, code: int, dst: int, imm_or_src: int, target: str, reg: bool = False) -> None:
        self.jumps.append((len(self.insns), target))
        if reg:
            self.emit(code, dst, imm_or_src)
        else:
            self.emit(code, dst, 0, 0, imm_or_src)

    def ldx(self, size: int, dst: int, src: int, off: int) -> None:
        self.emit(0x61 if size == 4 else 0x71 if size == 1 else 0x79, dst, src, off)

    def stx(self, size: int, dst: int, off: int, src: int) -> None:
        self.emit(0x63 if size == 4 else 0x7B, dst, src, off)

    def mov(self, dst: int, src: int) -> None:
        self.emit(0xBF, dst, src)  # BPF_ALU64 | BPF_MOV | BPF_X

    def movi(self, dst: int, imm: int) -> None:
        self.emit(0xB7, dst, 0, 0, imm)

    def addi(self, dst: int, imm: int) -> None:
        self.emit(0x07, dst, 0, 0, imm)

    def ld64(self, dst: int, value: int) -> None:  # BPF_LD | BPF_DW | BPF_IMM: two slots
        lo, hi = _S32X2.unpack(_U64.pack(value))
        self.emit(0x18, dst, 0, 0, lo)
        self.emit(0, 0, 0, 0, hi)

    def call(self, helper: int) -> None:
        self.emit(0x85, 0, 0, 0, helper)

    def code(self) -> bytes:
        insns = list(self.insns)
        for at, target in self.jumps:
            code, dst, src, _, imm = insns[at]
            insns[at] = (code, dst, src, self.labels[target] - at - 1, imm)
        return b"".join(_INSN.pack(c, (s << 4) | d, o, i) for c, d, s, o, i in insns)


JEQ_K, JNE_K, JEQ_X, JNE_X = 0x15, 0x55, 0x1D, 0x5D
# the dentry names anon_inode_getfile() gives program and link files (readlink shows them
# as anon_inode:bpf-prog and anon_inode:bpf_link): kernel/bpf/syscall.c
NAME_PROG = int.from_bytes(b"bpf-prog", "little")
NAME_LINK = int.from_bytes(b"bpf_link", "little")


def program(lay: Layout) -> bytes:
    """The iterator program. r6 ctx, r7 file, r8 task, r9 the bpf_prog (or bpf_link).

    Kernel pointers read from typed (BTF) pointers are loaded directly; the two read
    through the untyped file->private_data and the dentry name use bpf_probe_read_kernel.
    Stack: fp-16 name bytes, fp-24 scratch, fp-48 the record."""
    a = _Asm()
    a.mov(6, 1)
    a.ldx(8, 7, 6, lay.ctx_file)
    a.jump(JEQ_K, 7, 0, "out")  # NULL file: the end of the iteration
    a.ldx(8, 8, 6, lay.ctx_task)
    a.jump(JEQ_K, 8, 0, "out")
    a.ldx(8, 1, 7, lay.file_dentry)
    a.jump(JEQ_K, 1, 0, "out")
    a.ldx(8, 3, 1, lay.dentry_name)  # const unsigned char *: a scalar to the verifier
    a.mov(1, 10)
    a.addi(1, -16)
    a.movi(2, 16)
    a.call(FUNC_PROBE_READ_KERNEL)
    a.jump(JNE_K, 0, 0, "out")
    a.ldx(8, 1, 10, -16)
    a.ldx(1, 2, 10, -8)
    a.jump(JNE_K, 2, 0, "out")  # 8 characters and the NUL, nothing longer
    a.ldx(8, 9, 7, lay.file_private)
    a.ld64(2, NAME_PROG)
    a.jump(JEQ_X, 1, 2, "prog", reg=True)
    a.ld64(2, NAME_LINK)
    a.jump(JNE_X, 1, 2, "out", reg=True)
    # a link: its program (NULL for a link whose program was detached)
    a.mov(1, 10)
    a.addi(1, -24)
    a.movi(2, 8)
    a.mov(3, 9)
    a.addi(3, lay.link_prog)
    a.call(FUNC_PROBE_READ_KERNEL)
    a.jump(JNE_K, 0, 0, "out")
    a.ldx(8, 9, 10, -24)
    a.label("prog")
    a.jump(JEQ_K, 9, 0, "out")
    a.mov(1, 10)
    a.addi(1, -24)
    a.movi(2, 8)
    a.mov(3, 9)
    a.addi(3, lay.prog_aux)
    a.call(FUNC_PROBE_READ_KERNEL)
    a.jump(JNE_K, 0, 0, "out")
    a.ldx(8, 3, 10, -24)
    a.jump(JEQ_K, 3, 0, "out")
    a.addi(3, lay.aux_id)
    a.mov(1, 10)
    a.addi(1, -24)
    a.movi(2, 4)
    a.call(FUNC_PROBE_READ_KERNEL)
    a.jump(JNE_K, 0, 0, "out")
    # the record: tgid, prog id, the leader's comm
    a.ldx(4, 1, 8, lay.task_tgid)
    a.stx(4, 10, -48, 1)
    a.ldx(4, 1, 10, -24)
    a.stx(4, 10, -44, 1)
    a.ldx(8, 1, 8, lay.task_leader)
    a.ldx(8, 2, 1, lay.task_comm)
    a.stx(8, 10, -40, 2)
    a.ldx(8, 2, 1, lay.task_comm + 8)
    a.stx(8, 10, -32, 2)
    a.ldx(8, 1, 6, lay.ctx_meta)
    a.ldx(8, 1, 1, lay.meta_seq)
    a.mov(2, 10)
    a.addi(2, -48)
    a.movi(3, RECORD.size)
    a.call(FUNC_SEQ_WRITE)
    a.label("out")
    a.movi(0, 0)
    a.emit(0x95)  # exit
    return a.code()


def _load(code: bytes, lay: Layout) -> int:
    insns, lic = Buffer(len(code)), Buffer(4)
    insns.write(code)
    lic.write(b"GPL\0")  # bpf_probe_read_kernel is GPL-only
    log = Buffer(1 << 16)
    attr = _LOAD_ATTR.pack(
        BPF_PROG_TYPE_TRACING, len(code) // 8, insns.addr, lic.addr, 0, 0, 0, 0, 0,
        PROG_NAME.encode(), 0, BPF_TRACE_ITER, 0, 0, 0, 0, 0, 0, 0, lay.attach_btf_id, 0,
    )  # fmt: skip
    try:
        return bpf(BPF_PROG_LOAD, attr)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EACCES):
            raise
    # again with the verifier's log, for the message
    attr = _LOAD_ATTR.pack(
        BPF_PROG_TYPE_TRACING, len(code) // 8, insns.addr, lic.addr, 1, log.size, log.addr, 0,
        0, PROG_NAME.encode(), 0, BPF_TRACE_ITER, 0, 0, 0, 0, 0, 0, 0, lay.attach_btf_id, 0,
    )  # fmt: skip
    try:
        return bpf(BPF_PROG_LOAD, attr)
    except OSError as e:
        text = log.read().split(b"\0", 1)[0].decode("ascii", "replace").strip()
        last = text.splitlines()[-3:] if text else []
        raise OSError(e.errno, f"{e.strerror}: {' | '.join(last)}") from None


class IterHolders:
    """The task_file iterator: holders of every program in one read per refresh."""

    kind = "iterator"

    def __init__(self, lay: Layout) -> None:
        self._last_raw = b"\0"  # never what the iterator writes: records are 24 bytes
        self._last: Holders = {}
        prog_fd = _load(program(lay), lay)
        try:
            self.prog_id = int(progs.basic_info(prog_fd).id)
            self.link_fd = bpf(
                BPF_LINK_CREATE, _LINK_ATTR.pack(prog_fd, 0, BPF_TRACE_ITER, 0, 0, 0)
            )
        finally:
            os.close(prog_fd)  # the link holds the program from here on

    def raw(self) -> bytes:
        """Everything one pass of the iterator wrote."""
        fd = bpf(BPF_ITER_CREATE, _ITER_ATTR.pack(self.link_fd, 0))
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 17):
                chunks.append(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks)

    def read(self) -> Holders:
        """Program id -> [(pid, comm)]. The same dict as last time when the kernel wrote the
        same bytes (holders seldom change): callers must not modify it."""
        data = self.raw()
        if data == self._last_raw:
            return self._last
        self._last_raw = data
        self._last = self._parse(data[: len(data) // RECORD.size * RECORD.size])
        return self._last

    @staticmethod
    def _parse(data: bytes) -> Holders:
        # one entry per process and program: several fds on one program, or threads with fd
        # tables of their own, give several records
        uniq = {(pid, prog_id): comm for pid, prog_id, comm in RECORD.iter_unpack(data)}
        out: Holders = {}
        names: dict[bytes, str] = {}
        for (pid, prog_id), comm in uniq.items():
            name = names.get(comm)
            if name is None:  # as /proc/PID/comm reads (top strips the newline and blanks)
                name = names[comm] = comm.split(b"\0", 1)[0].decode("utf-8", "replace").strip()
            held = out.get(prog_id)
            if held is None:
                out[prog_id] = [(pid, name)]
            else:
                held.append((pid, name))
        return out

    def close(self) -> None:
        if self.link_fd >= 0:
            os.close(self.link_fd)
            self.link_fd = -1


class ProcHolders:
    """The /proc walk (live.stats.prog_holders), where the iterator cannot run."""

    kind = "proc"
    prog_id = 0

    def __init__(self, why: str = "") -> None:
        self.why = why  # why the iterator is not used

    def read(self) -> Holders:
        return prog_holders()

    def close(self) -> None:
        pass


def open_holders(btf_path: str = VMLINUX_BTF) -> IterHolders | ProcHolders:
    """The iterator when it loads and reads this process back correctly, else the /proc walk."""
    try:
        with open(btf_path, "rb") as f:
            lay = kernel_layout(KernelTypes(f.read(), btf_path))
        it = IterHolders(lay)
    except (OSError, LayoutError, FormatError) as e:
        return ProcHolders(str(e))
    try:
        # Our link fd must show as ours: tgid is the kernel's global pid, which /proc names
        # only when top runs in the initial pid namespace.
        mine = it.read().get(it.prog_id, [])
    except OSError as e:
        it.close()
        return ProcHolders(str(e))
    if os.getpid() not in [p for p, _ in mine]:  # others may hold it too (bpfsym record's pinner)
        it.close()
        return ProcHolders(f"the iterator reports this process as {mine}, /proc as {os.getpid()}")
    return it
