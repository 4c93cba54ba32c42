"""Shared pieces of the live tests: run bpfsym as a user would, the C loader, kallsyms."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import bpfsym

REPO = Path(__file__).resolve().parents[2]
BPF = REPO / "bpf"
DEMO = BPF / "demo.bpf.o"
CHURN = BPF / "churn.bpf.o"
LOADER = BPF / "loader"

# run the same bpfsym the tests import (installed package, or the work tree); with
# faulthandler on, so that a run that hangs tells where (bpfsym_run's SIGABRT)
ENV = dict(
    os.environ,
    PYTHONPATH=str(Path(bpfsym.__file__).resolve().parents[1]),
    PYTHONFAULTHANDLER="1",
)
BPFSYM = [sys.executable, "-P", "-m", "bpfsym"]


def bpfsym_run(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess[str]:
    """bpfsym ARGS, output captured. One that outlives timeout fails the test with where
    it was: every process of its tree with its threads' kernel stacks, then (SIGABRT,
    faulthandler) every Python thread's traceback."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    cmd = [*BPFSYM, *args]
    with subprocess.Popen(cmd, env=ENV, **_popen_kw(kw)) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            where = process_tree_report(p.pid)
            p.send_signal(signal.SIGABRT)
            try:
                out, err = p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            raise AssertionError(
                f"bpfsym {' '.join(args)}: still running after {timeout} s\n{where}\n"
                f"--- its stderr (Python tracebacks at the end) ---\n{err}"
            ) from None
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _popen_kw(kw: dict) -> dict:
    if kw.pop("capture_output", False):
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
    return kw


def process_tree_report(pid: int) -> str:
    """pid and its descendants: command line, state, each thread's name, wait channel and
    kernel stack (what a hang is waiting for)."""
    lines: list[str] = []
    todo = [pid]
    while todo:
        p = todo.pop(0)
        proc = Path(f"/proc/{p}")
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(
                ln for ln in (proc / "status").read_text().splitlines() if ln.startswith("State")
            )
        except (OSError, StopIteration):
            continue
        lines.append(f"== {p} {state.split(None, 1)[1]}: {cmdline.strip()}")
        for task in sorted(proc.glob("task/*"), key=lambda t: int(t.name)):
            try:
                comm = (task / "comm").read_text().strip()
                wchan = (task / "wchan").read_text().strip()
                stack = (task / "stack").read_text().strip()
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
            lines.append(f"  -- thread {task.name} {comm} wchan={wchan or '-'}")
            lines.extend("     " + ln for ln in stack.splitlines())
    return "\n".join(lines)


def record_demo(out: Path, *perf_opts: str, run: tuple[str, ...] = ("--seconds", "1")) -> None:
    """`bpfsym record PERF_OPTS -o OUT -- loader run demo.bpf.o xdp_demo RUN...`, which must succeed."""
    r = bpfsym_run(
        "record", *perf_opts, "-o", str(out), "--",
        str(ensure_loader()), "run", str(DEMO), "xdp_demo", *run,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


def ensure_loader() -> Path:
    if not LOADER.exists():
        subprocess.run(["make", "-s", "-C", str(BPF), "loader"], check=True)
    if not Path("/sys/fs/bpf").is_mount():
        subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], check=True)
    return LOADER


def kallsyms_bpf() -> dict[int, str]:
    """addr -> name of every [bpf] symbol in /proc/kallsyms now."""
    out = {}
    with open("/proc/kallsyms") as f:
        for line in f:
            if line.rstrip().endswith("[bpf]"):
                addr, _t, name = line.split()[:3]
                out[int(addr, 16)] = name
    return out


def children(pid: int) -> list[int]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


class Recording:
    """`bpfsym record --no-perf` around `sleep`: ready once the command runs; stopped by SIGINT."""

    def __init__(self, path: Path, *extra: str) -> None:
        self.path = path
        self.side = Path(str(path) + ".bpfsym")
        self.proc = subprocess.Popen(
            [*BPFSYM, "record", "--no-perf", "-o", str(path), *extra, "--", "sleep", "600"],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr = ""
        deadline = time.monotonic() + 60
        while not any(comm(c) == "sleep" for c in children(self.proc.pid)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"record did not start: {self.proc.communicate()[1]}")
            time.sleep(0.05)

    def pinner_pids(self) -> list[int]:
        """The pinner launcher and its per-CPU listener processes."""
        launcher = next(c for c in children(self.proc.pid) if comm(c) != "sleep")
        return [launcher, *children(launcher)]

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        _out, self.stderr = self.proc.communicate(timeout=120)
        return self.proc.returncode

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()


class Held:
    """`loader hold OBJ`: programs loaded and kept until closed; .progs is the loader's JSON."""

    def __init__(self, obj: Path, copies: int = 1) -> None:
        self.proc = subprocess.Popen(
            [str(ensure_loader()), "hold", str(obj), "--copies", str(copies)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.progs: list[dict] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            doc = json.loads(line)
            if doc.get("ready"):
                break
            self.progs.append(doc)
        else:
            raise RuntimeError("loader hold ended before ready")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(60)

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def loader_json(*args: str, cpu: int | None = None) -> dict:
    """The loader's last JSON line; cpu: run it on that CPU only (its records go to that
    CPU's side-band ring)."""
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    out = subprocess.run(
        [str(ensure_loader()), *args], capture_output=True, text=True, check=True, timeout=300,
        preexec_fn=pin,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])
