"""The pinner: a small process whose only job is to win the race against unloads.

One thread per online CPU, bound to that CPU and running SCHED_FIFO, blocks
in poll() on the CPU's side-band ring. On a PROG_LOAD record the first and
only action is BPF_PROG_GET_FD_BY_ID: the fd keeps the program alive. The
records and fds then go to the recorder over a Unix stream socket
(SCM_RIGHTS); everything slow (info fetch, BTF, writing) happens there.

It runs in its own process because any busy Python thread beside it holds
the GIL long enough to lose short-lived programs.

    python -m bpfsym.live.pinner SOCKFD PAGES [CLOCKID]
"""

from __future__ import annotations

import os
import resource
import select
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable

from bpfsym.formats import pinner as fpin
from bpfsym.live import progs, sideband

_MSG = struct.Struct("<II")
_ENTRY = struct.Struct("<HhI")
assert _MSG.size == fpin.message_header.sizeof() and _ENTRY.size == fpin.entry_header.sizeof()

RT_PRIORITY = 10


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def encode(entries: list[tuple[int, int, bytes]]) -> bytes:
    """entries: (cpu, fd_slot, payload) -> one message (header + entries)."""
    body = b"".join(_ENTRY.pack(cpu, slot, len(data)) + data for cpu, slot, data in entries)
    nfds = sum(1 for _, slot, _ in entries if slot >= 0)
    return _MSG.pack(len(body), nfds) + body


class _Sender:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()

    def send(self, entries: list[tuple[int, int, bytes]], fds: list[int]) -> None:
        msg = encode(entries)
        with self.lock:
            if fds:
                socket.send_fds(self.sock, [msg[:1]], fds)
                self.sock.sendall(msg[1:])
            else:
                self.sock.sendall(msg)
        for fd in fds:
            os.close(fd)

    def control(self, text: str) -> None:
        self.send([(fpin.CONTROL, -1, text.encode())], [])


def _listen(ring: sideband.Ring, stop_fd: int, sender: _Sender, rt: bool) -> None:
    os.sched_setaffinity(0, {ring.cpu})
    if rt:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
        except OSError as e:
            sender.control(
                f"warn: cpu {ring.cpu}: SCHED_FIFO not allowed ({e.strerror}); "
                "short-lived programs may be missed"
            )
    poller = select.poll()
    poller.register(ring.fd, select.POLLIN)
    poller.register(stop_fd, select.POLLIN)
    stopping = False
    while True:
        events = poller.poll()
        stopping = stopping or any(fd == stop_fd for fd, _ in events)
        recs = ring.read()
        entries: list[tuple[int, int, bytes]] = []
        fds: list[int] = []
        for rec in recs:
            slot = -1
            prog_id = sideband.load_event_id(rec)
            if prog_id is not None:
                try:
                    fds.append(progs.fd_by_id(prog_id))  # the hot path: nothing before this
                    slot = len(fds) - 1
                except OSError:
                    pass  # already gone: the recorder records it as such
            entries.append((ring.cpu, slot, rec))
            if len(fds) >= fpin.MAX_FDS:
                sender.send(entries, fds)
                entries, fds = [], []
        if entries:
            sender.send(entries, fds)
        if stopping and not recs:
            return


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    pages = int(argv[1])
    clockid = int(argv[2]) if len(argv) > 2 else None
    raise_nofile()
    # a thread woken on one CPU must not wait for the GIL while another CPU's
    # thread runs Python: hand it over after 10 µs instead of the default 5 ms
    sys.setswitchinterval(1e-5)
    sender = _Sender(sock)
    try:
        rings = [sideband.Ring(cpu, pages, clockid) for cpu in sideband.online_cpus()]
    except OSError as e:
        sender.control(f"error: {e.strerror}")
        return 1
    stop_r, stop_w = os.pipe()
    rt = os.environ.get("BPFSYM_NO_RT") != "1"
    threads = [
        threading.Thread(target=_listen, args=(r, stop_r, sender, rt), daemon=True) for r in rings
    ]
    for t in threads:
        t.start()
    sender.control("ready")
    # wait for the recorder to say stop (any byte) or to go away
    while True:
        try:
            data = sock.recv(16)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        break
    os.write(stop_w, b"x")
    for t in threads:
        t.join()
    if data:
        sender.control("done")
    return 0


class PinnerClient:
    """The recorder's side: starts the pinner and hands each entry to a callback.

    on_record(cpu, record, fd) is called from a receiver thread, in order;
    fd is the program reference for a PROG_LOAD record (or None). on_control(text)
    gets control lines ("ready", "warn: ...", "error: ...", "done").
    """

    def __init__(
        self,
        pages: int,
        clockid: int | None,
        on_record: Callable[[int, bytes, int | None], None],
        on_control: Callable[[str], None],
    ) -> None:
        raise_nofile()
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for s in (self.sock, theirs):
            try:
                s.setsockopt(socket.SOL_SOCKET, 32, 8 << 20)  # SO_SNDBUFFORCE
                s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
            except OSError:
                pass
        args = [str(theirs.fileno()), str(pages)] + ([str(clockid)] if clockid is not None else [])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
            + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "bpfsym.live.pinner", *args],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.on_record = on_record
        self.on_control = on_control
        self.ready = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self) -> None:
        buf = bytearray()
        fds: list[int] = []
        try:
            while True:
                try:
                    data, got, _flags, _addr = socket.recv_fds(self.sock, 1 << 20, fpin.MAX_FDS)
                except OSError:
                    break  # the pinner died (reset): what arrived is kept
                if not data:
                    break
                buf += data
                fds.extend(got)
                while len(buf) >= _MSG.size:
                    length, nfds = _MSG.unpack_from(buf)
                    if len(buf) < _MSG.size + length or len(fds) < nfds:
                        break
                    mine, fds = fds[:nfds], fds[nfds:]
                    self._dispatch(bytes(buf[_MSG.size : _MSG.size + length]), mine)
                    del buf[: _MSG.size + length]
        finally:
            self.ready.set()
            self.done.set()

    def _dispatch(self, body: bytes, fds: list[int]) -> None:
        off = 0
        while off < len(body):
            cpu, slot, length = _ENTRY.unpack_from(body, off)
            off += _ENTRY.size
            data = body[off : off + length]
            off += length
            if cpu == fpin.CONTROL:
                text = data.decode()
                if text == "ready" or text.startswith("error"):
                    self.ready.set()
                self.on_control(text)
            else:
                self.on_record(cpu, data, fds[slot] if slot >= 0 else None)

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the pinner to drain its rings and exit; wait for everything it sent."""
        try:
            self.sock.send(b"q")
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.thread.join(timeout)
        self.sock.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
