"""The processes `bpfsym record` starts before its own imports: the pinner (its start and
imports take ~0.1 s until its rings are up) and the kallsyms split reader
(live/kallsyms_split.py). Standard library only, so that starting them costs nothing
that they could otherwise overlap with.

The pinner started here waits for its configuration (ring pages, clock), which is known
only once perf's options are checked: live.pinner.PinnerClient(started=...) sends it.
"""

from __future__ import annotations

import errno
import os
import resource
import socket
import subprocess
import sys

_LIVE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(_LIVE))


def online_cpus() -> list[int]:
    """CPUs listed in /sys/devices/system/cpu/online ("0-3,5")."""
    with open("/sys/devices/system/cpu/online") as f:
        text = f.read().strip()
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class StartedPinner:
    """`python -P -m bpfsym.live.pinner SOCKFD,...` started, one socket pair per online
    CPU; the pinner imports, then waits for its configuration on the first socket."""

    def __init__(self, extra_args: list[str] | None = None) -> None:
        raise_nofile()
        ncpu = len(online_cpus())
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(ncpu)]
        for pair in pairs:
            for s in pair:
                try:
                    s.setsockopt(socket.SOL_SOCKET, 32, 4 << 20)  # SO_SNDBUFFORCE
                    s.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE
                except OSError:
                    pass
        theirs = [p[1] for p in pairs]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [_PACKAGE_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        args = [",".join(str(s.fileno()) for s in theirs), *(extra_args or [])]
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "bpfsym.live.pinner", *args],
                pass_fds=[s.fileno() for s in theirs],
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own group: stop() ends the launcher's children too
            )
        finally:
            for s in theirs:
                s.close()
        self.socks = [p[0] for p in pairs]

    def cancel(self) -> None:
        """Not needed after all: end of file on its sockets, and it exits."""
        for s in self.socks:
            s.close()
        self.proc.wait()


class SplitKallsyms:
    """live/kallsyms_split.py in a process of its own (a thread of a busy Python process
    waits for the GIL after every 4 KB read), into an anonymous file. question() waits
    for its question (after PREFIX_LINES [bpf] lines: did it see the xdp dispatcher?),
    answer() tells it what it must find, result() waits for (kernel part, image lines,
    status). Where no process can be started, the same reading runs here, in result()."""

    def __init__(self, path: str = "/proc/kallsyms") -> None:
        self.path = path
        self._answer_text: str | None = None
        self._file = os.memfd_create("bpfsym-kallsyms", os.MFD_CLOEXEC)
        self._ask, ask_w = os.pipe()
        answer_r, self._answer = os.pipe()
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.join(_LIVE, "kallsyms_split.py"), path,
                 str(ask_w), str(answer_r)],
                stdin=subprocess.DEVNULL, stdout=self._file, pass_fds=(ask_w, answer_r),
            )  # fmt: skip
        except OSError:
            self._proc = None
        finally:
            os.close(ask_w)
            os.close(answer_r)

    def question(self) -> str | None:
        """ "d" (the dispatcher was seen), "x" (not), or None (no question: the reader read
        everything there was, or failed)."""
        if self._proc is None:
            return "x"  # result() reads here; it will need an answer
        got = os.read(self._ask, 2)  # blocks without the GIL
        return got[1:].decode() if got[:1] == b"?" else None

    def answer(self, text: str) -> None:
        if self._proc is None:
            self._answer_text = text
            return
        data = memoryview(text.encode() + b"\0")
        try:
            while data:
                data = data[os.write(self._answer, data) :]
        except BrokenPipeError:
            pass  # the reader is gone: result() says so

    def result(self) -> tuple[bytes, bytes, str]:
        if self._proc is None:
            from bpfsym.live import kallsyms_split

            return kallsyms_split.split(self.path, lambda _d: self._answer_text or "all")
        self._proc.wait()
        size = os.fstat(self._file).st_size
        got = os.pread(self._file, size, 0) if size else b""
        if got.endswith(b"\0OK"):
            kernel, images, status, _ok = got.split(b"\0", 3)
            return kernel, images, status.decode()
        cut = got.rfind(b"\0ERR")
        if cut >= 0 and got[cut + 4 :].isdigit():
            code = int(got[cut + 4 :])
            raise OSError(code, os.strerror(code), self.path)
        raise OSError(errno.EIO, "the kallsyms reader process failed", self.path)

    def close(self) -> None:
        """Stop waiting for it (an answer never sent ends it), free its file."""
        for fd in (self._answer, self._ask, self._file):
            try:
                os.close(fd)
            except OSError:
                pass
        self._answer = self._ask = self._file = -1
        if self._proc is not None:
            self._proc.wait()


class Prestart:
    """What run() starts first: the split reader, and the pinner unless told not to."""

    def __init__(self, pinner: bool = True) -> None:
        self.kallsyms = SplitKallsyms()
        self.pinner: StartedPinner | None = None
        if pinner:
            try:
                self.pinner = StartedPinner()
            except OSError:
                self.pinner = None  # PinnerClient starts one itself, and says why if it fails

    def take_pinner(self) -> StartedPinner | None:
        """The pinner, for PinnerClient to configure and stop (no longer ours to cancel)."""
        pinner, self.pinner = self.pinner, None
        return pinner

    def cancel(self) -> None:
        """End what was not taken (a usage error after the start, say)."""
        if self.pinner is not None:
            self.pinner.cancel()
            self.pinner = None
        self.kallsyms.close()
