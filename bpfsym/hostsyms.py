"""Facts about the running host that reports and captures check: its kernel symbols
(/proc/kallsyms up to the BPF part) and its boot id. Kept light: a report imports it."""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import subprocess
import sys

from . import _kread
from ._kread import kernel_kallsyms
from .model import KernelSymbol


def host_boot_id() -> str:
    """This machine's boot id ("" where unknown): tells whether its kallsyms still apply."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


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
        namesz, descsz, ntype = struct.unpack_from("=III", data, pos)
        name_at = pos + 12
        desc_at = name_at + (-(-namesz // 4) * 4)
        end = desc_at + (-(-descsz // 4) * 4)
        if end > len(data):
            break
        if ntype == 3 and data[name_at : name_at + namesz] == b"GNU\0":  # NT_GNU_BUILD_ID
            return data[desc_at : desc_at + descsz].hex()
        pos = end
    return ""


def symbol_address(text: str, name: str) -> int | None:
    """The address of the first kallsyms line naming `name` (a ref-reloc symbol: _text)."""
    at = text.find(f" {name}\n")
    while at >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        parts = text[line_start:at].split()
        if len(parts) == 2:  # "addr type" before the name: a whole field, not a suffix
            try:
                return int(parts[0], 16)
            except ValueError:
                return None
        at = text.find(f" {name}\n", at + 1)
    return None


def relocate_kallsyms(text: str, delta: int) -> str:
    """kallsyms text with every address moved down by delta: the host's (KASLR) layout
    put back into the one a perf.data recorded, as perf's kallsyms__delta does."""
    if not delta:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        addr, sep, rest = line.partition(" ")
        try:
            out.append(f"{(int(addr, 16) - delta) & (2**64 - 1):0{len(addr)}x}{sep}{rest}")
        except ValueError:
            out.append(line)
    return "".join(out)


def parse_kallsyms(text: str) -> list[KernelSymbol]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mod = parts[3].strip("[]") if len(parts) > 3 else ""
        out.append(KernelSymbol(int(parts[0], 16), parts[1], parts[2], mod))
    out.sort(key=lambda s: s.addr)
    return out


def read_host_kallsyms(path: str = "/proc/kallsyms") -> str:
    """The kernel part of a kallsyms file (up to the first [bpf] line: those come last)."""
    return kernel_kallsyms(path).decode("utf-8", "replace")


class HostKallsyms:
    """read_host_kallsyms() done beside: a child process (_kread.py) writes the text into
    an anonymous file while this one goes on; text() waits for it. inherit() gives a
    forked process the same text without the kernel making it twice."""

    def __init__(self, path: str = "/proc/kallsyms", notes: str = "/sys/kernel/notes") -> None:
        self.path = path
        self.notes = notes  # the ELF notes of the kernel whose kallsyms path holds
        self._text: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._file = os.memfd_create("bpfsym-kallsyms", os.MFD_CLOEXEC)
        self._done, done_w = os.pipe()  # end of file on _done: the reader has exited
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _kread.__file__, path],
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
        other.path, other._text, other._proc = self.path, self._text, None
        other.notes = self.notes
        other._file, other._done = self._file, self._done
        return other

    def build_id(self) -> str:
        """The build id of the kernel these kallsyms belong to ("" where unknown)."""
        return kernel_build_id(self.notes)

    def text(self) -> str:
        if self._text is None:
            self._text = self._get().decode("utf-8", "replace")
        return self._text

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


_early: HostKallsyms | None = None


def start_reading() -> None:
    """Start reading /proc/kallsyms now, for a report that is still importing its modules
    (take_reader() hands it over)."""
    global _early
    if _early is None:
        _early = HostKallsyms()


def take_reader() -> HostKallsyms | None:
    """The reader start_reading() started, if any (once)."""
    global _early
    got, _early = _early, None
    return got
