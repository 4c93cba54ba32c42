"""perf report's sample filters: --comms, --pid, --tid, --cpu, --time.

Two kinds, as perf 6.1 applies them (builtin-report.c process_sample_event):

- dropped before any total (--cpu, --time): the sample is not counted at all, so the
  "# Samples:" line, the event count and every percentage are of what is left;
- hidden (--comms, --pid, --tid): the sample counts in its event's totals but makes no
  row and no call-graph stack (perf marks the hist entry filtered, HIST_FILTER__THREAD,
  and prints percentages of the whole: `--percentage absolute`, its default in 6.1).

The command line's text is parsed once into a Filters (kept in the ReportQuery); a pass
turns it into a SampleFilter against the file it reads (--time percentages need the
recorded first and last sample times, --cpu the number of CPUs the file had), and asks
it per sample (record by record) or per array of samples (numpy).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bpfsym.errors import UsageError

NSEC = 1_000_000_000


@dataclass(frozen=True)
class Filters:
    """What the command line asked to filter (None: that filter is off)."""

    comms: frozenset[str] | None = None
    pids: frozenset[int] | None = None
    tids: frozenset[int] | None = None
    cpus: frozenset[int] | None = None
    time: str | None = None  # --time as given (also printed after the event name)

    @property
    def hides(self) -> bool:
        return self.comms is not None or self.pids is not None or self.tids is not None

    @property
    def any(self) -> bool:
        return self.hides or self.cpus is not None or self.time is not None


NO_FILTERS = Filters()


def comm_list(text: str) -> frozenset[str]:
    """--comms a,b: exact comm names (perf's strlist: commas separate)."""
    names = frozenset(x for x in text.split(",") if x)
    if not names:
        raise ValueError("empty comm list")
    return names


def int_list(text: str) -> frozenset[int]:
    """--pid / --tid 1,2: decimal ids (perf's intlist)."""
    out = set()
    for x in re.split(r"[,\s]+", text.strip()):
        if not re.fullmatch(r"\d+", x):
            raise ValueError(f"not a number: {x!r}")
        out.add(int(x))
    return frozenset(out)


def cpu_list(text: str) -> frozenset[int]:
    """--cpu 0-2,5: CPUs and inclusive ranges (perf_cpu_map__new's syntax)."""
    out: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None:
            raise ValueError(f"invalid cpu list {text!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo or hi >= 1 << 16:
            raise ValueError(f"invalid cpu list {text!r}")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def parse_nsec(text: str) -> int:
    """'sec[.fraction]' (up to 9 digits of fraction) in nanoseconds (perf's parse_nsec_time)."""
    m = re.fullmatch(r"(\d+)(?:\.(\d{0,9}))?", text.strip())
    if m is None:
        raise ValueError(f"invalid time {text!r}")
    frac = (m.group(2) or "").ljust(9, "0")
    return int(m.group(1)) * NSEC + int(frac)


def absolute_range(text: str) -> tuple[int, int]:
    """'start,stop', 'start,' or ',stop': nanoseconds, 0 for an open end."""
    if text.count(",") != 1:
        raise ValueError(f"invalid time range {text!r}: want start,stop")
    a, b = text.split(",")
    start = parse_nsec(a) if a.strip() else 0
    stop = parse_nsec(b) if b.strip() else 0
    if start and stop and stop < start:
        raise ValueError(f"invalid time range {text!r}: stop before start")
    return start, stop


def percent_parts(text: str) -> list[tuple[float, float]]:
    """'10%/2' (the 2nd tenth), '0%-10%', several comma separated: (start, end) fractions
    (perf's time-utils.c percent_slash_split and percent_dash_split)."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)%/(\d+)\s*", part)
        if m is not None:
            p, i = float(m.group(1)) / 100.0, int(m.group(2))
            if i < 1:
                raise ValueError(f"invalid time slice {part!r}")
            a, b = p * (i - 1), p * i
        else:
            m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)%-(\d+(?:\.\d*)?)%\s*", part)
            if m is None:
                raise ValueError(f"invalid time percent {part!r}")
            a, b = float(m.group(1)) / 100.0, float(m.group(2)) / 100.0
        if not (0.0 <= a <= 1.0 and 0.0 <= b <= 1.0) or b < a:
            raise ValueError(f"invalid time percent {part!r}")
        out.append((a, b))
    return out


def check_time(text: str) -> str:
    """--time's text, checked now so that a bad one fails before any file is read."""
    if "%" in text:
        percent_parts(text)
    else:
        absolute_range(text)
    return text


def time_ranges(text: str, sample_time: tuple[int, int] | None) -> list[tuple[int, int]]:
    """The --time windows in the file's clock: inclusive (start, stop) nanoseconds, 0 for
    an open end. Percentages are of the recorded first..last sample span (perf:
    set_percent_time, which ends a slice one nanosecond early unless at the last sample)."""
    if "%" not in text:
        return [absolute_range(text)]
    if sample_time is None or not sample_time[1]:
        raise UsageError(
            "--time with percentages needs the file's first and last sample times"
            " (HEADER_SAMPLE_TIME), which this perf.data does not have"
        )
    first, last = sample_time
    total = last - first
    out = []
    for a, b in percent_parts(text):
        start = first + round(a * total)
        end = first + round(b * total)
        if end > start and end != last:
            end -= 1
        out.append((start, end))
    return out


class SampleFilter:
    """The filters against one file: asked per sample or per array of samples."""

    def __init__(self, f: Filters, ranges: list[tuple[int, int]] | None) -> None:
        self.f = f
        self.comms = f.comms
        self.pids = f.pids
        self.tids = f.tids
        self.cpus = f.cpus
        self.ranges = ranges
        self.drops_any = f.cpus is not None or ranges is not None
        self.hides_any = f.hides

    @classmethod
    def of(cls, f: Filters, header: Any, attrs: list[Any]) -> SampleFilter | None:
        """The filter for a file whose header and attrs are read (None: no filter)."""
        if not f.any:
            return None
        if f.cpus is not None:
            from bpfsym.formats import perf as K

            if attrs and not any(a.sample_type & K.SAMPLE_CPU for a in attrs):
                raise UsageError("--cpu: the file's samples have no CPU (recorded without it)")
            avail = header.nrcpus[1] if header is not None else 0
            too_big = [c for c in sorted(f.cpus) if avail and c >= avail]
            if too_big:
                raise UsageError(f"--cpu: CPU {too_big[0]} is not in the file ({avail} CPUs)")
        ranges = None
        if f.time is not None:
            ranges = time_ranges(f.time, getattr(header, "sample_time", None))
        return cls(f, ranges)

    # ---- record by record ------------------------------------------------

    def drops(self, t: int, cpu: int) -> bool:
        """Whether a sample goes before any total (--cpu, --time)."""
        if self.cpus is not None and cpu not in self.cpus:
            return True
        if self.ranges is not None:
            for start, stop in self.ranges:
                if (not start or t >= start) and (not stop or t <= stop):
                    return False
            return True
        return False

    def hides(self, comm: str, pid: int, tid: int) -> bool:
        """Whether a counted sample makes no row (--comms, --pid, --tid)."""
        if self.comms is not None and comm not in self.comms:
            return True
        if self.pids is not None and pid not in self.pids:
            return True
        return self.tids is not None and tid not in self.tids

    # ---- numpy -----------------------------------------------------------

    def keep(self, np: Any, samples: dict[str, Any]) -> dict[str, Any]:
        """The samples not dropped (every per-sample array cut alike)."""
        n = len(samples["t"])
        keep = np.ones(n, dtype=bool)
        if self.cpus is not None:
            keep &= np.isin(samples["cpu"], np.array(sorted(self.cpus), dtype=np.int64))
        if self.ranges is not None:
            t = samples["t"]
            inside = np.zeros(n, dtype=bool)
            for start, stop in self.ranges:
                w = np.ones(n, dtype=bool)
                if start:
                    w &= t >= np.uint64(start)
                if stop:
                    w &= t <= np.uint64(stop)
                inside |= w
            keep &= inside
        if bool(keep.all()):
            return samples
        return {k: v[keep] if _per_sample(v, n) else v for k, v in samples.items()}

    def hidden(self, np: Any, samples: dict[str, Any], comm_of: Any, names: list[str]) -> Any:
        """Per sample, whether it makes no row (comm_of: each sample's comm id in names)."""
        n = len(samples["t"])
        hide = np.zeros(n, dtype=bool)
        if self.comms is not None:
            wanted = np.array([c in self.comms for c in names], dtype=bool)
            hide |= ~wanted[comm_of] if len(names) else np.ones(n, dtype=bool)
        if self.pids is not None:
            hide |= ~np.isin(samples["pid"], np.array(sorted(self.pids), dtype=np.uint64))
        if self.tids is not None:
            hide |= ~np.isin(samples["tid"], np.array(sorted(self.tids), dtype=np.uint64))
        return hide


def _per_sample(v: Any, n: int) -> bool:
    return hasattr(v, "shape") and len(v.shape) == 1 and v.shape[0] == n
