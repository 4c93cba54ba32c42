"""Helpers for bench/ scripts: time a command, print bpfsym's speed as a ratio to perf's."""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence


def timed(cmd: Sequence[str], repeat: int = 3, cwd: str | None = None) -> float:
    """Best wall time in seconds of `repeat` runs of cmd (output discarded; must succeed)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(
            list(cmd), cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        best = min(best, time.perf_counter() - t0)
    return best


def print_ratio(label: str, ours: float, theirs: float) -> float:
    """Print 'label: ours s / theirs s = ratio x' and return the ratio (< 1: bpfsym faster)."""
    ratio = ours / theirs if theirs > 0 else float("inf")
    print(f"{label}: bpfsym {ours:.2f} s / perf {theirs:.2f} s = {ratio:.2f}x")
    return ratio


def input_file(parser: argparse.ArgumentParser, path: str) -> str:
    """path made absolute (the scripts run bpfsym from a checkout's directory, where a
    relative path names nothing), or the parser's one-line error (exit 2) when it names
    no file."""
    full = os.path.abspath(path)
    if not os.path.isfile(full):
        parser.error(f"{path}: no such file")
    return full


def data_file(
    parser: argparse.ArgumentParser, given: str | None, output: str | None, default: str
) -> tuple[str, bool]:
    """The perf.data to time, as an absolute path, and whether it is still to be recorded:
    the one given (-i, which must exist), else where to record (-o, else `default` in the
    temp directory)."""
    if given is not None:
        return input_file(parser, given), False
    return os.path.abspath(output or os.path.join(tempfile.gettempdir(), default)), True


@functools.cache
def _subreaper() -> bool:
    """Make this process the one orphans of its children are given to (Linux prctl
    PR_SET_CHILD_SUBREAPER), once; whether it is."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def run_once(cmd: Sequence[str], cwd: str | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of cmd, output discarded; CPU is user + system
    time of the process and of every process it started: a report's second reader too,
    which the report leaves to exit on its own (reaped on a thread that its exit may
    outrun). Orphans come to this process (a subreaper) and are waited for after the
    wall time is taken: its callers start no other process that outlives a run."""
    reaps = _subreaper()
    t0 = time.perf_counter()
    p = subprocess.Popen(list(cmd), cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    cpu = ru.ru_utime + ru.ru_stime
    while reaps:
        try:
            _, _, orphan = os.wait4(-1, 0)
        except ChildProcessError:
            break
        cpu += orphan.ru_utime + orphan.ru_stime
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise subprocess.CalledProcessError(p.returncode, list(cmd))
    return wall, cpu


def interleaved(
    cmds: dict[str, tuple[Sequence[str], str | None]], runs: int
) -> dict[str, list[tuple[float, float]]]:
    """name -> [(wall, CPU)] of `runs` rounds, each running every command once in turn
    (so that a burst of load on a shared machine falls on all of them alike)."""
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, (cmd, cwd) in cmds.items():
            out[name].append(run_once(cmd, cwd))
    return out


def print_interleaved(label: str, ours: list[tuple[float, float]],
                      theirs: list[tuple[float, float]], anchor: str = "perf") -> dict[str, float]:  # fmt: skip
    """Print min and median wall and CPU of both and their ratios (< 1: bpfsym faster);
    return the ratios."""

    def stats(runs: list[tuple[float, float]], k: int) -> tuple[float, float]:
        xs = [r[k] for r in runs]
        return min(xs), statistics.median(xs)

    out = {}
    for k, what in ((0, "wall"), (1, "CPU")):
        (o_min, o_med), (t_min, t_med) = stats(ours, k), stats(theirs, k)
        r_min, r_med = o_min / t_min, o_med / t_med
        out[f"{what} min"], out[f"{what} median"] = r_min, r_med
        print(
            f"{label} {what:4}: bpfsym min {o_min:.3f} s median {o_med:.3f} s / {anchor} min"
            f" {t_min:.3f} s median {t_med:.3f} s = {r_min:.2f}x / {r_med:.2f}x"
            f" ({len(ours)} runs)"
        )
    return out


def print_per_round(label: str, runs: dict[str, list[tuple[float, float]]]) -> None:
    """Each bpfsym code's wall time over the anchor's round by round (min / median / max)
    and, with several codes in the same rounds, the first one's over each other's.
    A shared VM's speed drifts between rounds (perf's own time moved 30 % within one
    here); ratios taken within a round cancel what the round shares."""
    names = [n for n in runs if n != "perf"]
    walls = {n: [r[0] for r in runs[n]] for n in runs}
    for n in names:
        r = [a / b for a, b in zip(walls[n], walls["perf"], strict=True)]
        print(
            f"{label}, {n} / perf by round: min {min(r):.2f}x median"
            f" {statistics.median(r):.2f}x max {max(r):.2f}x"
        )
    for n in names[1:]:
        r = [a / b for a, b in zip(walls[names[0]], walls[n], strict=True)]
        print(f"{label}, {names[0]} / {n} by round: median {statistics.median(r):.2f}x")


def startup_commands(where: str | None) -> dict[str, tuple[Sequence[str], str | None]]:
    """The start-up floor, to interleave with a comparison: the interpreter without the
    site module (python -S: no site-packages, no .pth files run), the interpreter alone
    (with this host's site-packages and the .pth files there, which any Python program on
    it runs first) and bpfsym's --version (the interpreter and the command line's
    imports)."""
    import sys

    return {
        "python -S": ([sys.executable, "-S", "-c", "pass"], where),
        "python": ([sys.executable, "-c", "pass"], where),
        "bpfsym --version": ([sys.executable, "-m", "bpfsym", "--version"], where),
    }


def print_startup(
    got: dict[str, list[tuple[float, float]]], anchor: list[tuple[float, float]]
) -> None:
    """Print the start-up floor's wall time, min / median, and its share of the anchor's."""
    a_min, a_med = min(r[0] for r in anchor), statistics.median(r[0] for r in anchor)
    for name in ("python -S", "python", "bpfsym --version"):
        xs = [r[0] for r in got[name]]
        lo, med = min(xs), statistics.median(xs)
        print(
            f"start-up floor, {name}: min {lo:.3f} s median {med:.3f} s"
            f" = {lo / a_min:.2f}x / {med / a_med:.2f}x of perf's run"
        )


def kernel_kallsyms(where: str) -> str:
    """The /proc/kallsyms lines up to the first BPF one, in a file in directory where.

    Given to perf report (--kallsyms): reading /proc/kallsyms itself costs time quadratic
    in the BPF programs loaded (by anyone on the machine), which would make perf's figure
    depend on what else runs; bpfsym's readers stop at the first BPF line."""
    out = os.path.join(where, "kallsyms")
    with open("/proc/kallsyms") as f, open(out, "w") as o:
        for line in f:
            if line.rstrip().endswith("[bpf]"):
                break
            o.write(line)
    return out


def count_samples(path: str) -> int:
    """The SAMPLE records of a perf.data, as `perf report --stats` counts them."""
    out = subprocess.run(
        ["perf", "report", "-i", path, "--stats"], capture_output=True, text=True, check=True
    ).stdout
    for line in out.splitlines():
        if line.strip().startswith("SAMPLE events:"):
            return int(line.split()[2])
    return 0
