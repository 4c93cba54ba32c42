"""Run a command under perf record and capture every BPF program beside it.

    bpfsym record [bpfsym options] [perf record options] -- command [args]

Every option bpfsym does not know is a perf record option, checked against the
installed perf and passed to it unchanged. The side file is <output>.bpfsym.

Light at import: run() starts the pinner and the kallsyms reader (live/prestart.py)
before it imports the recorder, so that their start overlaps record's own.
"""

from __future__ import annotations

import argparse
import os
import shutil
from typing import TYPE_CHECKING

from bpfsym.capture.args import RecordArgs
from bpfsym.errors import UsageError

if TYPE_CHECKING:
    from bpfsym.live.prestart import Prestart

EPILOG = """bpfsym options (all others before '--' go to perf record unchanged):
  --no-perf           do not run perf: capture BPF programs only (side file <output>.bpfsym)
  --side FILE         side file name (default: <perf output>.bpfsym)
  --perf PATH         perf binary (default: perf from PATH)
  --ring-pages N      side-band ring pages per CPU (power of 2, default 64)
  --stats[=SECONDS]   sample per-program runtime stats every SECONDS (default 1)
  --no-perf-namespace run perf as it is; by default perf runs in a private mount
                      namespace (util-linux unshare, nsenter) whose /proc/kallsyms holds
                      the kernel part and the trampoline/dispatcher lines, which makes
                      its start and stop fast with thousands of BPF programs; the command
                      itself sees the real /proc/kallsyms. Where that cannot be done,
                      perf runs as it is and record says so in one line

perf's side-band thread is woken at the end by loading and closing a tiny socket
filter named bpfsym_wake every 20 ms until perf exits: perf.data (and the side file)
hold them as programs that never ran; the summary counts them apart.

examples:
  bpfsym record -o perf.data -F 999 -a -g -- ./my-workload
  bpfsym record --no-perf -o cap -- sleep 30
  bpfsym record --stats=0.5 -e cpu-clock -a -- ./bench
"""

RAW_ARGS = True  # cli: pass everything after "record" to run() unparsed


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("argv", nargs=argparse.REMAINDER, help="[options] -- command [args]")


def parse(argv: list[str]) -> RecordArgs:
    """Split bpfsym's own options from perf's; the command follows '--'."""
    if "--" in argv:
        cut = argv.index("--")
        opts, cmd = argv[:cut], argv[cut + 1 :]
    else:
        opts, cmd = argv, []
    r = RecordArgs(command=cmd)
    i = 0
    while i < len(opts):
        a = opts[i]
        name, eq, value = a.partition("=")
        if name in ("--side", "--perf", "--ring-pages") and not eq:
            if i + 1 >= len(opts):
                raise UsageError(f"option '{name}' needs a value")
            i += 1
            value = opts[i]

        if a == "--no-perf":
            r.no_perf = True
        elif a == "--no-perf-namespace":
            r.perf_namespace = False
        elif name == "--side":
            r.side = value
        elif name == "--perf":
            r.perf = value
        elif name == "--ring-pages":
            v = value
            if not v.isdigit() or int(v) < 1 or int(v) & (int(v) - 1):
                raise UsageError(f"--ring-pages {v}: must be a power of 2")
            r.ring_pages = int(v)
        elif name == "--stats":
            try:
                r.stats = float(value) if eq else 1.0
            except ValueError:
                raise UsageError(f"--stats={value}: not a number of seconds") from None
            if r.stats <= 0:
                raise UsageError("--stats interval must be > 0")
        else:
            r.perf_args.append(a)
        i += 1
    if not r.command:
        raise UsageError("no command: bpfsym record [options] -- command [args]")
    return r


def run(args: argparse.Namespace) -> int:
    r = parse(list(args.argv))
    from bpfsym.live.prestart import Prestart

    early = Prestart()  # first: they start while the rest imports and checks
    try:
        return _run(r, early)
    finally:
        early.cancel()  # what the recorder did not take (a usage error, say)


def _run(r: RecordArgs, early: Prestart) -> int:
    from bpfsym.capture import perf_options as perfopts
    from bpfsym.capture.recorder import _StatsSampler, record
    from bpfsym.live import progs
    from bpfsym.read.sidefile import SideFileWriter

    perf_opts = perfopts.PerfOptions(r.perf_args)
    if not r.no_perf:
        perf = shutil.which(r.perf)
        if perf is None:
            raise UsageError(
                f"perf not found ('{r.perf}'): install linux-perf, or use --perf PATH or --no-perf"
            )
        r.perf = perf
        perf_opts = perfopts.check(r.perf_args, perfopts.option_table(perf))
        if perf_opts.errors:
            raise UsageError(perf_opts.errors[0])
    elif r.perf_args:
        perf_opts = perfopts.check(
            r.perf_args,
            perfopts.OptionTable({"-o": True, "--output": True, "-k": True, "--clockid": True}),
        )
        if perf_opts.errors:
            raise UsageError(perf_opts.errors[0] + " (with --no-perf only -o and -k apply)")
    if shutil.which(r.command[0]) is None and not os.path.exists(r.command[0]):
        raise UsageError(f"command not found: {r.command[0]}")
    side = r.side or perf_opts.output + ".bpfsym"
    if os.geteuid() != 0:
        # perf_event_open system-wide and bpf(PROG_GET_NEXT_ID) need privilege; say which
        try:
            next(progs.iter_ids(), None)
        except OSError as e:
            raise PermissionError(
                e.errno, "bpf(BPF_PROG_GET_NEXT_ID): needs CAP_SYS_ADMIN"
            ) from None
    stats = _StatsSampler(r.stats) if r.stats is not None else None
    writer = SideFileWriter(side)
    try:
        return record(r, perf_opts, writer, stats, early)
    finally:
        writer.close()
