"""Shared pieces of the `top --serve` tests: a real Prometheus server and promtool (Debian's
prometheus package, scripts/setup-prometheus), and a raw HTTP client that can misbehave."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
# what Prometheus 2.42 sends (scrape/scrape.go, scrapeAcceptHeader): OpenMetrics first
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def promtool_check(text: bytes) -> subprocess.CompletedProcess[str]:
    """`promtool check metrics` of a text-format exposition: exit 0 and nothing said = clean."""
    return subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=text.decode(),
        capture_output=True,
        text=True,
        timeout=60,
    )


class Prometheus:
    """A Prometheus server on a free 127.0.0.1 port scraping `targets` every second."""

    def __init__(self, tmp: Path, targets: list[str], job: str = "bpfsym") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            f"scrape_configs:\n  - job_name: {job}\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: {json.dumps(targets)}\n"
        )
        self.log = tmp / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {self.log.read_text()}")
            time.sleep(0.1)

    def api(self, path: str, **params: str) -> Any:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant vector results: [{"metric": {labels}, "value": [ts, "value"]}]."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def wait_for(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.query(expr)
            if got or time.monotonic() > deadline:
                return got
            time.sleep(0.25)

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def http(host: str, port: int, data: bytes, timeout: float = 20.0) -> bytes:
    """Send raw bytes, read until the server closes (or timeout): everything it sent."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect((host, port))
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before taking all of it
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out


def status_of(response: bytes) -> int:
    line = response.split(b"\r\n", 1)[0].split()
    assert len(line) >= 2 and line[0] == b"HTTP/1.1", response[:200]
    return int(line[1])


def split_response(response: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), headers, body
