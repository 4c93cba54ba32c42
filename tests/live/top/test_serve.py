"""bpfsym top --serve against the running kernel, scraped by a real Prometheus server.

An XDP program runs through BPF_PROG_TEST_RUN at a paced rate (test_top's driver, which logs
every run); Prometheus scrapes the endpoint every second and its query API must return the
program's counters rising at the driver's rate, labelled as bpftool and the C loader name the
program. The same server then faces slow, idle and malformed clients while it is scraped, and
must stop on SIGTERM with status 0; kernel.bpf_stats_enabled is read before and after, never
written. Owners are read with top's task_file iterator, and with the /proc walk it falls back
to (the server in a pid namespace of its own), including a comm that is not UTF-8.
"""

from __future__ import annotations

import contextlib
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit.livekit import DEMO, ENV, Held, children
from kit.promkit import PROMETHEUS_ACCEPT, Prometheus, promtool_check
from kit.topkit import (
    SYSCTL,
    bpftool_prog,
    driving,
    fixture_prog,
    load_unnamed_filter,
    prog_ids_of,
)
from prometheus_client.parser import text_string_to_metric_families

from bpfsym.live.stats import prog_holders
from bpfsym.top.holders import open_holders

# the endpoint as a command; `bpfsym top --serve` once the integrator wires it
SERVE = [sys.executable, "-P", "-m", "bpfsym", "top", "--serve"]


class Served:
    """The endpoint in a process of its own, ready once it printed the URL it serves.

    With pid_namespace, the server runs as pid 1 of a pid namespace of its own (unshare), where
    top's holders iterator reports pids that are not the server's: it reads holders from /proc
    (the host's, not remounted) instead. `pid` is the server's own pid either way."""

    def __init__(self, listen: str = "127.0.0.1:0", pid_namespace: bool = False) -> None:
        self.stderr = ""
        prefix = ["unshare", "--pid", "--fork", "--kill-child"] if pid_namespace else []
        self.proc = subprocess.Popen(
            [*prefix, *SERVE, listen], env=ENV, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
        )
        assert self.proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stderr, selectors.EVENT_READ)
        line = b""
        deadline = time.monotonic() + 60
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            if sel.select(timeout=0.5):
                chunk = os.read(self.proc.stderr.fileno(), 1)
                if not chunk:
                    break
                line += chunk
        sel.close()
        self.first_line = line.decode()
        if "serving http://" not in self.first_line:
            self.stop()
            raise RuntimeError(f"serve did not start: {self.first_line}{self.stderr}")
        self.url = self.first_line.split("serving ", 1)[1].strip()
        hostport = self.url.removeprefix("http://").removesuffix("/metrics")
        host, _, port = hostport.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.pid = self.proc.pid
        if pid_namespace:
            (self.pid,) = children(self.proc.pid)  # unshare's child: the server

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            # the server itself: unshare blocks SIGTERM and SIGINT while it waits for its child
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
        _, err = self.proc.communicate(timeout=60)
        self.stderr = err.decode(errors="replace")
        return self.proc.returncode

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()


def scrape(url: str, accept: str = "", timeout: float = 30.0) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def proc_status(pid: int, key: str) -> int:
    """A kB figure of /proc/PID/status (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def fd_targets(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return out


@contextlib.contextmanager
def sysctl_untouched() -> Iterator[None]:
    before = Path(SYSCTL).read_text()
    yield
    assert Path(SYSCTL).read_text() == before


def samples(prom: Prometheus, expr: str) -> list[tuple[float, float]]:
    """The raw samples Prometheus stored for one series, (scrape time, value)."""
    data = prom.api("query", query=expr)
    assert data["resultType"] == "matrix", data
    (series,) = data["result"]
    return [(float(t), float(v)) for t, v in series["values"]]


def test_prometheus_scrapes_rising_counters(tmp_path: Path) -> None:
    me = Path("/proc/self/comm").read_text().strip()
    with (
        sysctl_untouched(),
        fixture_prog() as (fd, prog_id),
        Held(DEMO) as held,
        driving(fd) as driver,
        Served() as srv,
        Prometheus(tmp_path, [f"127.0.0.1:{srv.port}"]) as prom,
    ):
        sel = f'{{id="{prog_id}"}}'
        assert prom.wait_for(f"bpfsym_prog_runs_total{sel}"), prom.targets()
        time.sleep(5)  # five scrapes more
        runs = samples(prom, f"bpfsym_prog_runs_total{sel}[30s]")
        run_time = samples(prom, f"bpfsym_prog_run_time_seconds_total{sel}[30s]")
        (series,) = prom.query(f"bpfsym_prog_run_time_seconds_total{sel}")
        held_ids = [str(p["prog_id"]) for p in held.progs]
        held_rows = {
            r["metric"]["id"]: r["metric"]
            for r in prom.query(f'bpfsym_prog_runs_total{{id=~"{"|".join(held_ids)}"}}')
        }
        (difference,) = prom.query("count(bpfsym_prog_runs_total) - sum(bpfsym_programs)")
        (target,) = prom.targets()
        status, headers, body = scrape(srv.url)
        paths = [scrape(srv.url.removesuffix("/metrics") + p)[0] for p in ("/", "/metrics/x")]
        info = bpftool_prog(prog_id)
        code = srv.stop()
    assert code == 0, srv.stderr
    # Prometheus parsed the OpenMetrics it asked for, every scrape
    assert target["health"] == "up" and target["lastError"] == "", target
    assert len(runs) >= 4 and len(run_time) >= 4
    assert all(b[1] > a[1] for a, b in zip(runs, runs[1:], strict=False)), runs
    assert all(b[1] > a[1] for a, b in zip(run_time, run_time[1:], strict=False)), run_time
    # the runs between the first and last scrape are the runs the driver made meanwhile
    (t0, v0), (t1, v1) = runs[0], runs[-1]
    driven = driver.runs_between(t0, t1)
    assert abs((v1 - v0) - driven) <= 0.1 * driven, (v1 - v0, driven)
    labels = series["metric"]
    # the name as bpftool shows it: the BTF name, not the 15 characters of bpf_prog_info.name
    assert labels["name"] == info["name"] == "xdp_top_fixture_sum"
    assert labels["type"] == info["type"] == "xdp" and labels["tag"] == info["tag"]
    assert labels["owner"] == me  # this process holds it by fd
    # another process's programs: named as the C loader (libbpf) says, owned by it
    assert sorted(held_rows) == sorted(held_ids)
    for p in held.progs:
        m = held_rows[str(p["prog_id"])]
        assert (m["name"], m["tag"], m["owner"]) == (p["name"], p["tag"], "loader")
        assert m["type"] == p["type_name"]
    # the gauge counts the programs of the same scrape
    assert float(difference["value"][1]) == 0
    # the text format, as promtool reads it
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    checked = promtool_check(body)
    assert checked.returncode == 0 and not checked.stdout and not checked.stderr, checked
    assert paths == [404, 404]


class Client(threading.Thread):
    """A misbehaving client: `kind` says how. `answer` is what the server sent before closing."""

    def __init__(self, host: str, port: int, kind: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.kind, self.stop = host, port, kind, stop
        self.answer = b""
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with socket.socket() as s:
                s.settimeout(60)
                if self.kind == "no-read":  # a small window: the server's writes block soon
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect((self.host, self.port))
                self._misbehave(s)
                with contextlib.suppress(OSError):
                    while chunk := s.recv(65536):
                        self.answer += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _misbehave(self, s: socket.socket) -> None:
        head = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: loris\r\n"
        if self.kind == "idle":
            self.stop.wait(60)  # connects, sends nothing
        elif self.kind == "loris":  # a byte a second, never the end of the head
            for b in head:
                s.sendall(bytes([b]))
                self.sent += 1
                if self.stop.wait(1.0) or select_readable(s):
                    return
        elif self.kind == "long-line":
            s.sendall(b"GET /" + b"a" * (4 << 20) + b" HTTP/1.1\r\n\r\n")
        elif self.kind == "long-headers":
            s.sendall(
                head + b"".join(b"X-Filler-%d: %s\r\n" % (i, b"b" * 1000) for i in range(4000))
            )
        elif self.kind == "garbage":
            s.sendall(random.Random(self.port).randbytes(1 << 20))
        elif self.kind == "no-read":  # asks for the metrics, never reads them
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
            self.stop.wait(60)


def select_readable(s: socket.socket) -> bool:
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ)
    try:
        return bool(sel.select(timeout=0))
    finally:
        sel.close()


def test_misbehaving_clients_stall_no_scrape_and_grow_no_memory() -> None:
    with sysctl_untouched(), Served() as srv:
        for accept in ("", PROMETHEUS_ACCEPT, "", PROMETHEUS_ACCEPT):  # warm up both encoders
            assert scrape(srv.url, accept)[0] == 200
            time.sleep(0.6)
        fds_before = len(fd_targets(srv.pid))
        rss_before, hwm_before = proc_status(srv.pid, "VmRSS"), proc_status(srv.pid, "VmHWM")
        stop = threading.Event()
        kinds = ["idle"] * 40 + ["loris"] * 6 + ["long-line"] * 6 + ["long-headers"] * 6
        kinds += ["garbage"] * 6 + ["no-read"] * 4
        clients = [Client(srv.host, srv.port, k, stop) for k in kinds]
        for c in clients:
            c.start()
        time.sleep(1.0)
        answered = []
        for i in range(6):
            t0 = time.monotonic()
            status, _, body = scrape(srv.url, PROMETHEUS_ACCEPT if i % 2 else "")
            answered.append((status, time.monotonic() - t0, b"bpfsym_programs" in body))
            time.sleep(0.5)
        rss_during = proc_status(srv.pid, "VmRSS")
        # the loris clients are cut at the server's 10 s head deadline, the rest when told
        for c in clients:
            if c.kind == "loris":
                c.join(60)
        stop.set()
        for c in clients:
            c.join(60)
        fds_after = settled_fd_count(srv.pid, fds_before)
        rss_after, hwm_after = proc_status(srv.pid, "VmRSS"), proc_status(srv.pid, "VmHWM")
        assert scrape(srv.url)[0] == 200
        code = srv.stop()
    assert code == 0, srv.stderr
    assert all(c.error is None for c in clients), [c.error for c in clients if c.error]
    # every scrape answered, and well within the 10 s the slow clients are given for a head
    assert all(ok == (200, True) for ok in [(s, b) for s, _, b in answered]), answered
    assert max(t for _, t, _ in answered) < 8.0, answered
    # refused as such, not served
    for c in clients:
        if c.kind in ("long-line", "long-headers", "garbage") and c.answer:
            assert c.answer.split(b" ", 2)[1] in (b"400", b"414", b"431"), c.answer[:200]
        if c.kind == "loris":
            assert c.answer.startswith(b"HTTP/1.1 408 ") and c.sent < 60, (c.sent, c.answer)
    # ~80 clients sent over 40 MB between them: the server kept none of it
    assert hwm_after - hwm_before < 32 * 1024, (hwm_before, hwm_after)
    assert rss_after - rss_before < 16 * 1024 and rss_during - rss_before < 32 * 1024
    assert fds_after == fds_before


def settled_fd_count(pid: int, want: int, timeout: float = 10.0) -> int:
    """The process's fd count once it is back to `want` (a closing connection's socket goes
    a moment after the client saw the answer), or what it is after timeout."""
    deadline = time.monotonic() + timeout
    while (n := len(fd_targets(pid))) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_it_with_status_0_and_one_stats_fd(sig: int) -> None:
    with sysctl_untouched(), Served() as srv:
        idle = len(fd_targets(srv.pid))
        held = []
        for _ in range(6):
            assert scrape(srv.url)[0] == 200
            held.append(
                (fd_targets(srv.pid).count("anon_inode:bpf-stats"), settled_fd_count(srv.pid, idle))
            )
            time.sleep(0.6)
        pid = srv.pid
        code = srv.stop(sig)
    # one BPF_ENABLE_RUNTIME_STATS fd the whole time, and no fd left over by a scrape
    assert held == [(1, idle)] * 6, (idle, held)
    assert code == 0
    assert srv.stderr == "", srv.stderr  # the serving line came first: nothing else said
    assert not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize(("listen", "table", "local"), [
    ("0", "tcp", "0100007F"),  # 127.0.0.1, /proc/net/tcp's little-endian hex
    ("[::1]:0", "tcp6", "00000000000000000000000001000000"),
])  # fmt: skip
def test_listens_on_loopback_unless_told(listen: str, table: str, local: str) -> None:
    with Served(listen) as srv:
        inodes = {
            t.removeprefix("socket:[").removesuffix("]")
            for t in fd_targets(srv.pid)
            if t.startswith("socket:[")
        }
        listening = []
        for name in ("tcp", "tcp6"):
            for line in Path(f"/proc/{srv.pid}/net/{name}").read_text().splitlines()[1:]:
                f = line.split()
                if f[9] in inodes and f[3] == "0A":  # TCP_LISTEN
                    listening.append((name, f[1]))
        assert scrape(srv.url)[0] == 200
        srv.stop()
    assert listening == [(table, f"{local}:{srv.port:04X}")]


def test_no_privilege_is_one_line() -> None:
    r = subprocess.run(
        ["setpriv", "--bounding-set", "-sys_admin,-bpf,-perfmon", *SERVE, "0"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "CAP_SYS_ADMIN" in lines[0], r.stderr


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([*SERVE, str(port)], env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0], r.stderr


# bytes a process may take as its name (prctl PR_SET_NAME) that are not UTF-8: a Latin-1 byte,
# and a UTF-8 sequence cut short, as the kernel's 15-byte cut of a longer name may leave one
NOT_UTF8 = b"\xffbpfsym \xe9\xc3"

HOLDER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(15, bytes.fromhex(sys.argv[1]), 0, 0, 0) != 0:  # PR_SET_NAME
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_NAME)")
print(flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def held_by_comm(comm: bytes) -> Iterator[tuple[int, int]]:
    """A program held open only by a child process named `comm`: (child pid, program id)."""
    fd = load_unnamed_filter()
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            prog_id = int(next(ln.split()[1] for ln in f if ln.startswith("prog_id:")))
        child = subprocess.Popen(
            [sys.executable, "-c", HOLDER, comm.hex()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=[fd],
        )
    finally:
        os.close(fd)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"\n"
        yield child.pid, prog_id
    finally:
        child.communicate(b"", timeout=30)


def owner_labels(body: bytes) -> dict[int, str]:
    """Program id -> the owner label of its runs series, as prometheus-client's parser reads
    the text format."""
    out = {}
    for family in text_string_to_metric_families(body.decode()):  # strict: the text is UTF-8
        for sample in family.samples:
            if sample.name == "bpfsym_prog_runs_total":
                out[int(sample.labels["id"])] = sample.labels.get("owner", "")
    return out


def test_owner_whose_comm_is_not_utf8() -> None:
    with held_by_comm(NOT_UTF8) as (pid, prog_id):
        raw = Path(f"/proc/{pid}/comm").read_bytes()
        assert raw == NOT_UTF8 + b"\n"  # the kernel prints the name as set
        with pytest.raises(UnicodeDecodeError):
            raw.decode()
        want = NOT_UTF8.decode("utf-8", errors="replace")
        # the /proc walk (top's fallback) reads it, and reads what the iterator reads
        assert prog_holders()[prog_id] == [(pid, want)]
        src = open_holders()
        try:
            assert src.kind == "iterator", getattr(src, "why", "")
            assert src.read()[prog_id] == [(pid, want)]
        finally:
            src.close()
        # the endpoint, with the iterator and in a pid namespace with the /proc walk
        iterators, owners = [], []
        for pid_namespace in (False, True):
            with Served(pid_namespace=pid_namespace) as srv:
                own = prog_ids_of(srv.pid, "anon_inode:bpf_link")  # its iterator's program
                status, _, body = scrape(srv.url)
                assert status == 200
                exported = owner_labels(body)
                iterators.append(len(own))
                owners.append(exported[prog_id])
                assert not own & exported.keys()  # the server's own program is not exported
                assert srv.stop() == 0, srv.stderr
    assert iterators == [1, 0]  # the iterator's link, then none: the /proc walk
    assert owners == [want, want]
