"""Helpers for bench/ scripts: time a command, print bpfsym's speed as a ratio to perf's."""

from __future__ import annotations

import subprocess
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
