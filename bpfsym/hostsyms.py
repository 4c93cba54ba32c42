"""Facts about the running host that reports and captures check: its kernel symbols
(/proc/kallsyms up to the BPF part) and its boot id. Kept light: a report imports it."""

from __future__ import annotations

import contextlib
import functools
import os
import threading

from .model import KernelSymbol


def kernel_kallsyms(path: str = "/proc/kallsyms") -> bytes:
    """A kallsyms file up to its first BPF symbol. The [bpf] part comes last and reads in
    time quadratic in its size (1.46 s with 12k BPF symbols); BPF symbols come from
    bpf_prog_info and side-band records instead."""
    out = []
    tail = b""
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(1 << 20):
            chunk = tail + chunk
            cut = chunk.find(b"\t[bpf]")
            if cut >= 0:
                out.append(chunk[: chunk.rfind(b"\n", 0, cut) + 1])
                return b"".join(out)
            end = chunk.rfind(b"\n") + 1  # keep a partial line for the next chunk
            out.append(chunk[:end])
            tail = chunk[end:]
    out.append(tail)
    return b"".join(out)


def host_boot_id() -> str:
    """This machine's boot id ("" where unknown): tells whether its kallsyms still apply."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


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
    """read_host_kallsyms() on a thread while this one goes on: reading /proc/kallsyms is
    kernel time (about 50 ms for the kernel part), during which the GIL is free.

    With fd, the text comes instead from another HostKallsyms's forward(fd) (a pipe): a
    second reading process gets the same text without the kernel making it twice."""

    def __init__(self, path: str = "/proc/kallsyms", fd: int | None = None) -> None:
        self.path = path
        self._raw: bytes | None = None
        self._text: str | None = None
        self._error: OSError | None = None
        target = self._read if fd is None else functools.partial(self._receive, fd)
        self._thread = threading.Thread(target=target, daemon=True)
        self._thread.start()
        self._sender: threading.Thread | None = None

    def _read(self) -> None:
        try:
            self._raw = kernel_kallsyms(self.path)
        except OSError as e:
            self._error = e

    def _receive(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as f:
            got = f.read()
        if got[:1] == b"+":
            self._raw = got[1:]
        else:
            self._error = OSError(int(got[1:] or 0), os.strerror(int(got[1:] or 0)))

    def forward(self, fd: int) -> None:
        """Write the text, once read, to fd (then closed) for a HostKallsyms(fd=...)."""

        def send() -> None:
            self._thread.join()
            err = self._error.errno if self._error is not None else None
            with contextlib.suppress(OSError), os.fdopen(fd, "wb") as f:
                if self._raw is not None:
                    f.write(b"+")
                    f.write(self._raw)  # the receiver gone: EPIPE, nothing to do
                else:
                    f.write(b"-%d" % (err or 0))

        self._sender = threading.Thread(target=send, daemon=True)
        self._sender.start()

    def text(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._text is None:
            assert self._raw is not None
            self._text = self._raw.decode("utf-8", "replace")
        return self._text

    def close(self) -> None:
        self._thread.join()
        if self._sender is not None:
            self._sender.join()


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
