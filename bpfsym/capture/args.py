"""What `bpfsym record` was asked to do: its own options and the command (standard
library only: record parses them before it imports what it runs)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RecordArgs:
    perf_args: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    no_perf: bool = False
    side: str | None = None
    perf: str = "perf"
    ring_pages: int = 64
    stats: float | None = None
    perf_namespace: bool = True  # perf in a private mount namespace (live/perf_process.py)
