"""bpfsym top: live run time per BPF program, from run_time_ns / run_cnt deltas.

Statistics stay on through a BPF_ENABLE_RUNTIME_STATS fd held for as long as
top runs (kernel.bpf_stats_enabled is never written). Every refresh reads all
programs' counters and subtracts the previous refresh's: a program that loaded
after the previous refresh counts from zero; one that existed then but was not
seen (a race with the previous pass) is shown from the next refresh. Output:
a curses view on a terminal, or batch text, JSON lines or CSV (docs/top.md).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import time
from typing import Any, TextIO

from bpfsym.formats.bpf import PROG_TYPES
from bpfsym.live.stats import RuntimeStats, StatsUnavailable
from bpfsym.top.render import (
    LineCache,
    csv_lines,
    refresh_json,
    sort_column,
    summary,
    table,
)
from bpfsym.top.rows import _DESCENDING, _LONG_TYPES, SORT_KEYS, Filter, Refresh, Top, View


def _batch(args: argparse.Namespace, view: View, out: TextIO) -> int:
    with Top() as top:
        return _batch_loop(top, args, view, out)


def _batch_loop(top: Top, args: argparse.Namespace, view: View, out: TextIO) -> int:
    n = 0
    lines = LineCache()
    deadline = time.monotonic()
    while args.count is None or n < args.count:
        deadline += args.interval
        time.sleep(max(0.0, deadline - time.monotonic()))
        ref = top.refresh()
        rows = view.apply(ref.rows)
        if args.json:
            out.write(refresh_json(ref, rows, view.sort) + "\n")
        elif args.csv:
            out.write(csv_lines(ref, rows, header=n == 0))
        else:
            if n:
                out.write("\n")
            out.write(summary(ref, len(rows)) + "\n")
            out.write("\n".join(table(rows, view.wide, lines)) + "\n")
        out.flush()
        n += 1
    return 0


def _tty(args: argparse.Namespace, view: View) -> int:
    import curses

    def prompt(scr: Any, text: str) -> str | None:
        h, w = scr.getmaxyx()
        buf = ""
        scr.timeout(-1)
        while True:
            scr.move(h - 1, 0)
            scr.clrtoeol()
            scr.addnstr(h - 1, 0, text + buf, w - 1)
            scr.refresh()
            ch = scr.get_wch()
            if ch in ("\n", "\r", curses.KEY_ENTER):
                return buf
            if ch == "\x1b":
                return None
            if ch in ("\x7f", "\b", curses.KEY_BACKSPACE):
                buf = buf[:-1]
            elif isinstance(ch, str) and ch.isprintable():
                buf += ch

    line_cache = LineCache()

    def draw(scr: Any, ref: Refresh | None, waiting: int) -> None:
        scr.erase()
        h, w = scr.getmaxyx()
        keys = "q quit  space refresh  s/< > sort  r reverse  / filter  w wide"
        order = "descending" if (view.sort in _DESCENDING) != view.reverse else "ascending"
        top_line = f"bpfsym top - every {args.interval:g}s - sort {view.sort} {order}"
        if view.filter.describe():
            top_line += f" - filter {view.filter.describe()}"
        scr.addnstr(0, 0, top_line, w - 1, curses.A_BOLD)
        if ref is None:
            scr.addnstr(1, 0, f"{waiting} programs; first figures after one interval", w - 1)
            scr.addnstr(2, 0, keys, w - 1)
            scr.refresh()
            return
        rows = view.apply(ref.rows)
        scr.addnstr(1, 0, summary(ref, len(rows)), w - 1)
        scr.addnstr(2, 0, keys, w - 1)
        lines = table(rows, view.wide, line_cache)
        scr.addnstr(3, 0, lines[0].ljust(w - 1), w - 1, curses.A_REVERSE)
        if not view.wide:
            x, width = sort_column(view.sort)
            if x < w - 1:
                scr.chgat(
                    3,
                    x,
                    min(width, w - 1 - x),
                    curses.A_REVERSE | curses.A_BOLD | curses.A_UNDERLINE,
                )
        for y, line in enumerate(lines[1 : max(0, h - 4) + 1], start=4):
            scr.addnstr(y, 0, line, w - 1)
        scr.refresh()

    def main(scr: Any) -> int:
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        with Top() as top:
            return loop(scr, top)

    def loop(scr: Any, top: Top) -> int:
        ref: Refresh | None = None
        n = 0
        due = time.monotonic() + args.interval
        while args.count is None or n < args.count:
            try:
                draw(scr, ref, len(top.prev.progs))
            except curses.error:
                pass  # a terminal too small for the lines drawn so far: show what fits
            scr.timeout(max(0, int((due - time.monotonic()) * 1000)))
            ch = scr.getch()
            if ch == -1 or ch == ord(" "):
                if ch == -1 and time.monotonic() < due:
                    continue
                ref = top.refresh()
                n += 1
                due = time.monotonic() + args.interval
            elif ch in (ord("q"), ord("Q")):
                break
            elif ch in (ord("s"), ord(">"), curses.KEY_RIGHT):
                view.sort = SORT_KEYS[(SORT_KEYS.index(view.sort) + 1) % len(SORT_KEYS)]
            elif ch in (ord("<"), curses.KEY_LEFT):
                view.sort = SORT_KEYS[(SORT_KEYS.index(view.sort) - 1) % len(SORT_KEYS)]
            elif ch == ord("r"):
                view.reverse = not view.reverse
            elif ch == ord("w"):
                view.wide = not view.wide
            elif ch == ord("/"):
                text = prompt(scr, "filter by name (empty: none): ")
                if text is not None:
                    view.filter.names = [text] if text else []
        return 0

    return int(curses.wrapper(main))


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return v


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return int(text)


def _prog_type(text: str) -> str:
    t = _LONG_TYPES.get(text, text)
    if t not in PROG_TYPES:
        raise argparse.ArgumentTypeError(
            f"unknown program type {text!r} (bpftool's names: xdp, ...)"
        )
    return t


def _ids(text: str) -> list[int]:
    parts = [p for p in text.split(",") if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"not an id list: {text!r}")
    return [int(p) for p in parts]


EPILOG = """\
examples:
  bpfsym top                     # full-screen view, refreshed every second
  bpfsym top -s avg --type xdp   # XDP programs, slowest per run first
  bpfsym top -b 5 3              # batch text: three refreshes, five seconds apart
  bpfsym top -b -n 3 --json      # JSON lines (fields: docs/top.md)
  bpfsym top --csv --pid 1234    # CSV rows of the programs process 1234 holds
  bpfsym top --serve 9101        # Prometheus/OpenMetrics endpoint, 127.0.0.1:9101/metrics

%1CPU is the share of one CPU a program used (can exceed 100); %ALL is the share
of all online CPUs. Keys: s or < > change the sort column, r reverses it,
/ filters by name, w toggles the wide view, space refreshes now, q quits.
"""


def configure(p: argparse.ArgumentParser) -> None:
    p.description = "Live run time per BPF program (BPF_ENABLE_RUNTIME_STATS)."
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "-b", "--batch", action="store_true", help="batch mode: print, no screen control"
    )
    p.add_argument(
        "-n", "--iterations", type=_positive_int, metavar="COUNT", help="stop after COUNT refreshes"
    )
    p.add_argument(
        "-d",
        "--delay",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds between refreshes (default 1)",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="batch: one JSON object per refresh")
    fmt.add_argument(
        "--csv", action="store_true", help="batch: one CSV row per program and refresh"
    )
    p.add_argument(
        "-w", "--wide", action="store_true", help="all columns, kallsyms names, processes"
    )
    p.add_argument(
        "-s",
        "--sort",
        choices=SORT_KEYS,
        default="cpu",
        metavar="KEY",
        help=f"sort by {', '.join(SORT_KEYS)} (default cpu)",
    )
    p.add_argument("-r", "--reverse", action="store_true", help="reverse the sort order")
    p.add_argument(
        "--name",
        action="append",
        default=[],
        metavar="SUBSTR",
        help="programs whose name contains SUBSTR",
    )
    p.add_argument(
        "--type",
        action="append",
        default=[],
        type=_prog_type,
        metavar="TYPE",
        help="programs of this type (xdp, socket_filter, ...)",
    )
    p.add_argument(
        "--id",
        action="append",
        default=[],
        type=_ids,
        metavar="ID[,ID]",
        help="only these program ids",
    )
    p.add_argument(
        "--pid",
        action="append",
        default=[],
        type=_positive_int,
        metavar="PID",
        help="programs held open by process PID",
    )
    p.add_argument(
        "--serve",
        type=_listen,
        metavar="[ADDR:]PORT",
        help="serve every program's counters to Prometheus at http://ADDR:PORT/metrics"
        " (ADDR 127.0.0.1 unless given) instead of showing them",
    )
    p.add_argument("interval", nargs="?", type=_positive_float, help="seconds between refreshes")
    p.add_argument("count", nargs="?", type=_positive_int, help="number of refreshes")


def _listen(text: str) -> tuple[str, int]:
    # imported for --serve only: asyncio and prometheus-client take ~0.1 s to import
    try:
        from bpfsym.top.serve import parse_listen
    except ImportError as e:
        raise argparse.ArgumentTypeError(f"--serve needs the {e.name} package") from None
    return parse_listen(text)


_NOT_WITH_SERVE = ("batch", "iterations", "delay", "json", "csv", "wide", "reverse",
                   "name", "type", "id", "pid", "interval", "count")  # fmt: skip


def _settle(args: argparse.Namespace) -> str:
    """Merge -d/-n with the positional [interval [count]]; an error message or ""."""
    if args.delay is not None and args.interval is not None:
        return "give the interval either as -d or as a positional argument"
    if args.iterations is not None and args.count is not None:
        return "give the count either as -n or as a positional argument"
    args.interval = args.interval or args.delay or 1.0
    args.count = args.count or args.iterations
    return ""


class _Stop(Exception):
    pass


def _on_term(signum: int, frame: object) -> None:
    raise _Stop


def run(args: argparse.Namespace) -> int:
    if args.serve is not None:
        if [k for k in _NOT_WITH_SERVE if getattr(args, k)] or args.sort != "cpu":
            print(
                "bpfsym top: --serve exports every program; it takes no display or filter options",
                file=sys.stderr,
            )
            return 2
        from bpfsym.top.serve import serve

        return serve(*args.serve)
    problem = _settle(args)
    if problem:
        print(f"bpfsym top: {problem}", file=sys.stderr)
        return 2
    view = View(
        Filter(args.name, args.type, [i for ids in args.id for i in ids], args.pid),
        args.sort,
        args.reverse,
        args.wide,
    )
    batch = args.batch or args.json or args.csv or not (sys.stdout.isatty() and sys.stdin.isatty())
    old = signal.signal(signal.SIGTERM, _on_term)
    try:
        with RuntimeStats():
            return _batch(args, view, sys.stdout) if batch else _tty(args, view)
    except StatsUnavailable as e:
        print(f"bpfsym top: {e}", file=sys.stderr)
        return 1
    except PermissionError:
        print("bpfsym top: listing BPF programs needs CAP_SYS_ADMIN (run as root)", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, _Stop):
        return 0
    except BrokenPipeError:
        # the reader went away (| head): stop quietly, and keep Python's exit flush quiet too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        if e.errno == errno.EPERM:
            print(
                "bpfsym top: listing BPF programs needs CAP_SYS_ADMIN (run as root)",
                file=sys.stderr,
            )
            return 1
        raise
    finally:
        signal.signal(signal.SIGTERM, old)
