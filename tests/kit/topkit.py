"""A held XDP fixture program, a BPF_PROG_TEST_RUN driver thread, bpftool's readings."""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from bpfsym.formats import bpf as fb
from bpfsym.live.sys import Buffer, bpf

ROOT = Path(__file__).resolve().parents[2]


FIXTURE = ROOT / "tests/fixtures/top/top_xdp.bpf.o"


SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"


def bpftool_prog(prog_id: int) -> dict:
    out = subprocess.run(
        ["bpftool", "-j", "prog", "show", "id", str(prog_id)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


@contextlib.contextmanager
def fixture_prog() -> Iterator[tuple[int, int]]:
    """Load the XDP fixture with bpftool and hold it by fd only: yields (fd, prog id)."""
    pin = f"/sys/fs/bpf/bpfsym_top_{os.getpid()}_{time.monotonic_ns()}"
    subprocess.run(["bpftool", "prog", "load", str(FIXTURE), pin, "type", "xdp"], check=True)
    try:
        prog_id = int(
            json.loads(
                subprocess.run(
                    ["bpftool", "-j", "prog", "show", "pinned", pin],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )["id"]
        )
        path = Buffer(len(pin) + 1)
        path.write(pin.encode() + b"\0")
        fd = bpf(
            fb.BPF_OBJ_GET,
            fb.obj_get_attr.build({"pathname": path.addr, "bpf_fd": 0, "file_flags": 0}),
        )
    finally:
        os.unlink(pin)
    try:
        yield fd, prog_id
    finally:
        os.close(fd)


def load_unnamed_filter() -> int:
    """A socket filter `r0 = 0; exit` with no name and no BTF: its fd."""
    insns = bytes([0xB7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0])
    code, lic = Buffer(len(insns)), Buffer(4)
    code.write(insns)
    lic.write(b"GPL\0")
    attr = fb.prog_load_attr.build(
        dict(
            prog_type=1, insn_cnt=2, insns=code.addr, license=lic.addr, log_level=0, log_size=0,
            log_buf=0, kern_version=0, prog_flags=0, prog_name="",
        )
    )  # fmt: skip
    return bpf(fb.BPF_PROG_LOAD, attr)


def prog_test_run(fd: int, repeat: int, data: Buffer, size: int) -> None:
    attr = fb.test_run_attr.build(
        dict(
            prog_fd=fd, retval=0, data_size_in=size, data_size_out=0, data_in=data.addr, data_out=0,
            repeat=repeat, duration=0, ctx_size_in=0, ctx_size_out=0, ctx_in=0, ctx_out=0, flags=0,
            cpu=0, batch_size=0,
        )
    )  # fmt: skip
    bpf(fb.BPF_PROG_TEST_RUN, attr)


class Driver(threading.Thread):
    """Runs prog fd `repeat` times every `period` seconds; logs (wall time, total runs)."""

    # repeat 1: for XDP, repeat > 1 swaps the XDP dispatcher (bpf_prog_change_xdp), ~17 ms a call
    def __init__(self, fd: int, repeat: int = 1, period: float = 0.0005) -> None:
        super().__init__(daemon=True)
        self.fd, self.repeat, self.period = fd, repeat, period
        self.times: list[float] = []
        self.totals: list[int] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.packet = Buffer(64)
        self.packet.write(bytes(range(64)))

    def run(self) -> None:
        total = 0
        due = time.monotonic()
        try:
            while not self.stop.is_set():
                prog_test_run(self.fd, self.repeat, self.packet, 64)
                total += self.repeat
                self.times.append(time.time())
                self.totals.append(total)
                due += self.period
                time.sleep(max(0.0, due - time.monotonic()))
        except BaseException as e:  # noqa: B036 - reported by the test
            self.error = e

    def runs_between(self, t0: float, t1: float) -> int:
        """Runs the driver finished in (t0, t1]."""
        i0 = bisect.bisect_right(self.times, t0)
        i1 = bisect.bisect_right(self.times, t1)
        before = self.totals[i0 - 1] if i0 else 0
        upto = self.totals[i1 - 1] if i1 else 0
        return upto - before

    def rate(self) -> float:
        return self.repeat / self.period


@contextlib.contextmanager
def driving(fd: int) -> Iterator[Driver]:
    d = Driver(fd)
    d.start()
    try:
        yield d
    finally:
        d.stop.set()
        d.join()
        assert d.error is None, d.error


def prog_ids_of(pid: int, target: str) -> set[int]:
    """Program ids behind the fds of process pid whose link reads `target`."""
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    out |= {int(ln.split()[1]) for ln in f if ln.startswith("prog_id:")}
    return out
