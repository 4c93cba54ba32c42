"""Reading `perf report --stdio` style text (perf's own and bpfsym's) in tests."""

from __future__ import annotations

import functools
import lzma
import os
import re
import tempfile

# a JIT-ed BPF function's kallsyms name, as a `[k] ` symbol cell; kernel functions
# such as bpf_prog_fill_jited_linfo share the bpf_prog_ prefix but not the tag
BPF_FUNC = re.compile(r"\[k\] bpf_prog_[0-9a-f]{16}(?:_|$)")


def is_bpf_func(cell: str) -> bool:
    return BPF_FUNC.match(cell) is not None


def sections(text: str) -> dict[str, dict[str, float]]:
    """perf-style --sort sym output -> {event: {symbol: percent}} (symbols summed)."""
    out: dict[str, dict[str, float]] = {}
    cur: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"# Samples: \S+\s+of event '([^']+)'", line)
        if m:
            cur = out.setdefault(m.group(1), {})
            continue
        m = re.match(r"\s+([\d.]+)%\s+(\[.\] \S.*?)\s*$", line)
        if m:
            cur[m.group(2)] = cur.get(m.group(2), 0.0) + float(m.group(1))
    return out


def event_counts(text: str) -> dict[str, int]:
    return {
        ev: int(n)
        for ev, n in re.findall(r"of event '([^']+)'\n# Event count \(approx\.\): (\d+)", text)
    }


FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "perfdata")


@functools.cache
def fixture_kallsyms(where: str | None = None) -> str:
    """The kernel kallsyms of the boot the perf.data fixtures were recorded in (record.py
    keeps it as kallsyms.xz), as a plain file for `--kallsyms` (in where, else in a new
    temporary directory): the fixtures carry their own kernel names, and no test depends
    on the kernel it runs on."""
    out = os.path.join(where or tempfile.mkdtemp(prefix="bpfsym-fixture-"), "kallsyms")
    with lzma.open(os.path.join(FIXTURES, "kallsyms.xz"), "rb") as f, open(out, "wb") as o:
        o.write(f.read())
    return out
