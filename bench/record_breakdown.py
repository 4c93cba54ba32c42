"""Where `bpfsym record` spends its start and stop: each step of record's run timed in place.

    python3 -P bench/record_breakdown.py [--programs N] [--perf] [--runs R] [-- CMD ...]

Runs bpfsym.commands.record.run (the code `bpfsym record` runs, unchanged) with timers
wrapped around its steps, by default as `bpfsym record --no-perf -o TMP -- true` (--perf: with
`-a -e cpu-clock` under perf). --programs N holds N copies of demo.bpf.o's xdp_demo
meanwhile (bench/_progs.py). Prints, per step, the function (file:function), when it
started and how long it took, in seconds from the moment run() was called; the
interpreter's start and bpfsym's imports are measured as separate processes. Steps in
other threads (the snapshot fetch in the worker) are summed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _progs  # noqa: E402

from bpfsym.capture import perf_options  # noqa: E402
from bpfsym.capture import recorder as record  # noqa: E402
from bpfsym.commands import record as command  # noqa: E402
from bpfsym.live import host  # noqa: E402
from bpfsym.live import pinner as lpin  # noqa: E402
from bpfsym.read.sidefile import SideFileWriter  # noqa: E402

T0 = [0.0]
STEPS: list[tuple[str, float, float]] = []  # (label, start, duration), main thread only
TOTALS: dict[str, list[float]] = defaultdict(list)  # label -> durations (any thread)


def _wrap(owner: Any, attr: str, label: str, each: bool = False) -> None:
    orig = getattr(owner, attr)

    def timed(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return orig(*a, **kw)
        finally:
            d = time.perf_counter() - t
            if each:
                TOTALS[label].append(d)
            else:
                STEPS.append((label, t - T0[0], d))

    setattr(owner, attr, timed)


class _TimedEvent(threading.Event):
    def wait(self, timeout: float | None = None) -> bool:
        t = time.perf_counter()
        ok = super().wait(timeout)
        STEPS.append(("live/pinner.py:PinnerClient.ready.wait", t - T0[0], time.perf_counter() - t))
        return ok


class _Client(lpin.PinnerClient):
    def __init__(self, *a: Any, **kw: Any) -> None:
        t = time.perf_counter()
        super().__init__(*a, **kw)
        STEPS.append(("live/pinner.py:PinnerClient.__init__", t - T0[0], time.perf_counter() - t))
        was = self.ready.is_set()
        self.ready = _TimedEvent()
        if was:
            self.ready.set()
        # the receiver threads set the old event: forward it
        threading.Thread(target=self._forward_ready, daemon=True).start()

    def _forward_ready(self) -> None:
        while self._waiting > 0 and self.proc.poll() is None:
            time.sleep(0.001)
        self.ready.set()


def instrument() -> None:
    _wrap(host, "identity", "live/host.py:identity")
    _wrap(host, "read_sysctls", "live/host.py:read_sysctls")
    _wrap(record, "image_kallsyms", "capture/recorder.py:image_kallsyms (split reader)")
    _wrap(record.Recorder, "snapshot_pin", "capture/recorder.py:Recorder.snapshot_pin")
    _wrap(record.Recorder, "fetch", "capture/recorder.py:Recorder.fetch", each=True)
    _wrap(record.Recorder, "finish", "capture/recorder.py:Recorder.finish")
    _wrap(perf_options, "option_table", "capture/perf_options.py:option_table (perf -h)")
    _wrap(SideFileWriter, "flush", "read/sidefile.py:SideFileWriter.flush")
    _wrap(lpin.PinnerClient, "stop", "live/pinner.py:PinnerClient.stop")
    record.lpin.PinnerClient = _Client  # type: ignore[misc]
    orig_start: Callable[..., Any] = record._start_command

    def start(*a: Any) -> Any:
        t = time.perf_counter()
        launch = orig_start(*a)
        STEPS.append(("capture/recorder.py:_start_command", t - T0[0], time.perf_counter() - t))
        child = launch.child
        wait = child.wait

        def timed_wait(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return wait(*a, **kw)
            finally:
                STEPS.append(
                    ("  child.wait (the command/perf)", t - T0[0], time.perf_counter() - t)
                )

        child.wait = timed_wait
        return launch

    record._start_command = start


def process_time(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-P", "-c", code], check=True, cwd=REPO)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--programs", type=int, default=0)
    ap.add_argument("--perf", action="store_true", help="record under perf (-a -e cpu-clock)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("command", nargs="*", default=["true"])
    a = ap.parse_args()
    instrument()
    with _progs.held(a.programs), tempfile.TemporaryDirectory() as d:
        startup = [process_time("pass") for _ in range(3)]
        imports = [
            process_time("import bpfsym.cli, bpfsym.commands.record, bpfsym.capture.recorder")
            for _ in range(3)
        ]
        print(f"interpreter start (python -P -c pass): {statistics.median(startup):.3f} s")
        print(
            f"+ record's imports: {statistics.median(imports) - statistics.median(startup):.3f} s"
        )
        for run in range(a.runs):
            STEPS.clear()
            TOTALS.clear()
            opts = ["-a", "-e", "cpu-clock"] if a.perf else ["--no-perf"]
            argv = [*opts, "-o", f"{d}/x.data", "--", *(a.command or ["true"])]
            T0[0] = time.perf_counter()
            command.run(argparse.Namespace(argv=argv))
            total = time.perf_counter() - T0[0]
            print(f"\nrun {run + 1}: commands/record.py:run {' '.join(argv)}  (N={a.programs})")
            print(f"  {'step (file:function)':<58} {'at s':>7} {'took s':>7}")
            for label, at, took in sorted(STEPS, key=lambda s: s[1]):
                print(f"  {label:<58} {at:>7.3f} {took:>7.3f}")
            for label, ds in TOTALS.items():
                print(
                    f"  {label + f' x{len(ds)} (sum; all threads)':<58} {'':>7} {sum(ds):>7.3f}"
                    f"   mean {statistics.mean(ds) * 1e6:.0f} us"
                )
            print(f"  {'run total':<58} {'':>7} {total:>7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
