"""Facts about the running host: its boot id, kernel build id, sysctls, identity, the
kernel part of /proc/kallsyms (read by a process of its own; record's split read of it,
image lines included, is live/kallsyms_split.py), a process's children.

The only place outside the bpf()/perf_event_open wrappers that reads /proc and /sys.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import platform
import struct
import sys
import threading
from typing import TYPE_CHECKING

from bpfsym.formats import struct_of
from bpfsym.formats.elf import elf_layouts
from bpfsym.live import kernel_kallsyms as _reader
from bpfsym.live.kernel_kallsyms import kernel_kallsyms

if TYPE_CHECKING:
    import subprocess


def host_boot_id() -> str:
    """This machine's boot id ("" where unknown): tells whether its kallsyms still apply."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


@functools.cache
def _nhdr() -> struct.Struct:
    """Elf_Nhdr (namesz, descsz, type), made at the first use: a report given --kallsyms
    never reads the kernel's notes."""
    return struct_of(elf_layouts(True, sys.byteorder == "little").nhdr)[0]


def kernel_build_id(notes: str = "/sys/kernel/notes") -> str:
    """The running kernel's GNU build id (hex; "" where unknown), from its ELF notes: the
    one perf compares with a perf.data's [kernel.kallsyms] build id."""
    try:
        with open(notes, "rb") as f:
            data = f.read(1 << 16)
    except OSError:
        return ""
    pos = 0
    while pos + 12 <= len(data):  # Elf_Nhdr: namesz, descsz, type; name and desc 4-aligned
        namesz, descsz, ntype = _nhdr().unpack_from(data, pos)
        name_at = pos + 12
        desc_at = name_at + (-(-namesz // 4) * 4)
        end = desc_at + (-(-descsz // 4) * 4)
        if end > len(data):
            break
        if ntype == 3 and data[name_at : name_at + namesz] == b"GNU\0":  # NT_GNU_BUILD_ID
            return data[desc_at : desc_at + descsz].hex()
        pos = end
    return ""


class HostKallsyms:
    """kernel_kallsyms() done beside: a child process (live/kernel_kallsyms.py) writes the text into
    an anonymous file while this one goes on; raw() waits for it. inherit() gives a
    forked process the same text without the kernel making it twice."""

    def __init__(self, path: str = "/proc/kallsyms", notes: str = "/sys/kernel/notes") -> None:
        self.path = path
        self.notes = notes  # the ELF notes of the kernel whose kallsyms path holds
        self._raw: bytes | None = None
        import subprocess  # here: a report given --kallsyms starts no reader

        self._proc: subprocess.Popen[bytes] | None = None
        self._file = os.memfd_create("bpfsym-kallsyms", os.MFD_CLOEXEC)
        self._done, done_w = os.pipe()  # end of file on _done: the reader has exited
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _reader.__file__, path],
                stdin=subprocess.DEVNULL, stdout=self._file, stderr=subprocess.DEVNULL,
                pass_fds=(done_w,),
            )  # fmt: skip
        except OSError:
            self._proc = None  # no interpreter to start: text() reads it here
        finally:
            os.close(done_w)

    def inherit(self) -> HostKallsyms:
        """For a process forked from this one: the same reading, waited for there."""
        other = HostKallsyms.__new__(HostKallsyms)
        other.path, other._raw, other._proc = self.path, self._raw, None
        other.notes = self.notes
        other._file, other._done = self._file, self._done
        return other

    def build_id(self) -> str:
        """The build id of the kernel these kallsyms belong to ("" where unknown)."""
        return kernel_build_id(self.notes)

    def raw(self) -> bytes:
        """The text as read (the kallsyms reader decodes a line only when it needs it)."""
        if self._raw is None:
            self._raw = self._get()
        return self._raw

    def _get(self) -> bytes:
        os.read(self._done, 1)  # blocks (without the GIL) until the reader exits
        if self._proc is not None:
            self._proc.wait()
        size = os.fstat(self._file).st_size
        got = os.pread(self._file, size, 0) if size else b""
        if got.endswith(b"\0OK"):
            return got[:-3]
        cut = got.rfind(b"\0ERR")
        if cut >= 0 and got[cut + 4 :].isdigit():
            code = int(got[cut + 4 :])
            raise OSError(code, os.strerror(code), self.path)
        if not got and self._proc is None:
            return kernel_kallsyms(self.path)  # the reader never started
        raise OSError(errno.EIO, "the kallsyms reader process failed", self.path)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.wait()
        for fd in (self._file, self._done):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._file = self._done = -1


# sysctl -> (value that hides something, what it hides)
SYSCTLS = {
    "kernel.kptr_restrict": "kernel addresses in /proc/kallsyms read as 0 for non-root when >= 1, for all when 2",
    "kernel.perf_event_paranoid": "system-wide perf needs CAP_PERFMON when > 0",
    "net.core.bpf_jit_enable": "no JIT image (interpreter) when 0",
    "net.core.bpf_jit_harden": "JIT images with constant blinding when >= 1 (2: for root too)",
    "net.core.bpf_jit_kallsyms": "no bpf_prog_* kallsyms for non-root when 0",
}


def read_sysctls() -> dict[str, str]:
    out = {}
    for name in SYSCTLS:
        try:
            with open("/proc/sys/" + name.replace(".", "/")) as f:
                out[name] = f.read().strip()
        except OSError:
            out[name] = ""
    return out


def identity() -> dict[str, object]:
    import socket  # here: report imports this module and needs no socket (2 ms)

    u = platform.uname()
    return {
        "kernel_release": u.release,
        "arch": u.machine,
        "page_size": os.sysconf("SC_PAGE_SIZE"),
        "boot_id": host_boot_id(),
        "hostname": socket.gethostname(),
    }


def child_pids(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


CAP_SYS_NICE = 23  # include/uapi/linux/capability.h


def has_capability(cap: int) -> bool:
    """Whether this process holds `cap` in its effective set (/proc/self/status CapEff)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> cap & 1)
    except (OSError, ValueError):
        pass
    return False


class Backseat:
    """A thread that gives way to everything else (nice 19, Linux nice is per thread) while
    its backlog is small: record's fetch and compression can wait, since the pinner holds
    the references, and the loader being recorded should not (on a saturated 2-CPU host,
    1000 loads/s: 0.78x of plain perf's loads at nice 0, 0.96x at 19; docs/record-startup.md).
    Back to nice 0 when the backlog passes `high` (what it holds: fds, kernel memory,
    queued bytes) and once hurried (the stop path waits for it). Only where nice can be
    lowered again (CAP_SYS_NICE): otherwise it stays at 0; BPFSYM_NO_NICE=1 keeps it at 0
    (as BPFSYM_NO_RT=1 does the pinner's SCHED_FIFO: for comparisons)."""

    NICE = 19

    def __init__(self, high: int) -> None:
        self.high = high
        self.tid = 0
        self.niced = False
        self.hurried = False
        self.allowed = has_capability(CAP_SYS_NICE) and os.environ.get("BPFSYM_NO_NICE") != "1"
        self._lock = threading.Lock()

    def enter(self) -> None:
        """In the thread, first thing."""
        self.tid = threading.get_native_id()

    def check(self, backlog: int) -> None:
        """In the thread, per item: backlog is what is still queued."""
        if not self.allowed:
            return
        if self.niced and backlog > self.high:
            self._set(0)
        elif not self.niced and not self.hurried and backlog < self.high // 4:
            self._set(self.NICE)

    def hurry(self) -> None:
        """From any thread: nice 0 from now on."""
        self.hurried = True
        if self.niced:
            self._set(0)

    def _set(self, nice: int) -> None:
        with self._lock:
            if self.tid:
                try:
                    os.setpriority(os.PRIO_PROCESS, self.tid, nice)
                    self.niced = nice != 0
                except OSError:
                    self.allowed = False


def nofile_limit() -> int:
    """This process's soft RLIMIT_NOFILE (record raises it to the hard one first)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft
