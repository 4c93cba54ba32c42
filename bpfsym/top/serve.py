"""bpfsym top --serve: every BPF program's run time as an OpenMetrics/Prometheus endpoint.

Per program, counters of run time (seconds), runs and recursion misses since load, labelled
id, name, type, tag and owner (the commands holding the program open), and a gauge of the
programs loaded. Values are read from the kernel when a scrape asks for them, the way a top
refresh reads them (bpfsym.top.rows.Top: live.stats.Sampler for the counters, top.holders
for the owners); statistics stay on through one BPF_ENABLE_RUNTIME_STATS fd held while
serving (kernel.bpf_stats_enabled is never written). The exposition (text 0.0.4 or
OpenMetrics, by the scrape's Accept header, gzip when accepted) is prometheus-client's.

It runs as root on production hosts, so the HTTP side is small and bounded (docs/top.md,
"Prometheus endpoint"): 127.0.0.1 unless an address is given, GET/HEAD of /metrics only, a
deadline for each request head and each response, a cap on head size and on open
connections, and one collection at a time in a worker thread, shared by the scrapes that
wait for it, so that no client, slow, malformed or many, holds up another's scrape or grows
memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import ipaddress
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, generate_latest, gzip_accepted
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from bpfsym.formats.bpf import prog_type_name
from bpfsym.live.stats import RuntimeStats, StatsUnavailable
from bpfsym.top.rows import Top

DEFAULT_ADDRESS = "127.0.0.1"
METRICS_PATH = "/metrics"
NS = 1_000_000_000

LABELS = ["id", "name", "type", "tag", "owner"]


# ---- the listening address ----------------------------------------------------------------


def parse_listen(text: str) -> tuple[str, int]:
    """Parse "[ADDR:]PORT" into (address, port), for argparse (ArgumentTypeError on bad input).

    PORT alone listens on 127.0.0.1; ADDR is an IPv4 address, "localhost" (127.0.0.1) or an
    IPv6 address in brackets ([::1]:9101). Port 0 takes any free port (printed at start)."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or text[end + 1 : end + 2] != ":":
            raise argparse.ArgumentTypeError(f"not [IPv6]:PORT: {text!r}")
        host, port_text = text[1:end], text[end + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an IPv6 address: {host!r}") from None
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
        if ":" in host:
            raise argparse.ArgumentTypeError(
                f"an IPv6 address goes in brackets, [ADDR]:PORT: {text!r}"
            )
        if host == "localhost":
            host = DEFAULT_ADDRESS
        elif not host:
            raise argparse.ArgumentTypeError(
                f"no address before the port: {text!r} (all IPv4 addresses: 0.0.0.0:PORT)"
            )
        else:
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"not an IP address: {host!r} (IPv4, localhost, or [IPv6])"
                ) from None
    else:
        host, port_text = DEFAULT_ADDRESS, text
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise argparse.ArgumentTypeError(f"not a port (0-65535): {port_text!r}")
    return host, int(port_text)


def url_of(host: str, port: int) -> str:
    return (
        f"http://[{host}]:{port}{METRICS_PATH}"
        if ":" in host
        else f"http://{host}:{port}{METRICS_PATH}"
    )


# ---- what is exported ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProgRow:
    """One program's exported values: the labels and the totals since load."""

    id: int
    name: str  # as bpftool shows it (the BTF name for a truncated one), "" when unnamed
    type: str  # bpftool's name of the program type
    tag: str  # 16 hex digits
    owner: str  # commands holding it open, sorted, joined by ","; "" for none
    run_time_ns: int
    run_cnt: int
    recursion_misses: int


def families(rows: Iterable[ProgRow]) -> list[Metric]:
    """The metric families for these rows (the exposition of one scrape)."""
    run_time = CounterMetricFamily(
        "bpfsym_prog_run_time_seconds",
        "Time the BPF program ran since it was loaded, while runtime statistics were on "
        "(bpf_prog_info.run_time_ns)",
        labels=LABELS,
        unit="seconds",
    )
    runs = CounterMetricFamily(
        "bpfsym_prog_runs",
        "Runs of the BPF program since it was loaded, while runtime statistics were on "
        "(bpf_prog_info.run_cnt)",
        labels=LABELS,
    )
    misses = CounterMetricFamily(
        "bpfsym_prog_recursion_misses",
        "Runs of the BPF program skipped because it was already running on that CPU "
        "(bpf_prog_info.recursion_misses)",
        labels=LABELS,
    )
    n = 0
    for r in rows:
        labels = [str(r.id), r.name, r.type, r.tag, r.owner]
        run_time.add_metric(labels, r.run_time_ns / NS)
        runs.add_metric(labels, r.run_cnt)
        misses.add_metric(labels, r.recursion_misses)
        n += 1
    count = GaugeMetricFamily("bpfsym_programs", "BPF programs loaded", value=n)
    return [run_time, runs, misses, count]


@dataclass
class _Owner:
    pids: frozenset[int]
    label: str


Scan = Callable[[], dict[int, dict[int, str]]]  # program id -> {pid: comm} of its holders now


class Owners:
    """The owner label of each program, from its fd holders, kept stable across scrapes.

    Holders are read (`scan`) only when a program appears that has no owner yet, or every
    `rescan` seconds. A program's label is set when it is first seen and changes only when
    none of the processes it named still holds the program: a process that briefly opens
    every program (bpftool, another top) does not churn the series."""

    def __init__(
        self, scan: Scan, rescan: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._scan, self._rescan, self._clock = scan, rescan, clock
        self._known: dict[tuple[int, int], _Owner] = {}
        self._last = -float("inf")
        self.scans = 0

    def labels(self, keys: Iterable[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """(id, load_time) of every program alive -> its owner label."""
        keys = list(keys)
        now = self._clock()
        if any(k not in self._known for k in keys) or now - self._last >= self._rescan:
            held = self._scan()
            self._last, self.scans = now, self.scans + 1
            for k in keys:
                cur = held.get(k[0], {})
                old = self._known.get(k)
                if old is None or not (old.pids & cur.keys()):
                    self._known[k] = _Owner(frozenset(cur), ",".join(sorted(set(cur.values()))))
        alive = set(keys)
        for k in [k for k in self._known if k not in alive]:
            del self._known[k]
        return {k: self._known[k].label for k in keys}


class ProgCollector(Collector):
    """prometheus-client Collector: every program's counters, read from the kernel at collect().

    It reads through top's refresh machinery, one bpfsym.top.rows.Top kept for the collector's
    life: per program and scrape BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD and close,
    with name, type and tag decoded once per program (live.stats.Sampler); holders from top's
    task_file iterator, or the /proc walk where it cannot load (top.holders), read when
    Owners asks. The serving process's own iterator program is not exported, as top does
    not list it. close() (or leaving a with block) unloads the iterator."""

    def __init__(self, top: Top | None = None, owners: Owners | None = None) -> None:
        self.top = top if top is not None else Top()
        self.owners = owners or Owners(self.holders)

    def holders(self) -> dict[int, dict[int, str]]:
        """Program id -> {pid: comm} of the processes holding it, read now."""
        return {prog_id: dict(held) for prog_id, held in self.top.holders.read().items()}

    def rows(self) -> list[ProgRow]:
        progs = list(self.top.snapshot().progs.values())
        owner = self.owners.labels([(p.id, p.load_time) for p in progs])
        types: dict[int, str] = {}
        out = []
        for p in progs:
            tname = types.get(p.type)
            if tname is None:
                tname = types[p.type] = prog_type_name(p.type)
            out.append(
                ProgRow(
                    p.id, p.full_name, tname, p.tag, owner[p.id, p.load_time],
                    p.run_time_ns, p.run_cnt, p.recursion_misses,
                )
            )  # fmt: skip
        return out

    def collect(self) -> Iterator[Metric]:
        yield from families(self.rows())

    def close(self) -> None:
        self.top.close()

    def __enter__(self) -> ProgCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Fixed(Collector):
    """A collected scrape, handed to the encoders (which take anything with collect())."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def registry_for(collector: Collector) -> CollectorRegistry:
    """A registry of the program collector plus the serving process's own CPU, memory, fds."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    ProcessCollector(registry=reg)
    return reg


# ---- HTTP -------------------------------------------------------------------------------


@dataclass
class Limits:
    """What one client may use of the server."""

    head_bytes: int = 8192  # request line + headers
    head_timeout: float = 10.0  # seconds from waiting for a request to its complete head
    write_timeout: float = 30.0  # seconds to take a whole response
    connections: int = 32  # open at once; the oldest one still sending its head makes room
    reuse: float = 0.5  # seconds a collection answers later scrapes too
    chunk: int = 65536  # response bytes queued at a time


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


@dataclass
class Request:
    method: str
    path: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)
    has_body: bool = False


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_head(head: bytes) -> Request:
    """Request line and headers (RFC 9112), up to the empty line; BadRequest when malformed."""
    lines = head.split(b"\r\n")
    if lines[-2:] == [b"", b""]:
        lines = lines[:-2]
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0] or not set(parts[0]) <= _TOKEN:
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if not version.startswith(b"HTTP/") or len(version) != 8 or version[6:7] != b".":
        raise BadRequest(400, "malformed HTTP version")
    if version not in (b"HTTP/1.0", b"HTTP/1.1"):
        raise BadRequest(505, "HTTP/1.0 and HTTP/1.1 only")
    if not target or any(c <= 0x20 or c >= 0x7F for c in target):
        raise BadRequest(400, "malformed request target")
    req = Request(method.decode(), target.decode(), version.decode())
    lengths = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or not set(name) <= _TOKEN:
            raise BadRequest(400, "malformed header line")
        value = value.strip(b" \t")
        # no control characters (a lone CR or NUL in a value would be echoed nowhere, but a
        # value is either text or the request is not one)
        if any(c < 0x20 and c != 0x09 or c == 0x7F for c in value):
            raise BadRequest(400, "control character in a header")
        key = name.decode().lower()
        text = value.decode("latin-1")
        if key == "content-length":
            lengths.append(text)
        if key == "transfer-encoding":
            req.has_body = True
        req.headers[key] = f"{req.headers[key]}, {text}" if key in req.headers else text
    if lengths:
        if len(set(lengths)) != 1 or not lengths[0].isdigit():
            raise BadRequest(400, "bad Content-Length")
        req.has_body = req.has_body or int(lengths[0]) > 0
    if req.version == "HTTP/1.1" and "host" not in req.headers:
        raise BadRequest(400, "HTTP/1.1 request without Host")
    return req


@dataclass
class _Collected:
    metrics: list[Metric]
    done: float  # monotonic time the collection finished
    bodies: dict[tuple[str, bool], bytes] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def body(self, accept: str, gzipped: bool) -> tuple[str, bytes]:
        """(content type, body) for this Accept header, encoded once per kind."""
        try:
            encoder, content_type = choose_encoder(accept)
        except (TypeError, ValueError):
            # prometheus-client fails on a version it cannot compare ("version=x"): plain text
            encoder, content_type = generate_latest, choose_encoder("")[1]
        key = (content_type, gzipped)
        with self.lock:
            got = self.bodies.get(key)
            if got is None:
                got = encoder(_Fixed(self.metrics))
                if gzipped:
                    got = gzip.compress(got, compresslevel=6)
                if len(self.bodies) < 8:  # odd Accept headers: encoded, not kept
                    self.bodies[key] = got
        return content_type, got


class MetricsServer:
    """An asyncio HTTP/1.1 server of one path, with the bounds of Limits."""

    def __init__(self, registry: CollectorRegistry, limits: Limits | None = None) -> None:
        self.registry = registry
        self.limits = limits or Limits()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bpfsym-collect")
        self._conns: dict[asyncio.Task[None], bool] = {}  # task -> still waiting for its head
        self._writers: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._waiting: list[asyncio.Future[_Collected]] = []
        self._wanted: asyncio.Event | None = None
        self._last: _Collected | None = None
        self._collector: asyncio.Task[None] | None = None
        self._server: asyncio.AbstractServer | None = None
        self.collections = 0

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; the address and port bound."""
        self._wanted = asyncio.Event()
        self._collector = asyncio.create_task(self._collect_loop())
        self._server = await asyncio.start_server(
            self._accept, host, port, limit=self.limits.head_bytes, backlog=64, reuse_address=True
        )
        bound = self._server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task, writer in list(self._writers.items()):
            writer.transport.abort()
            task.cancel()
        for task in list(self._conns):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._collector is not None:
            self._collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._collector
        if self._server is not None:
            await self._server.wait_closed()
        # a collection under way finishes its pass; none waiting starts
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: self._pool.shutdown(wait=True, cancel_futures=True)
        )

    # -- collections: one at a time, shared by every scrape that waits while it runs

    def _collect(self) -> _Collected:
        metrics = list(self.registry.collect())
        return _Collected(metrics, time.monotonic())

    async def _collect_loop(self) -> None:
        assert self._wanted is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            waiting, self._waiting = self._waiting, []
            try:
                got = await loop.run_in_executor(self._pool, self._collect)
            except Exception as e:  # noqa: BLE001 - each waiting scrape answers 500
                for f in waiting:
                    if not f.done():
                        f.set_exception(e)
                continue
            self.collections += 1
            self._last = got
            for f in waiting:
                if not f.done():
                    f.set_result(got)

    async def collected(self) -> _Collected:
        """A collection that finished within Limits.reuse seconds, or the next one."""
        last = self._last
        if last is not None and time.monotonic() - last.done < self.limits.reuse:
            return last
        assert self._wanted is not None
        fut: asyncio.Future[_Collected] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        self._wanted.set()
        return await fut

    # -- connections

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._conns) >= self.limits.connections:
            # full: the oldest connection still waiting for its head gives way
            oldest = next((t for t, reading in self._conns.items() if reading), None)
            if oldest is None:
                await self._send_error(writer, 503, "too many connections")
                writer.transport.abort()
                return
            self._writers[oldest].transport.abort()
            oldest.cancel()
            self._conns.pop(oldest, None)
        self._conns[task] = True
        self._writers[task] = writer
        # drain() then waits until no more than one chunk is queued
        writer.transport.set_write_buffer_limits(high=self.limits.chunk)
        try:
            await self._serve(reader, writer, task)
            writer.close()  # sends what is queued, then FIN
            await asyncio.wait_for(writer.wait_closed(), self.limits.write_timeout)
        except (ConnectionError, asyncio.CancelledError, asyncio.TimeoutError):
            pass
        except Exception as e:  # noqa: BLE001 - one client's trouble, not the server's end
            print(f"bpfsym top: connection dropped: {e!r}", file=sys.stderr, flush=True)
        finally:
            self._conns.pop(task, None)
            self._writers.pop(task, None)
            writer.transport.abort()  # no-op once closed; drops a client that did not read

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, task: asyncio.Task[None]
    ) -> None:
        lim = self.limits
        while True:
            self._conns[task] = True
            loop = asyncio.get_running_loop()
            deadline = loop.time() + lim.head_timeout
            try:
                first = await asyncio.wait_for(reader.readexactly(1), lim.head_timeout)
            except (asyncio.TimeoutError, asyncio.IncompleteReadError):
                # idle (a kept-alive connection between scrapes, or one that never sent a
                # byte): closed without an answer, which RFC 9112 9.6 allows at any time
                return
            try:
                rest = reader.readuntil(b"\r\n\r\n")
                head = first + await asyncio.wait_for(rest, max(0.0, deadline - loop.time()))
            except asyncio.IncompleteReadError as e:
                if e.partial.strip():
                    await self._send_error(writer, 400, "incomplete request")
                return
            except asyncio.LimitOverrunError:
                # the head is still buffered: a request line that ends within the limit means
                # the headers are too long (431), otherwise the line is (414)
                try:
                    await reader.readuntil(b"\r\n")
                    status = 431
                except (asyncio.LimitOverrunError, asyncio.IncompleteReadError):
                    status = 414
                await self._send_error(writer, status, f"request head over {lim.head_bytes} bytes")
                return
            except asyncio.TimeoutError:
                await self._send_error(
                    writer, 408, f"request head not complete in {lim.head_timeout:g}s"
                )
                return
            self._conns[task] = False
            try:
                req = parse_head(head)
            except BadRequest as e:
                await self._send_error(writer, e.status, str(e))
                return
            keep = (
                req.version == "HTTP/1.1"
                and not req.has_body
                and "close" not in req.headers.get("connection", "").lower()
            )
            path = req.path.split("?", 1)[0]
            if req.method not in ("GET", "HEAD"):
                await self._send_error(
                    writer, 405, "GET or HEAD only", [("Allow", "GET, HEAD")], keep=False
                )
                return
            if path != METRICS_PATH:
                await self._send_error(writer, 404, f"only {METRICS_PATH} is served", keep=keep)
                if not keep:
                    return
                continue
            await self._scrape(writer, req, keep)
            if not keep:
                return

    async def _scrape(self, writer: asyncio.StreamWriter, req: Request, keep: bool) -> None:
        try:
            got = await self.collected()
        except Exception as e:  # noqa: BLE001 - the scrape fails, the server goes on
            print(f"bpfsym top: collection failed: {e}", file=sys.stderr, flush=True)
            await self._send_error(writer, 500, "collection failed", keep=keep)
            return
        gzipped = gzip_accepted(req.headers.get("accept-encoding", ""))
        accept = req.headers.get("accept", "")
        loop = asyncio.get_running_loop()
        content_type, body = await loop.run_in_executor(self._pool, got.body, accept, gzipped)
        headers = [("Content-Type", content_type)]
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        await self._send(writer, 200, headers, body, head_only=req.method == "HEAD", keep=keep)

    async def _send_error(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        message: str,
        headers: list[tuple[str, str]] | None = None,
        keep: bool = False,
    ) -> None:
        body = f"{status} {_REASONS[status]}: {message}\n".encode()
        hdrs = [("Content-Type", "text/plain; charset=utf-8"), *(headers or [])]
        with contextlib.suppress(ConnectionError, asyncio.TimeoutError):
            await self._send(writer, status, hdrs, body, keep=keep)

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        head_only: bool = False,
        keep: bool = True,
    ) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS[status]}"]
        lines += [f"{k}: {v}" for k, v in headers]
        lines.append(f"Content-Length: {len(body)}")
        if not keep:
            lines.append("Connection: close")
        out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

        async def write() -> None:
            writer.write(out)
            if not head_only:
                view = memoryview(body)
                for at in range(0, len(body), self.limits.chunk):
                    # a chunk at a time: a client that does not read holds one chunk, not a copy
                    writer.write(view[at : at + self.limits.chunk])
                    await writer.drain()
            await writer.drain()

        await asyncio.wait_for(write(), self.limits.write_timeout)


# ---- the command -------------------------------------------------------------------------


async def _run(
    address: str,
    port: int,
    limits: Limits,
    ready: Callable[[str, int], None] | None,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        with RuntimeStats(), ProgCollector() as collector:
            server = MetricsServer(registry_for(collector), limits)
            try:
                host, bound = await server.start(address, port)
            except OSError as e:
                await server.close()
                why = (
                    os.strerror(e.errno)
                    if e.errno and not isinstance(e, socket.gaierror)
                    else str(e.strerror or e)
                )
                print(
                    f"bpfsym top: cannot listen on {url_of(address, port)}: {why}", file=sys.stderr
                )
                return 2
            try:
                if ready is not None:
                    ready(host, bound)
                await stop.wait()
            finally:
                await server.close()  # waits for a collection under way: then the Top closes
        return 0
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _announce(host: str, port: int) -> None:
    print(f"bpfsym top: serving {url_of(host, port)}", file=sys.stderr, flush=True)


def serve(
    address: str,
    port: int,
    limits: Limits | None = None,
    ready: Callable[[str, int], None] | None = _announce,
) -> int:
    """Serve /metrics on address:port until SIGTERM or SIGINT: exit status (0 when stopped).

    ready(host, port) is called once listening (default: one line on stderr with the URL)."""
    try:
        return asyncio.run(_run(address, port, limits or Limits(), ready))
    except StatsUnavailable as e:
        print(f"bpfsym top: {e}", file=sys.stderr)
        return 1
    except PermissionError:
        print("bpfsym top: listing BPF programs needs CAP_SYS_ADMIN (run as root)", file=sys.stderr)
        return 1
    except OSError as e:  # the first read of the programs, before listening
        print(f"bpfsym top: cannot read BPF programs: {e.strerror or e}", file=sys.stderr)
        return 1
