"""Show what a side file captured: programs, functions, what was fetched, losses.

bpfsym dump [-i] perf.data.bpfsym [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bpfsym.formats.bpf import prog_type_name
from bpfsym.model import Capture, Program
from bpfsym.read.kallsyms import capture_kernel_symbols
from bpfsym.read.sidefile import read_capture


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", help="side file (default perf.data.bpfsym)")
    p.add_argument("-i", "--input", dest="input", help="side file")
    p.add_argument("--json", action="store_true", help="one JSON document")


def run(args: argparse.Namespace) -> int:
    path = args.input or args.path or "perf.data.bpfsym"
    cap = read_capture(path)
    if args.json:
        json.dump(to_json(cap), sys.stdout, indent=1)
        print()
    else:
        render(cap, path)
    return 0


def captured(p: Program) -> dict[str, str]:
    """yes, or no with the reason, per kind of data."""
    why = p.missing or "not in bpf_prog_info"
    return {
        "image": "yes" if p.has_image else f"no ({p.missing or 'no JIT image'})",
        "btf": "yes" if p.btf else f"no ({why if p.btf_id else 'program has no BTF'})",
        "lines": "yes" if p.lines else f"no ({why if p.btf_id else 'program has no line info'})",
    }


def to_json(cap: Capture) -> dict[str, Any]:
    h = cap.header
    return {
        "header": vars(h),
        "sysctls": cap.sysctls,
        "lost": cap.lost,
        "torn": cap.torn,
        "warnings": cap.warnings,
        "kallsyms": len(capture_kernel_symbols(cap)),
        "programs": [
            {
                "id": p.id,
                "type": prog_type_name(p.type) if p.type >= 0 else "unknown",
                "name": p.name,
                "tag": p.tag,
                "origin": p.origin,
                "load_time": p.load_time,
                "unload_time": p.unload_time,
                "captured": captured(p),
                "functions": [
                    {"name": f.name, "addr": f.addr, "size": f.size, "image": f.image is not None}
                    for f in p.functions
                ],
                "lines": len(p.lines),
                "map_ids": p.map_ids,
            }
            for p in cap.programs
        ],
    }


def _t(ns: int | None, start: int, none: str) -> str:
    return none if ns is None else f"{(ns - start) / 1e9:+.6f}s"


def render(cap: Capture, path: str) -> None:
    h = cap.header
    print(f"# side file: {path}")
    print(f"# host {h.hostname}, kernel {h.kernel_release} {h.arch}, boot {h.boot_id}")
    print(
        f"# {len(cap.programs)} programs, {len(capture_kernel_symbols(cap))} kernel symbols, {cap.lost} lost side-band records"
    )
    for k, v in sorted(cap.sysctls.items()):
        print(f"# {k} = {v}")
    if cap.torn:
        print(f"# WARNING: {cap.torn} (writer was killed; earlier records are intact)")
    for w in cap.warnings:
        print(f"# note: {w}")
    print()
    start = h.start_time
    for p in cap.programs:
        typ = prog_type_name(p.type) if p.type >= 0 else "unknown"
        c = captured(p)
        life = f"{_t(p.load_time, start, 'before')} .. {_t(p.unload_time, start, 'end')}"
        print(f"{p.id:>6}  {typ:<14} {p.name or '-':<16} tag {p.tag}  {p.origin:<8} {life}")
        print(f"        image {c['image']}, btf {c['btf']}, lines {c['lines']}")
        for f in p.functions:
            print(f"        {f.addr:016x} {f.size:>6}  {f.name}")
