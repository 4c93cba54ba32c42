"""Runtime statistics of BPF programs: the BPF_ENABLE_RUNTIME_STATS fd and the counters it feeds.

The kernel counts run_time_ns / run_cnt per program only while statistics are
on. bpf(BPF_ENABLE_STATS, {type=BPF_STATS_RUN_TIME}) (Linux 5.8) returns an fd
that keeps them on until it is closed; holders count, so several tools can
hold one at once. kernel.bpf_stats_enabled is never touched.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NamedTuple

from bpfsym.errors import FormatError
from bpfsym.formats import bpf as fb
from bpfsym.formats import btf as fbtf
from bpfsym.live import progs
from bpfsym.live.sys import bpf
from bpfsym.model import ksym_name

SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
# bpf_obj_name: 16 bytes with the NUL, so 15 characters may be a truncated name
_OBJ_NAME_MAX = 15


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


@dataclass(frozen=True)
class ProgSample:
    """What top needs of one program, read at time_ns (CLOCK_BOOTTIME, like load_time)."""

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


@dataclass
class Snapshot:
    """All programs read in one pass; start_ns taken before the first was read."""

    start_ns: int
    progs: dict[int, ProgSample]


def boottime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def _btf_func_name(fd: int) -> str | None:
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


class Sampler:
    """Reads every program's counters; remembers each program's kallsyms name across passes."""

    def __init__(self) -> None:
        self._names: dict[tuple[int, int], str] = {}

    def _ksym(self, fd: int, info: Any, tag: str, name: str) -> str:
        key = (int(info.id), int(info.load_time))
        known = self._names.get(key)
        if known is not None:
            return known
        ksym = ksym_name(tag, name)
        # Kernel names with func_info come from BTF (bpf_get_prog_name): differ only when the
        # 15-character name was truncated or absent.
        if info.nr_func_info and (len(name) >= _OBJ_NAME_MAX or not name):
            try:
                full = _btf_func_name(fd)
            except OSError:
                full = None
            if full:
                ksym = ksym_name(tag, full)
        self._names[key] = ksym
        return ksym

    def read(self, prog_id: int) -> ProgSample | None:
        """One program, or None when it went away."""
        try:
            fd = progs.fd_by_id(prog_id)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return None
            raise
        try:
            info = progs.basic_info(fd)
            now = boottime_ns()
            tag = bytes(info.tag).hex()
            name = str(info.name)
            return ProgSample(
                id=int(info.id),
                type=int(info.type),
                tag=tag,
                name=name,
                ksym=self._ksym(fd, info, tag, name),
                load_time=int(info.load_time),
                run_time_ns=int(info.run_time_ns),
                run_cnt=int(info.run_cnt),
                recursion_misses=int(info.recursion_misses),
                time_ns=now,
            )
        finally:
            os.close(fd)

    def snapshot(self) -> Snapshot:
        start = boottime_ns()
        out: dict[int, ProgSample] = {}
        for prog_id in progs.iter_ids():
            s = self.read(prog_id)
            if s is not None:
                out[s.id] = s
        alive = {(s.id, s.load_time) for s in out.values()}
        for key in [k for k in self._names if k not in alive]:
            del self._names[key]
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
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


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
