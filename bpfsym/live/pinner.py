"""The pinner: a small process whose only job is to win the race against unloads.

One process per online CPU (forked from one launcher), bound to that CPU and
running SCHED_FIFO, blocks in poll() on the CPU's side-band ring. On a PROG_LOAD record the first and
only action is BPF_PROG_GET_FD_BY_ID: the fd keeps the program alive. The
records and fds then go to the recorder over a Unix stream socket
(SCM_RIGHTS); everything slow (info fetch, BTF, writing) happens there.

It runs in processes of its own because any busy Python thread beside a
listener holds the GIL long enough to lose short-lived programs.

    python -m bpfsym.live.pinner SOCKFD,SOCKFD,... [PAGES [CLOCKID]]

Without PAGES it waits, once its imports are done, for "PAGES CLOCKID\n" ("-": perf's
default clock) on the first socket: record starts it before its own imports
(live/prestart.py), when the ring size and clock are not known yet.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

from bpfsym.formats import pinner as fpin
from bpfsym.formats import struct_of
from bpfsym.live import progs, sideband
from bpfsym.live.prestart import StartedPinner, raise_nofile

_MSG = struct_of(fpin.message_header)[0]
_ENTRY = struct_of(fpin.entry_header)[0]

RT_PRIORITY = 10


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


def _listen(ring: sideband.Ring, sock: socket.socket, rt: bool) -> None:
    """One CPU's loop, alone in its process: pin on PROG_LOAD, forward, until told to stop."""
    sender = _Sender(sock)
    try:
        ring.map_ring()
    except OSError as e:
        sender.control(f"error: mmap of the cpu {ring.cpu} ring: {e.strerror}")
        return
    os.sched_setaffinity(0, {ring.cpu})
    if rt:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
        except OSError as e:
            sender.control(
                f"warn: cpu {ring.cpu}: SCHED_FIFO not allowed ({e.strerror}); "
                "short-lived programs may be missed"
            )
    sender.control("ready")
    poller = select.poll()
    poller.register(ring.fd, select.POLLIN)
    poller.register(sock.fileno(), select.POLLIN)  # any byte or EOF: stop
    stopping = False
    while True:
        # once stopping, drain without blocking: the ring may never wake us again
        events = poller.poll(0 if stopping else None)
        if not stopping and any(fd == sock.fileno() for fd, _ in events):
            stopping = True
            poller.unregister(sock.fileno())
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
            sender.control("done")
            return


def _read_config(sock: socket.socket) -> list[str] | None:
    """ "PAGES CLOCKID\n" from the recorder, or None at end of file (it gave up)."""
    got = b""
    while not got.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            return None
        got += chunk
    pages, clock = got.decode().split()
    return [pages] + ([] if clock == "-" else [clock])


def encode_config(pages: int, clockid: int | None) -> bytes:
    return f"{pages} {'-' if clockid is None else clockid}\n".encode()


def main(argv: list[str]) -> int:
    """argv: SOCKFD,SOCKFD,... (one per online CPU, in order) [PAGES [CLOCKID]]"""
    socks = [socket.socket(fileno=int(fd)) for fd in argv[0].split(",")]
    if len(argv) == 1:
        config = _read_config(socks[0])
        if config is None:
            return 0
        argv = [argv[0], *config]
    pages = int(argv[1])
    clockid = int(argv[2]) if len(argv) > 2 else None
    raise_nofile()
    try:
        rings = [sideband.Ring(cpu, pages, clockid, mapped=False) for cpu in sideband.online_cpus()]
    except OSError as e:
        _Sender(socks[0]).control(f"error: {e.strerror}")
        return 1
    if len(rings) != len(socks):
        _Sender(socks[0]).control(f"error: {len(rings)} CPUs online, {len(socks)} sockets")
        return 1
    rt = os.environ.get("BPFSYM_NO_RT") != "1"
    # One process per CPU, forked after the imports: threads would share one GIL, and a
    # CPU's listener waiting for it while another CPU's runs Python loses short-lived
    # programs (measured: ~1.5% at 1000 loads/s); a short switch interval instead starved
    # other processes behind the SCHED_FIFO waiters.
    children = []
    for ring, sock in zip(rings, socks, strict=True):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _listen(ring, sock, rt)
            except BaseException:  # noqa: BLE001 - a child must never return into main()
                code = 1
            os._exit(code)
        children.append(pid)
    for r in rings:
        r.close()
    for s in socks:
        s.close()
    status = 0
    for pid in children:
        status |= os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return status


class PinnerClient:
    """The recorder's side: starts the pinner (or takes one started early, which it
    configures) and hands each entry to a callback.

    on_record(cpu, record, fd) is called from a receiver thread per CPU, in that CPU's
    order; fd is the program reference for a PROG_LOAD record (or None). on_control(text)
    gets control lines ("ready", "warn: ...", "error: ...", "done").
    """

    def __init__(
        self,
        pages: int,
        clockid: int | None,
        on_record: Callable[[int, bytes, int | None], None],
        on_control: Callable[[str], None],
        started: StartedPinner | None = None,
    ) -> None:
        if started is None:
            started = StartedPinner([str(pages)] + ([] if clockid is None else [str(clockid)]))
        else:
            try:
                started.socks[0].sendall(encode_config(pages, clockid))
            except OSError:
                pass  # it died: the receivers see end of file, and ready is set
        self.proc = started.proc
        self.socks = started.socks
        self.on_record = on_record
        self.on_control = on_control
        self._lock = threading.Lock()
        self._waiting = len(self.socks)
        self.ready = threading.Event()
        self.threads = [
            threading.Thread(target=self._receive, args=(s,), daemon=True) for s in self.socks
        ]
        for t in self.threads:
            t.start()

    def _receive(self, sock: socket.socket) -> None:
        buf = bytearray()
        fds: list[int] = []
        try:
            while True:
                try:
                    # 64 KB: Python allocates the whole buffer on every call (13.9 µs a
                    # message with 1 MB, 3.0 µs with 64 KB); a message is a few records
                    data, got, _flags, _addr = socket.recv_fds(sock, 1 << 16, fpin.MAX_FDS)
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
            self.ready.set()  # a dead pinner must not leave the recorder waiting

    def _dispatch(self, body: bytes, fds: list[int]) -> None:
        off = 0
        while off < len(body):
            cpu, slot, length = _ENTRY.unpack_from(body, off)
            off += _ENTRY.size
            data = body[off : off + length]
            off += length
            if cpu == fpin.CONTROL:
                text = data.decode()
                if text.startswith("error"):
                    self.ready.set()
                elif text == "ready":
                    with self._lock:
                        self._waiting -= 1
                        if self._waiting == 0:
                            self.ready.set()
                self.on_control(text)
            else:
                self.on_record(cpu, data, fds[slot] if slot >= 0 else None)

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the pinner to drain its rings and exit; wait for everything it sent."""
        for s in self.socks:
            try:
                s.send(b"q")
            except OSError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for t in self.threads:
            t.join(timeout)
        for s in self.socks:
            s.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
