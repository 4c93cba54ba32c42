"""The bpf() and perf_event_open() system calls, through ctypes.

The only module that calls into libc for them. Callers pass attr bytes built
from formats/ declarations; calls that write back into attr get a mutable
buffer (bytearray) and see the kernel's answer in it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

# __NR_bpf / __NR_perf_event_open per architecture (asm/unistd*.h)
_SYSCALLS = {
    "x86_64": (321, 298),
    "aarch64": (280, 241),
    "riscv64": (280, 241),
    "ppc64le": (361, 319),
    "s390x": (351, 331),
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_syscall = _libc.syscall
_NR_BPF, _NR_PERF_EVENT_OPEN = _SYSCALLS.get(platform.machine(), (321, 298))


class Buffer:
    """Memory the kernel writes into (info arrays, test-run output), kept alive by its owner."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._buf = ctypes.create_string_buffer(max(size, 1))

    @property
    def addr(self) -> int:
        return ctypes.addressof(self._buf)

    def read(self, size: int | None = None) -> bytes:
        return self._buf.raw[: self.size if size is None else min(size, self.size)]

    def write(self, data: bytes) -> None:
        ctypes.memmove(self._buf, data, min(len(data), self.size))


def bpf(cmd: int, attr: bytes | bytearray) -> int:
    """bpf(cmd, attr, size); for a bytearray the kernel's write-back lands in it."""
    size = len(attr)
    if isinstance(attr, bytes):
        # read-only attr: the kernel only reads it, pass the bytes object's memory
        ret = _syscall(_NR_BPF, cmd, attr, size)
    else:
        buf = ctypes.create_string_buffer(bytes(attr), size)
        ret = _syscall(_NR_BPF, cmd, buf, size)
        attr[:] = buf.raw[:size]
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf(cmd {cmd}): {os.strerror(err)}")
    return int(ret)


def perf_event_open(attr: bytes, pid: int, cpu: int, group_fd: int = -1, flags: int = 0) -> int:
    buf = ctypes.create_string_buffer(attr, len(attr))
    ret = _libc.syscall(
        _NR_PERF_EVENT_OPEN,
        buf,
        ctypes.c_int(pid),
        ctypes.c_int(cpu),
        ctypes.c_int(group_fd),
        ctypes.c_ulong(flags),
    )
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"perf_event_open(cpu {cpu}): {os.strerror(err)}")
    return int(ret)


PERF_FLAG_FD_CLOEXEC = 1 << 3

ENOENT = errno.ENOENT
