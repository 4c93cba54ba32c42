"""One `bpfsym top --serve` scrape with 3000 programs loaded, as a ratio to `bpftool prog show -j`.

Loads N two-instruction socket filters (as bench/top_refresh.py does, and frees them the same
careful way), starts the endpoint in a process of its own and times whole scrapes over HTTP
(text format, OpenMetrics as Prometheus asks, gzip), each a fresh collection, against bpftool
listing the same programs, in the same run; then the parts of a collection in this process.

    python3 bench/serve_scrape.py [-n PROGRAMS] [-r REPEATS]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's bpfsym

from prometheus_client.exposition import generate_latest  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics  # noqa: E402
from top_refresh import free, load  # noqa: E402

from bpfsym.live.stats import RuntimeStats  # noqa: E402
from bpfsym.top.serve import ProgCollector, _Fixed, families, scan_holders  # noqa: E402

ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


def timed(fn: Callable[[], object], repeats: int, gap: float = 0.0) -> float:
    times = []
    for _ in range(repeats):
        time.sleep(gap)
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", "--programs", type=int, default=3000)
    ap.add_argument("-r", "--repeats", type=int, default=7)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.programs + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(args.programs + 256, hard), hard))

    with RuntimeStats():
        fds = load(args.programs)
        server = subprocess.Popen(
            [sys.executable, "-m", "bpfsym", "top", "--serve", "127.0.0.1:0"],
            cwd=Path(__file__).resolve().parents[1],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stderr is not None
            url = server.stderr.readline().split("serving ", 1)[1].strip()

            def scrape(headers: dict[str, str]) -> Callable[[], bytes]:
                def get() -> bytes:
                    req = urllib.request.Request(url, headers=headers)
                    with urllib.request.urlopen(req, timeout=60) as r:
                        return bytes(r.read())

                return get

            body = scrape({})()  # the first collection decodes every program's labels
            total = body.count(b"\nbpfsym_prog_runs_total{")
            gap = 0.6  # past the 0.5 s a collection is shared with later scrapes
            t_text = timed(scrape({}), args.repeats, gap)
            t_om = timed(scrape({"Accept": ACCEPT}), args.repeats, gap)
            t_gz = timed(scrape({"Accept": ACCEPT, "Accept-Encoding": "gzip"}), args.repeats, gap)
            size_gz = len(scrape({"Accept": ACCEPT, "Accept-Encoding": "gzip"})())

            def bpftool() -> None:
                subprocess.run(
                    ["bpftool", "prog", "show", "-j"], check=True, stdout=subprocess.DEVNULL
                )

            t_bpftool = timed(bpftool, args.repeats)
            collector = ProgCollector()
            rows = collector.rows()
            t_rows = timed(collector.rows, args.repeats)
            t_fam = timed(lambda: families(rows), args.repeats)
            fixed = _Fixed(families(rows))
            t_enc_text = timed(lambda: generate_latest(fixed), args.repeats)
            t_enc_om = timed(lambda: openmetrics(fixed), args.repeats)
            t_holders = timed(scan_holders, args.repeats)
        finally:
            server.terminate()
            server.wait(60)
            free(fds)
    print(f"programs exported: {total} ({args.programs} loaded by this benchmark)")
    print(f"bpftool prog show -j:          {t_bpftool * 1e3:8.1f} ms (median of {args.repeats})")
    print(f"scrape, text 0.0.4:            {t_text * 1e3:8.1f} ms ({len(body) >> 10} KiB)")
    print(f"scrape, OpenMetrics:           {t_om * 1e3:8.1f} ms")
    print(f"scrape, OpenMetrics + gzip:    {t_gz * 1e3:8.1f} ms ({size_gz >> 10} KiB)")
    print(f"  counters of all programs:    {t_rows * 1e3:8.1f} ms (labels cached)")
    print(f"  metric families:             {t_fam * 1e3:8.1f} ms")
    print(f"  encoding, text / OpenMetrics:{t_enc_text * 1e3:8.1f} / {t_enc_om * 1e3:.1f} ms")
    print(f"  holders from /proc:          {t_holders * 1e3:8.1f} ms (once in 30 s, or new ids)")
    print(f"ratio OpenMetrics scrape / bpftool: {t_om / t_bpftool:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
