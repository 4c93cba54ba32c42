"""Write a kallsyms file with every BPF function a capture saw, for perf report --kallsyms.

The side file's kernel snapshot comes first, then one `[bpf]` line per BPF
function seen during the capture, also those unloaded long before. A kallsyms
file has no notion of time: functions that reused a JIT address all appear,
in load order.
"""

from __future__ import annotations

import argparse
import os
import sys

from bpfsym.model import Capture
from bpfsym.read.kallsyms import capture_kernel_symbols

EPILOG = """examples:
  bpfsym kallsyms -i perf.data.bpfsym -o ksyms
  perf report --kallsyms=ksyms --stdio
"""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--input", default="perf.data.bpfsym", help="side file to read")
    p.add_argument("-o", "--output", default="-", help="kallsyms file to write ('-': stdout)")


def kallsyms_lines(cap: Capture) -> list[str]:
    """The kallsyms text of a capture: kernel snapshot, then BPF functions by load time."""
    out = []
    for s in capture_kernel_symbols(cap):
        mod = f"\t[{s.module}]" if s.module else ""
        out.append(f"{s.addr:016x} {s.type} {s.name}{mod}\n")
    progs = sorted(cap.programs, key=lambda p: (p.load_time is not None, p.load_time or 0, p.id))
    for p in progs:
        for fn in p.functions:
            out.append(f"{fn.addr:016x} t {fn.name}\t[bpf]\n")
    return out


def run(args: argparse.Namespace) -> int:
    from bpfsym.read.sidefile import read_capture

    cap = read_capture(args.input)
    text = "".join(kallsyms_lines(cap))
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    tmp = args.output + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # kernel addresses
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, args.output)
    return 0
