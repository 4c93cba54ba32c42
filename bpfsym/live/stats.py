"""Runtime statistics of BPF programs: the BPF_ENABLE_RUNTIME_STATS fd and the counters it feeds.

The kernel counts run_time_ns / run_cnt per program only while statistics are
on. bpf(BPF_ENABLE_STATS, {type=BPF_STATS_RUN_TIME}) (Linux 5.8) returns an fd
that keeps them on until it is closed; holders count, so several tools can
hold one at once. kernel.bpf_stats_enabled is never touched.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import time
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple

from bpfsym.errors import FormatError
from bpfsym.formats import bpf as fb
from bpfsym.formats import btf as fbtf
from bpfsym.live import progs
from bpfsym.live.sys import _NR_BPF, _syscall, bpf  # the raw call: top's per-program path
from bpfsym.model import ksym_name

SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
# bpf_obj_name: 16 bytes with the NUL (BPF_OBJ_NAME_LEN), so 15 characters may be a truncated name
OBJ_NAME_MAX = 15


class StatsUnavailable(Exception):
    """Statistics cannot be turned on; str() is one line saying what the user can do."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(message)
        self.errno = err


def enable_error(err: int) -> str:
    """The one-line explanation for BPF_ENABLE_STATS failing with errno err."""
    if err == errno.EINVAL:
        return (
            "this kernel has no BPF_ENABLE_STATS (Linux 5.8+ needed): upgrade the kernel, or "
            "have an administrator set kernel.bpf_stats_enabled=1 for the session"
        )
    if err == errno.EPERM:
        return "turning on BPF runtime statistics needs CAP_SYS_ADMIN (run as root)"
    return f"cannot turn on BPF runtime statistics: {os.strerror(err)}"


class RuntimeStats:
    """Holds a BPF_ENABLE_RUNTIME_STATS fd: statistics stay on from enter to exit."""

    def __init__(self) -> None:
        self.fd = -1

    def open(self) -> int:
        if self.fd < 0:
            attr = fb.enable_stats_attr.build({"type": fb.BPF_STATS_RUN_TIME})
            try:
                self.fd = bpf(fb.BPF_ENABLE_STATS, attr)
            except OSError as e:
                err = e.errno or 0
                raise StatsUnavailable(err, enable_error(err)) from None
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RuntimeStats:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def sysctl_enabled() -> str:
    """kernel.bpf_stats_enabled as the kernel prints it ("" when unreadable)."""
    try:
        with open(SYSCTL) as f:
            return f.read().strip()
    except OSError:
        return ""


class ProgStats(NamedTuple):
    """Counters of one program at one moment (the shape of model.StatsSample without time)."""

    prog_id: int
    run_time_ns: int
    run_cnt: int
    recursion_misses: int


class ProgSample(NamedTuple):
    """What top needs of one program, read at time_ns (CLOCK_BOOTTIME, like load_time).

    A named tuple: top builds one per program per refresh."""

    id: int
    type: int
    tag: str  # 16 hex digits
    name: str  # bpf_prog_info.name: up to 15 characters, may be empty
    ksym: str  # the main function's name exactly as /proc/kallsyms shows it
    load_time: int  # bpf_prog_info.load_time: ns since boot
    run_time_ns: int
    run_cnt: int
    recursion_misses: int
    time_ns: int
    # the name as bpftool shows it: `name`, or the main function's BTF name when `name` has
    # the 15 characters a truncated one would (get_prog_full_name, tools/bpf/bpftool/common.c)
    full_name: str = ""


@dataclass
class Snapshot:
    """All programs read in one pass; start_ns taken before the first was read."""

    start_ns: int
    progs: dict[int, ProgSample]


def boottime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def btf_func_name(fd: int) -> str | None:
    """The BTF name of the main function, which kallsyms prefers to the 15-character name."""
    got = progs.fetch_blobs(fd)
    fi, blob = got.blobs.get("func_info", b""), got.blobs.get("btf")
    if len(fi) < 8 or not blob:
        return None
    type_id = progs.u32s(fi[4:8])[0]  # bpf_func_info.type_id of func_info[0], the main function
    try:
        return fbtf.parse(blob).name(type_id) or None
    except FormatError:
        return None


def _info_struct(fields: list[str]) -> tuple[struct.Struct, int]:
    """A struct.Struct reading `fields` of bpf_prog_info (in declaration order) and skipping
    the rest, and the info_len that ends with the last of them. Offsets and formats come
    from the declaration in formats.bpf."""
    fmt, at, end = "=", 0, 0
    for sc in fb.prog_info().subcon.subcons:
        size = sc.sizeof()
        if sc.name in fields:
            fmt += f"{at - end}x" if at > end else ""
            fmt += f"{size}s" if sc.name in ("tag", "name") else {4: "I", 8: "Q"}[size]
            end = at + size
        at += size
    got = struct.Struct(fmt)
    assert got.size == end
    return got, end


# What a refresh reads of a program it knows, and of one it meets for the first time.
_COUNTERS, _ = _info_struct(["id", "load_time", "run_time_ns", "run_cnt", "recursion_misses"])
_STATIC, _ = _info_struct(["type", "tag", "name", "nr_func_info"])
# bpf_prog_info up to recursion_misses (216 of 232 bytes on 6.18): the kernel copies
# min(info_len, sizeof) bytes each way (bpf_prog_get_info_by_fd), and an older kernel with
# a shorter struct leaves the tail zero (recursion_misses: Linux 5.12)
INFO_LEN = max(_COUNTERS.size, _STATIC.size)
_ZEROS = bytes(INFO_LEN)


class Sampler:
    """Reads every program's counters; remembers what does not change across passes.

    Per program and pass: BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD with info_len
    limited to the fields read, close. Ids come from the previous pass, and
    BPF_PROG_GET_NEXT_ID is asked only for ids above the highest one it ever returned: the
    kernel allocates program ids upwards (idr_alloc_cyclic in bpf_prog_alloc_id), so a
    program loaded since is found there. Every `full_walk_every` passes all ids are walked
    again, which also finds programs with ids from after a wrap past INT_MAX. Type, tag,
    name and kallsyms name are decoded once per program (id and load_time)."""

    def __init__(self, full_walk_every: int = 16) -> None:
        self.full_walk_every = max(1, full_walk_every)
        self.skip: set[int] = set()  # ids never read (top's own iterator program)
        self._static: dict[int, tuple[int, int, str, str, str, str]] = {}  # id -> (load_time, ...)
        self._cursor = 0  # the highest id BPF_PROG_GET_NEXT_ID has returned
        self._passes = 0
        # the kernel reads and writes these: kept for the sampler's life
        self._id_attr = ctypes.create_string_buffer(progs.GET_ID_ATTR.size)
        self._info_attr = ctypes.create_string_buffer(progs.INFO_ATTR.size)
        self._info = ctypes.create_string_buffer(INFO_LEN)
        self._id_mv = memoryview(self._id_attr).cast("B")  # type: ignore[arg-type]
        self._info_attr_mv = memoryview(self._info_attr).cast("B")  # type: ignore[arg-type]
        self._info_mv = memoryview(self._info).cast("B")  # type: ignore[arg-type]
        self._info_addr = ctypes.addressof(self._info)

    def _next_ids(self, start: int) -> list[int]:
        """Ids above start, ascending."""
        out = []
        attr, mv = self._id_attr, self._id_mv
        pack, unpack = progs.GET_ID_ATTR.pack_into, progs.GET_ID_ATTR.unpack_from
        cur = start
        while True:
            pack(mv, 0, cur, 0, 0)
            if _syscall(_NR_BPF, fb.BPF_PROG_GET_NEXT_ID, attr, len(attr)) < 0:
                err = ctypes.get_errno()
                if err == errno.ENOENT:
                    break
                raise OSError(err, f"bpf(BPF_PROG_GET_NEXT_ID): {os.strerror(err)}")
            cur = unpack(mv)[1]
            out.append(cur)
        if out:
            self._cursor = max(self._cursor, out[-1])
        return out

    def _describe(self, fd: int, load_time: int) -> tuple[int, int, str, str, str, str]:
        """(load_time, type, tag, name, ksym, full_name) of the program whose info was just
        read."""
        ptype, tag_raw, name_raw, nr_func_info = _STATIC.unpack_from(self._info_mv)
        tag, name = bytes(tag_raw).hex(), fb.prog_name(name_raw)
        full = None
        # Kernel names with func_info come from BTF (bpf_get_prog_name): differ only when the
        # 15-character name was truncated or absent.
        if nr_func_info and (len(name) >= OBJ_NAME_MAX or not name):
            try:
                full = btf_func_name(fd)
            except OSError:
                full = None
        # bpftool takes the BTF name for a truncated name only, not for an absent one
        full_name = full if full and len(name) >= OBJ_NAME_MAX else name
        return load_time, ptype, tag, name, ksym_name(tag, full or name), full_name

    def _read(self, ids: list[int], out: dict[int, ProgSample]) -> None:
        # locals: this loop runs once per program per refresh
        id_attr, id_mv = self._id_attr, self._id_mv
        info_attr, info_mv = self._info_attr, self._info_attr_mv
        buf, info_addr, static, skip = self._info_mv, self._info_addr, self._static, self.skip
        pack_id, pack_info = progs.GET_ID_ATTR.pack_into, progs.INFO_ATTR.pack_into
        counters, close = _COUNTERS.unpack_from, os.close
        clock, boottime = time.clock_gettime_ns, time.CLOCK_BOOTTIME
        syscall, nr = _syscall, _NR_BPF
        get_fd, get_info = fb.BPF_PROG_GET_FD_BY_ID, fb.BPF_OBJ_GET_INFO_BY_FD
        id_len, info_len = len(id_attr), len(info_attr)
        new = tuple.__new__
        for prog_id in ids:
            if prog_id in skip:
                continue
            pack_id(id_mv, 0, prog_id, 0, 0)
            fd = syscall(nr, get_fd, id_attr, id_len)
            if fd < 0:
                err = ctypes.get_errno()
                if err == errno.ENOENT:
                    continue  # went away
                raise OSError(err, f"bpf(BPF_PROG_GET_FD_BY_ID): {os.strerror(err)}")
            try:
                # zeroed: the kernel reads the array lengths and pointers from the buffer
                buf[:] = _ZEROS
                pack_info(info_mv, 0, fd, INFO_LEN, info_addr)
                if syscall(nr, get_info, info_attr, info_len) < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"bpf(BPF_OBJ_GET_INFO_BY_FD): {os.strerror(err)}")
                now = clock(boottime)
                pid, load_time, run_time, run_cnt, misses = counters(buf)
                known = static.get(pid)
                if known is None or known[0] != load_time:
                    known = static[pid] = self._describe(fd, load_time)
            finally:
                close(fd)
            _, ptype, tag, name, ksym, full = known
            out[pid] = new(  # ProgSample(...) without the Python-level __new__
                ProgSample,
                (pid, ptype, tag, name, ksym, load_time, run_time, run_cnt, misses, now, full),
            )

    def read(self, prog_id: int) -> ProgSample | None:
        """One program, or None when it went away."""
        out: dict[int, ProgSample] = {}
        self._read([prog_id], out)
        return out.get(prog_id)

    def snapshot(self) -> Snapshot:
        start = boottime_ns()
        out: dict[int, ProgSample] = {}
        if self._passes % self.full_walk_every == 0:
            self._read(self._next_ids(0), out)
        else:
            self._read(sorted(self._static), out)
            self._read(self._next_ids(self._cursor), out)
        self._passes += 1
        for gone in [i for i in self._static if i not in out]:
            del self._static[gone]
        return Snapshot(start, out)


def sample_all() -> list[ProgStats]:
    """Counters of every program now, by id (ENOENT races skipped)."""
    out: list[ProgStats] = []
    for prog_id in progs.iter_ids():
        try:
            fd = progs.fd_by_id(prog_id)
        except OSError as e:
            if e.errno == errno.ENOENT:
                continue
            raise
        try:
            info = progs.basic_info(fd)
        finally:
            os.close(fd)
        out.append(
            ProgStats(
                int(info.id), int(info.run_time_ns), int(info.run_cnt), int(info.recursion_misses)
            )
        )
    return out


def fdinfo_prog_id(text: str) -> int | None:
    """The prog_id of a /proc/PID/fdinfo/FD text (bpf-prog and bpf_link fds), or None."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key == "prog_id":
            value = value.strip()
            return int(value) if value.isdigit() else None
    return None


# readlink of /proc/PID/fd/N for fds whose fdinfo names a program
_PROG_FD_TARGETS = ("anon_inode:bpf-prog", "anon_inode:bpf_link")
_STATS_FD_TARGET = "anon_inode:bpf-stats"


def _proc_fds(pid: str) -> list[tuple[str, str]]:
    base = f"/proc/{pid}/fd"
    out = []
    try:
        names = os.listdir(base)
    except OSError:
        return []
    for fd in names:
        try:
            out.append((fd, os.readlink(f"{base}/{fd}")))
        except OSError:
            continue
    return out


def _comm(pid: str) -> str:
    """/proc/PID/comm as text. It is the bytes the process chose (prctl PR_SET_NAME, or a write
    to the file), printed raw (comm_show, fs/proc/base.c): not always UTF-8, and the 15-byte
    cut may split a sequence. Decoded with replacement, as top.holders decodes the same
    task_struct.comm from its iterator."""
    try:
        fd = os.open(f"/proc/{pid}/comm", os.O_RDONLY)
    except OSError:
        return "?"
    try:
        return os.read(fd, 64).decode("utf-8", "replace").strip()
    except OSError:
        return "?"
    finally:
        os.close(fd)


def _fdinfo_prog_id_of(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return fdinfo_prog_id(os.read(fd, 4096).decode("ascii", "replace"))
    except OSError:
        return None
    finally:
        os.close(fd)


def prog_holders() -> dict[int, list[tuple[int, str]]]:
    """Program id -> [(pid, comm)] of the processes holding a program or link fd on it."""
    out: dict[int, list[tuple[int, str]]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        seen: set[int] = set()
        comm = ""
        for fd, target in _proc_fds(pid):
            if target not in _PROG_FD_TARGETS:
                continue
            prog_id = _fdinfo_prog_id_of(f"/proc/{pid}/fdinfo/{fd}")
            if prog_id is None or prog_id in seen:
                continue
            seen.add(prog_id)
            comm = comm or _comm(pid)
            out.setdefault(prog_id, []).append((int(pid), comm))
    return out


def stats_holders() -> list[int]:
    """Pids of the processes holding a BPF_ENABLE_RUNTIME_STATS fd."""
    return sorted(
        int(pid)
        for pid in os.listdir("/proc")
        if pid.isdigit() and any(t == _STATS_FD_TARGET for _, t in _proc_fds(pid))
    )
