"""bpfsym top --serve without BPF: the address argument, the exposition of given programs as
promtool and a real Prometheus server read it, the HTTP bounds against misbehaving clients,
shared collections and the owner label's policy. The live test (tests/live/top/test_serve.py)
serves the running kernel's programs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from kit.promkit import (
    PROMETHEUS_ACCEPT,
    Prometheus,
    http,
    promtool_check,
    split_response,
    status_of,
)
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

import bpfsym
from bpfsym.top.serve import (
    Limits,
    MetricsServer,
    Owners,
    ProgRow,
    families,
    parse_listen,
    registry_for,
)

ENV_PATH = str(Path(bpfsym.__file__).resolve().parents[1])

# ---- the address ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("9101", ("127.0.0.1", 9101)),
        ("0", ("127.0.0.1", 0)),
        ("65535", ("127.0.0.1", 65535)),
        ("0.0.0.0:9101", ("0.0.0.0", 9101)),
        ("10.1.2.3:80", ("10.1.2.3", 80)),
        ("localhost:9101", ("127.0.0.1", 9101)),
        ("[::1]:9101", ("::1", 9101)),
        ("[::]:9101", ("::", 9101)),
        ("[fe80::1%eth0]:9101", ("fe80::1%eth0", 9101)),
    ],
)
def test_listen_address(text: str, want: tuple[str, int]) -> None:
    assert parse_listen(text) == want


@pytest.mark.parametrize(
    "text",
    [
        "", "x", "65536", "-1", "+80", " 9101", "9101 ", "٩١٠١", "1.2.3:80", "1.2.3.4.5:80",
        "01.2.3.4:80", "::1:9101", "::1", "[::1]", "[::1]9101", "[::1]:", "[1.2.3.4]:80",
        "[::1:9101", ":9101", "host.example:80", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:99999",
    ],
)  # fmt: skip
def test_bad_listen_address(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_listen(text)


def test_bad_address_on_the_command_line_is_one_error_and_exit_2() -> None:
    r = subprocess.run(
        [sys.executable, "-P", "-m", "bpfsym", "top", "--serve", "::1:9101"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": ENV_PATH, "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 2
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "brackets" in errors[0], r.stderr
    assert "Traceback" not in r.stderr


# ---- exposition -----------------------------------------------------------------------------

ROWS = [
    ProgRow(14652, "xdp_top_fixture", "xdp", "35e9c3c4911be0ad", "python3", 3_053_896, 10_951, 0),
    ProgRow(14646, "", "socket_filter", "59f4a931744dcdc6", "", 0, 0, 0),
    # a comm is 15 bytes its process chose: quotes, backslashes, newlines, UTF-8, and owners
    # are joined by commas
    ProgRow(7, "tp_sys_enter", "tracepoint", "0123456789abcdef", 'a"b\\c\nd,ñ\u00e9', 1, 2**53, 3),
    ProgRow(8, "x.y", "type99", "ffffffffffffffff", "loader", 10**15, 123456789, 2**40),
]


class Rows(Collector):
    """A collector of fixed programs, counting its collections; optionally slow or failing."""

    def __init__(self, rows: list[ProgRow], delay: float = 0.0, fail: int = 0) -> None:
        self.rows, self.delay, self.fail = rows, delay, fail
        self.calls = 0
        self.lock = threading.Lock()

    def collect(self) -> Iterable[Metric]:
        with self.lock:
            self.calls += 1
            failing = self.fail > 0
            self.fail -= 1
        time.sleep(self.delay)
        if failing:
            raise OSError(5, "Input/output error")
        return families(self.rows)


@contextlib.contextmanager
def running(
    collector: Collector, limits: Limits | None = None, host: str = "127.0.0.1"
) -> Iterator[tuple[MetricsServer, str, int]]:
    """A MetricsServer in a thread of its own on a free port of host."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = MetricsServer(registry_for(collector), limits or Limits())
    try:
        bound, port = asyncio.run_coroutine_threadsafe(server.start(host, 0), loop).result(30)
        yield server, bound, port
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def get(
    host: str,
    port: int,
    path: str = "/metrics",
    headers: dict[str, str] | None = None,
    method: str = "GET",
) -> tuple[int, dict[str, str], bytes]:
    hdrs = {"Host": f"{host}:{port}", "Connection": "close", **(headers or {})}
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    return split_response(http(host, port, (head + "\r\n").encode()))


def test_text_exposition_is_clean_for_promtool() -> None:
    with running(Rows(ROWS)) as (_, host, port):
        status, headers, body = get(host, port)
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    checked = promtool_check(body)
    assert checked.returncode == 0 and not checked.stdout and not checked.stderr, checked
    assert body.count(b"\nbpfsym_prog_runs_total{") == len(ROWS)


def test_prometheus_reads_every_row_exactly(tmp_path: Path) -> None:
    """A real Prometheus scrapes the rows (OpenMetrics, as it asks) and its API returns the
    labels and values given, in seconds for the run time."""
    with running(Rows(ROWS)) as (_, host, port), Prometheus(tmp_path, [f"{host}:{port}"]) as prom:
        got = prom.wait_for("count(bpfsym_prog_runs_total) == 4 and on() count(up == 1) == 1")
        assert got, prom.targets()
        (target,) = prom.targets()
        assert target["health"] == "up" and target["lastError"] == "", target
        series = {
            name: {r["metric"]["id"]: r for r in prom.query(name)}
            for name in (
                "bpfsym_prog_run_time_seconds_total",
                "bpfsym_prog_runs_total",
                "bpfsym_prog_recursion_misses_total",
            )
        }
        (count,) = prom.query("bpfsym_programs")
        # what Prometheus was sent, the way it asks for it
        status, headers, body = get(host, port, headers={"Accept": PROMETHEUS_ACCEPT})
    assert float(count["value"][1]) == len(ROWS)
    for row in ROWS:
        for name, value in (
            ("bpfsym_prog_run_time_seconds_total", row.run_time_ns / 1e9),
            ("bpfsym_prog_runs_total", row.run_cnt),
            ("bpfsym_prog_recursion_misses_total", row.recursion_misses),
        ):
            r = series[name][str(row.id)]
            labels = {k: v for k, v in r["metric"].items() if k not in ("job", "instance")}
            want = {"__name__": name, "id": str(row.id), "name": row.name, "type": row.type}
            want |= {"tag": row.tag, "owner": row.owner}
            assert labels == {k: v for k, v in want.items() if v != ""}  # "" = no label
            assert float(r["value"][1]) == value
    assert status == 200
    assert headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith(b"# EOF\n")


# ---- HTTP -----------------------------------------------------------------------------------


def test_only_metrics_is_served() -> None:
    with running(Rows(ROWS)) as (_, host, port):
        for path in ("/", "/metrics/", "/metricsx", "/favicon.ico", "/metrics/../metrics", "*"):
            status, _, body = get(host, port, path)
            assert status == 404, path
            assert b"bpfsym_" not in body
        assert get(host, port, "/metrics?debug=1")[0] == 200
        for method in ("POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH", "CONNECT"):
            status, headers, _ = get(host, port, method=method)
            assert status == 405 and headers["allow"] == "GET, HEAD", method
        status, headers, body = get(host, port, method="HEAD")
        assert status == 200 and body == b"" and int(headers["content-length"]) > 1000


def test_content_negotiation_and_gzip() -> None:
    with running(Rows(ROWS)) as (_, host, port):
        _, plain_h, plain = get(host, port)
        _, gz_h, gz = get(host, port, headers={"Accept-Encoding": "gzip"})
        _, om_h, om = get(host, port, headers={"Accept": PROMETHEUS_ACCEPT})
        # prometheus-client cannot compare this version: the plain text format, not a 500
        bad = get(host, port, headers={"Accept": "application/openmetrics-text;version=x"})
    assert gz_h["content-encoding"] == "gzip" and "content-encoding" not in plain_h
    # process_* figures of the server itself change between scrapes: compare the programs
    progs = [ln for ln in plain.splitlines() if ln.startswith(b"bpfsym_")]
    assert [ln for ln in gzip.decompress(gz).splitlines() if ln.startswith(b"bpfsym_")] == progs
    assert om_h["content-type"].startswith("application/openmetrics-text")
    assert b"# UNIT bpfsym_prog_run_time_seconds seconds" in om
    assert bad[0] == 200 and bad[1]["content-type"] == plain_h["content-type"]


def test_keep_alive_and_http_1_0() -> None:
    with running(Rows(ROWS)) as (_, host, port):
        two = (
            f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n"
            f"GET /nothing HTTP/1.1\r\nHost: {host}\r\n\r\n"
            f"HEAD /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ).encode()
        out = http(host, port, two)
        one_zero = http(host, port, b"GET /metrics HTTP/1.0\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 OK\r\n") == 2 and out.count(b"HTTP/1.1 404 ") == 1
    status, headers, _ = split_response(one_zero)
    assert status == 200 and headers["connection"] == "close"


MALFORMED = {
    "garbage": (b"GARBAGE\r\n\r\n", 400),
    "no-version": (b"GET /metrics\r\n\r\n", 400),
    "two-spaces": (b"GET  /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "http-2": (b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    "no-host": (b"GET /metrics HTTP/1.1\r\n\r\n", 400),
    "no-colon": (b"GET /metrics HTTP/1.1\r\nHost x\r\n\r\n", 400),
    "folded": (b"GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400),
    "lone-cr": (b"GET /metrics HTTP/1.1\r\nHost: x\rInjected: y\r\n\r\n", 400),
    "two-lengths": (
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        400,
    ),
    "non-ascii-target": (b"GET /m\xc3\xa9trics HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "tls-hello": (
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) + b"\r\n\r\n",
        400,
    ),
    "long-line": (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    "long-header": (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
    "many-headers": (b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 2000 + b"\r\n", 431),
}


@pytest.mark.parametrize(("request_bytes", "status"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_requests_are_refused_and_closed(request_bytes: bytes, status: int) -> None:
    with running(Rows(ROWS)) as (_, host, port):
        out = http(host, port, request_bytes)
        # and the next client is served as usual
        assert get(host, port)[0] == 200
    assert status_of(out) == status, out[:300]
    _, headers, body = split_response(out)
    # one answer (nothing after its body), and the connection closed
    assert len(body) == int(headers["content-length"]) and headers["connection"] == "close"
    assert b"bpfsym_" not in out


def half_close_http(host: str, port: int, data: bytes) -> bytes:
    """Send data, shut the sending side down, read the answer."""
    with socket.create_connection((host, port), timeout=20) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_head_cut_short_is_a_400() -> None:
    with running(Rows(ROWS)) as (_, host, port):
        out = half_close_http(host, port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    assert status_of(out) == 400


def test_request_with_a_body_is_answered_then_closed() -> None:
    with running(Rows(ROWS)) as (_, host, port):
        out = http(
            host,
            port,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        )
    status, headers, _ = split_response(out)
    assert status == 200 and headers["connection"] == "close"
    assert out.count(b"HTTP/1.1 ") == 1  # the body is not read as a second request


class SlowClient(threading.Thread):
    """Sends a request head a byte every `every` seconds (slow loris) until the server closes."""

    HEAD = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n\r\n"

    def __init__(self, host: str, port: int, every: float) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.every = host, port, every
        self.sent = 0
        self.answer = b""
        self.connected = threading.Event()

    def run(self) -> None:
        with socket.create_connection((self.host, self.port), timeout=60) as s:
            self.connected.set()
            try:
                for b in self.HEAD[:-4]:  # never the end of the head
                    s.sendall(bytes([b]))
                    self.sent += 1
                    ready, _, _ = select.select([s], [], [], self.every)
                    if ready:
                        break
                while chunk := s.recv(65536):
                    self.answer += chunk
            except (BrokenPipeError, ConnectionResetError):
                pass


def test_slow_loris_is_cut_at_the_head_deadline() -> None:
    limits = Limits(head_timeout=1.0)
    with running(Rows(ROWS), limits) as (_, host, port):
        slow = SlowClient(host, port, every=0.25)
        slow.start()
        slow.join(60)
    assert not slow.is_alive()
    # closed with a 408 long before it could finish (it would take ~15 s to send its head)
    assert status_of(slow.answer) == 408
    assert slow.sent < len(SlowClient.HEAD) - 4


def test_idle_connections_are_closed_without_an_answer() -> None:
    """One that never sends a byte, and a kept-alive one after its answer: closed at the head
    deadline with nothing sent (a 408 there would be an unsolicited answer to a client)."""
    with running(Rows(ROWS), Limits(head_timeout=0.5)) as (_, host, port):
        assert http(host, port, b"") == b""
        with socket.create_connection((host, port), timeout=20) as s:
            s.sendall(f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            got = b""
            while chunk := s.recv(65536):
                got += chunk
    status, headers, body = split_response(got)
    assert status == 200 and "connection" not in headers  # kept alive ...
    assert len(body) == int(headers["content-length"])  # ... then closed with nothing more


def test_slow_and_idle_clients_do_not_stall_a_scrape() -> None:
    """Many connections that send nothing or a byte at a time, more than the server takes: a
    scrape is answered at once (well before any of their deadlines), the oldest idle ones make
    room for it."""
    limits = Limits(head_timeout=60.0, connections=8)
    with running(Rows(ROWS), limits) as (server, host, port):
        slow = [SlowClient(host, port, every=0.5) for _ in range(3)]
        for c in slow:
            c.start()
            c.connected.wait(10)
        idle = [socket.create_connection((host, port), timeout=30) for _ in range(20)]
        time.sleep(0.3)
        t0 = time.monotonic()
        status, _, body = get(host, port)
        took = time.monotonic() - t0
        assert status == 200 and b"bpfsym_programs 4.0" in body
        # a bound far below the 60 s head deadline a stalled scrape would wait for
        assert took < 20, took
        # the server holds no more than its limit; the evicted idle ones were closed
        assert len(server._conns) <= limits.connections
        closed = sum(closed_by_server(s) for s in idle)
        for s in idle:
            s.close()
    # at most `connections` of them can still be open
    assert closed >= len(idle) - limits.connections


def closed_by_server(s: socket.socket) -> bool:
    s.settimeout(0.1)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_collections_are_shared_and_one_at_a_time() -> None:
    rows = Rows(ROWS, delay=0.5)
    with running(rows, Limits(reuse=0.0)) as (server, host, port):
        results: list[int] = []

        def scrape() -> None:
            results.append(get(host, port)[0])

        threads = [threading.Thread(target=scrape) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert results == [200] * 8
    # the first scrape's collection, then at most one more for all who came while it ran
    assert rows.calls <= 2 and server.collections == rows.calls


def test_failed_collection_is_a_500_and_the_next_one_works() -> None:
    with running(Rows(ROWS, fail=1), Limits(reuse=0.0)) as (_, host, port):
        status, _, body = get(host, port)
        assert status == 500 and b"collection failed" in body
        assert get(host, port)[0] == 200


def test_ipv6_loopback() -> None:
    with running(Rows(ROWS), host="::1") as (_, host, port):
        assert host == "::1"
        status, _, body = get("::1", port)
    assert status == 200 and b"bpfsym_programs 4.0" in body


# ---- the owner label ------------------------------------------------------------------------


class Script:
    """Scan results in order (what /proc showed at each walk), and a settable clock."""

    def __init__(self, scans: list[dict[int, dict[int, str]]]) -> None:
        self.scans, self.now, self.walks = scans, 0.0, 0

    def scan(self) -> dict[int, dict[int, str]]:
        self.walks += 1
        return self.scans.pop(0)

    def clock(self) -> float:
        return self.now


def test_owner_is_set_when_first_seen_and_kept_while_held() -> None:
    a, b = (1, 100), (2, 200)  # (id, load_time)
    s = Script(
        [
            {1: {10: "agent", 11: "agent"}},
            # bpftool opens every program for a moment, the agent still holds 1
            {1: {10: "agent", 99: "bpftool"}, 2: {99: "bpftool"}},
            # the agent is gone, a new one holds 1; nobody holds 2
            {1: {12: "agent2"}},
        ]
    )
    owners = Owners(scan=s.scan, rescan=30.0, clock=s.clock)
    assert owners.labels([a]) == {a: "agent"}
    assert owners.labels([a]) == {a: "agent"} and s.walks == 1  # nothing new: no walk
    s.now = 1.0
    assert owners.labels([a, b]) == {a: "agent", b: "bpftool"}  # b is new: one walk
    assert s.walks == 2
    s.now = 2.0
    assert owners.labels([a, b]) == {a: "agent", b: "bpftool"} and s.walks == 2
    s.now = 31.5  # the rescan: a's owners gone, b's holder gone
    assert owners.labels([a, b]) == {a: "agent2", b: ""} and s.walks == 3


def test_owner_of_a_reloaded_id_is_new() -> None:
    s = Script([{5: {1: "old"}}, {5: {2: "new"}}])
    owners = Owners(scan=s.scan, clock=s.clock)
    assert owners.labels([(5, 1)]) == {(5, 1): "old"}
    assert owners.labels([(5, 2)]) == {(5, 2): "new"}  # same id, other load time: a new program
