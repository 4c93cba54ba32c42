"""One `bpfsym top --serve` scrape with 3000 programs loaded, as a ratio to `bpftool prog show -j`.

Loads N two-instruction socket filters (as bench/top_refresh.py does, and frees them the same
careful way), starts the endpoint in a process of its own and times whole scrapes over HTTP
(text format, OpenMetrics as Prometheus asks, and OpenMetrics gzipped), each a fresh
collection, interleaved with `bpftool prog show -j` listing the same programs: REPEATS rounds
of one scrape of each kind and one bpftool run. Min and median of each, and the ratios of
the mins and of the medians to bpftool's, are printed; then the median of each part of a
collection, in this process.

With --before CHECKOUT, that checkout's bpfsym (an older commit, say) serves too, from a
process of its own, and its scrapes are interleaved with this one's in the same rounds: the
same programs and the same load on the machine for both.

    python3 bench/serve_scrape.py [-n PROGRAMS] [-r REPEATS] [--before CHECKOUT]

Figures are noisy on a shared machine: compare ratios taken in the same run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's bpfsym

from prometheus_client.exposition import generate_latest  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics  # noqa: E402
from top_refresh import free, load  # noqa: E402

from bpfsym.live.stats import RuntimeStats  # noqa: E402
from bpfsym.top.serve import ProgCollector, families  # noqa: E402

ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
KINDS = {
    "text 0.0.4": {},
    "OpenMetrics": {"Accept": ACCEPT},
    "OpenMetrics + gzip": {"Accept": ACCEPT, "Accept-Encoding": "gzip"},
}
GAP = 0.6  # past the 0.5 s a collection is shared with later scrapes: each scrape collects


class Server:
    """`bpfsym top --serve 127.0.0.1:0` of a checkout, in a process of its own."""

    def __init__(self, label: str, checkout: Path) -> None:
        self.label = label
        env = dict(os.environ, PYTHONPATH=str(checkout))
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "bpfsym", "top", "--serve", "127.0.0.1:0"],
            cwd=checkout,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        if "serving " not in line:
            self.stop()
            raise RuntimeError(f"{label}: serve did not start: {line}")
        self.url = line.split("serving ", 1)[1].strip()
        self.times: dict[str, list[float]] = {k: [] for k in KINDS}

    def get(self, headers: dict[str, str]) -> bytes:
        req = urllib.request.Request(self.url, headers=headers)
        with urllib.request.urlopen(req, timeout=120) as r:
            return bytes(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def once(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bpftool() -> None:
    subprocess.run(["bpftool", "prog", "show", "-j"], check=True, stdout=subprocess.DEVNULL)


def ms(x: float) -> str:
    return f"{x * 1e3:7.1f} ms"


class Fixed:
    """Collected metric families, for prometheus-client's encoders (anything with collect())."""

    def __init__(self, metrics: list[Any]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Any]:
        return self.metrics


def parts(repeats: int) -> tuple[str, dict[str, float]]:
    """Where holders come from, and the median cost of each part of a collection with this
    checkout's code, in this process."""
    out: dict[str, list[float]] = {
        "counters of all programs (Top.snapshot)": [],
        "holders (top.holders, when the owner policy asks)": [],
        "rows with labels": [],
        "metric families": [],
        "encoding, text 0.0.4": [],
        "encoding, OpenMetrics": [],
    }
    with ProgCollector() as collector:
        kind = collector.top.holders.kind
        rows = collector.rows()
        fixed = Fixed(families(rows))
        for _ in range(repeats):
            values = list(out.values())
            values[0].append(once(collector.top.snapshot))
            values[1].append(once(collector.holders))
            values[2].append(once(collector.rows))
            values[3].append(once(lambda: families(rows)))
            values[4].append(once(lambda: generate_latest(fixed)))  # type: ignore[arg-type]
            values[5].append(once(lambda: openmetrics(fixed)))  # type: ignore[arg-type]
    return kind, {k: statistics.median(v) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", "--programs", type=int, default=3000)
    ap.add_argument("-r", "--repeats", type=int, default=7)
    ap.add_argument("--before", type=Path, help="another checkout to serve, interleaved")
    args = ap.parse_args()
    if args.repeats < 5:
        ap.error("at least 5 runs: min and median of fewer say little")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.programs + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(args.programs + 256, hard), hard))

    with RuntimeStats():
        fds = load(args.programs)
        servers: list[Server] = []
        try:
            if args.before is not None:
                servers.append(Server("before", args.before.resolve()))
            servers.append(Server("this checkout", ROOT))
            sizes = {}
            for s in servers:
                s.get({})  # a first collection (the old code decodes every program's labels)
                sizes[s.label] = (
                    s.get({}).count(b"\nbpfsym_prog_runs_total{"),
                    len(s.get(KINDS["OpenMetrics"])),
                    len(s.get(KINDS["OpenMetrics + gzip"])),
                )
            t_tool: list[float] = []
            for _ in range(args.repeats):  # interleaved: the same load on the machine for all
                for s in servers:
                    for kind, headers in KINDS.items():
                        time.sleep(GAP)
                        s.times[kind].append(once(lambda: s.get(headers)))  # noqa: B023
                t_tool.append(once(bpftool))
            holder_kind, collection = parts(args.repeats)
        finally:
            for s in servers:
                s.stop()
            free(fds)

    print(f"{args.programs} programs loaded by this benchmark, {args.repeats} interleaved rounds")
    tool_min, tool_med = min(t_tool), statistics.median(t_tool)
    print(f"bpftool prog show -j:            min {ms(tool_min)}  median {ms(tool_med)}")
    for s in servers:
        n, om, gz = sizes[s.label]
        print(
            f"{s.label}: {n} programs exported, OpenMetrics {om >> 10} KiB, gzipped {gz >> 10} KiB"
        )
        for kind, times in s.times.items():
            lo, med = min(times), statistics.median(times)
            print(
                f"  scrape, {kind:<20} min {ms(lo)}  median {ms(med)}"
                f"  / bpftool: min {lo / tool_min:.2f}x  median {med / tool_med:.2f}x"
            )
    print(f"parts of a collection (this checkout, holders from the {holder_kind}):")
    for k, v in collection.items():
        print(f"  {k:<50} median {ms(v)}")
    for s in servers:
        times = s.times["OpenMetrics"]
        print(
            f"ratio OpenMetrics scrape / bpftool, {s.label}:"
            f" min {min(times) / tool_min:.2f}x median {statistics.median(times) / tool_med:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
