"""Does `bpfsym report` read a perf.data file as the installed perf does? The comparison library.

The reference is perf's own reading, made when asked (nothing is stored):

    perf report -i F --stdio --no-children -g none --sort KEYS -n \\
        --symfs EMPTY_DIR --no-branch-stack --no-group

and, for the call-graph totals, the same with ``--children`` (Children and Self columns, no
graph lines). bpfsym is run as ``python -P -m bpfsym report -i F --stdio --no-side --sort KEYS``
(plus ``-g`` for the totals, and ``--symfs EMPTY_DIR`` once `bpfsym report --help` lists
that option) with the interpreter running this module.

Agreement (``compare``):

- the same events, named alike, in the same order (perf's "# Samples: N of event 'NAME'"
  lines; perf prints "of events" for a group leader, and ``--no-group`` makes every file
  without HEADER_GROUP_DESC one group (builtin-report.c setup_forced_leader): the plural is
  not part of the name and is not compared);
- the same sample count per event as perf prints it: convert_unit() of
  tools/perf/util/units.c, 5617 -> "5K" (so a bpfsym count is compared after the same
  conversion);
- every perf row of at least 0.5 % matched by a bpfsym row of the same key (the sort-key
  cells, compared as the bytes both print) within 0.05 percentage points, per percent column
  (Overhead; Children and Self for the totals). Rows printed alike (perf's sort keys can
  tell apart what prints the same, e.g. two static functions of one name) are summed on
  both sides first.

Two things perf prints are read as perf means them, not as printed (docs/perf-compat.md):

- the Command column: perf cuts every comm to a width taken from each thread's latest
  comm (a perf bug: "perf-exec" shows as "perf-ex"), so bpfsym's comms are cut to the
  width of perf's column before they are compared;
- `--children` on a pipe-mode file: perf 6.1 decides about children before it has seen
  an attr and prints only "Overhead", the self share, which is compared with bpfsym's
  "Self".

Both tables are parsed by their dots line; the key cells of a row whose numeric columns
are wider than their headings (bpfsym -g today) are moved by the difference.

A file perf cannot read: perf exits non-zero, or prints no "# Samples:" section (perf 6.1
exits 0 after "Error: failed to process sample" in pipe mode, or "data has no samples!").
Then bpfsym agrees when it exits 0 (whatever it prints: a reader may be better than perf),
or exits 2 with exactly one line on stderr and no traceback. bpfsym exiting otherwise (a
traceback, status 1, a signal, a time-out) never agrees.

perf runs with HOME and its build-id cache pointed at an empty directory and no system
perfconfig, so what a user of this machine keeps in ~/.debug or ~/.perfconfig cannot change
the reference; ``--symfs`` an empty directory keeps the host's binaries out, and with a
symfs perf never reads this host's /proc/kallsyms (symbol.c dso__load_kernel_sym; without
one it would name foreign kernel samples from it: docs/perf-compat.md).

The tables are parsed as bytes: perf pads and truncates columns by bytes ("%-*.*s"), and
names in perf.data are bytes. Column boundaries come from the dots line under the headings.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

PERF = os.environ.get("BPFSYM_COMPAT_PERF", "perf")
TIMEOUT = 600  # seconds, for one perf or bpfsym run
MIN_PERCENT = 0.5  # perf rows below this need no match
TOLERANCE = 0.05  # percentage points
KEY_SETS = ("dso", "dso,sym", "comm,dso,sym")
CHILDREN_KEYS = "dso,sym"  # the key set of the call-graph totals comparison
PERCENT_HEADINGS = {"Overhead", "Children", "Self"}
COUNT_HEADINGS = {"Samples", "Period"}


def convert_unit(value: int) -> str:
    """A sample count as perf's '# Samples:' line prints it (tools/perf/util/units.c
    convert_unit_double: divided by 1000 in doubles while above 1000, then truncated;
    "%lu%c" with a space for no unit): 5617 -> "5K", 1000500 -> "1M" (not "1000K")."""
    v = float(value)
    unit = " "
    for u in "KMG":
        if v > 1000.0:
            v /= 1000.0
            unit = u
    return f"{int(v)}{unit}".rstrip()


@dataclass
class Row:
    key: tuple[str, ...]  # the sort-key cells, decoded with surrogateescape
    percents: dict[str, float]  # heading -> percent (Overhead / Children / Self)
    samples: int | None = None  # perf's -n column


@dataclass
class Section:
    """One event of a report: its "# Samples:" line and its rows."""

    event: str
    samples: str  # as printed: "5K", "923"
    plural: bool  # "of events"
    event_count: int | None = None
    headings: list[str] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)  # bytes of each column's dots
    rows: list[Row] = field(default_factory=list)

    def key_headings(self) -> list[str]:
        return [h for h in self.headings if h not in PERCENT_HEADINGS | COUNT_HEADINGS]

    def key_width(self, heading: str) -> int | None:
        """The width perf gave a key column (its dots), or None when there is none."""
        if heading not in self.headings or len(self.widths) != len(self.headings):
            return None
        return self.widths[self.headings.index(heading)]

    def totals(
        self, truncate: dict[int, int] | None = None
    ) -> dict[tuple[str, ...], dict[str, float]]:
        """Percent per key and column, rows of one key summed; truncate: key cell index ->
        bytes to cut that cell to first (perf's comm column, see compare_section)."""
        out: dict[tuple[str, ...], dict[str, float]] = {}
        for r in self.rows:
            key = r.key
            if truncate:
                key = tuple(_cut(c, truncate[i]) if i in truncate else c for i, c in enumerate(key))
            got = out.setdefault(key, {})
            for h, p in r.percents.items():
                got[h] = got.get(h, 0.0) + p
        return out


@dataclass
class Reading:
    """One report run: what it printed and the tables parsed from it."""

    tool: str
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes
    sections: list[Section]
    timed_out: bool = False

    @property
    def readable(self) -> bool:
        """perf read the file: exit 0 and at least one event table."""
        return self.returncode == 0 and not self.timed_out and bool(self.sections)

    def stderr_lines(self) -> list[str]:
        return self.stderr.decode("utf-8", "replace").splitlines()


@dataclass
class Verdict:
    ok: bool
    problems: list[str]
    perf_readable: bool

    def __bool__(self) -> bool:
        return self.ok

    def explain(self, limit: int = 40) -> str:
        lines = self.problems[:limit]
        if len(self.problems) > limit:
            lines.append(f"... and {len(self.problems) - limit} more")
        return "\n".join(lines)


SAMPLES_LINE = re.compile(rb"^# Samples: (\d+)([KMG]?) +of event(s?) '(.*)'")
COUNT_LINE = re.compile(rb"^# Event count \(approx\.\): (\d+)")
DOTS_LINE = re.compile(rb"^# \.+(  \.+)*\s*$")
ROW_START = re.compile(rb"^ +-?\d+\.\d+%")


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _cut(cell: str, width: int) -> str:
    return _decode(cell.encode("utf-8", "surrogateescape")[:width])


def _spans(dots: bytes) -> list[int]:
    """Start offset of each column, from the dots line ("# ......  ....")."""
    return [m.start() for m in re.finditer(rb"\.+", dots)]


def _cells(line: bytes, starts: list[int]) -> list[bytes]:
    """A row (or the headings line) cut at the column starts. The first column also holds
    the "# " of the heading lines (rows are aligned with it); the last runs to the end."""
    bounds = [0, *starts[1:], len(line)]
    return [line[bounds[i] : bounds[i + 1]] for i in range(len(starts))]


def parse_report(text: bytes) -> list[Section]:
    """perf report --stdio tables (perf's or bpfsym's) -> one Section per event.

    Lines that are not rows (call-graph lines under a row, comments, tips) are skipped: a
    row starts with a percentage after spaces, and its cells fall under the dots line.
    """
    sections: list[Section] = []
    cur: Section | None = None
    starts: list[int] = []
    prev = b""
    for line in text.split(b"\n"):
        m = SAMPLES_LINE.match(line)
        if m:
            cur = Section(
                event=_decode(m.group(4)),
                samples=_decode(m.group(1) + m.group(2)),
                plural=bool(m.group(3)),
            )
            sections.append(cur)
            starts = []
        elif cur is None:
            pass
        elif (c := COUNT_LINE.match(line)) is not None:
            cur.event_count = int(c.group(1))
        elif DOTS_LINE.match(line) and prev.startswith(b"# "):
            starts = _spans(line)
            cur.headings = [_decode(c.strip(b"# ")) for c in _cells(prev, starts)]
            cur.widths = [len(m.group(0)) for m in re.finditer(rb"\.+", line)]
        elif starts and ROW_START.match(line):
            cur.rows.append(_row(cur.headings, _cells(line, _shifted(line, starts, cur))))
        prev = line
    return sections


def _shifted(line: bytes, starts: list[int], sec: Section) -> list[int]:
    """Column starts for one row: the key columns moved by as much as the row's numeric
    columns (percentages, counts: whitespace-separated tokens) end later or earlier than
    their headings. perf's rows line up with its headings; this keeps a table whose numbers
    are wider than their heading (bpfsym -g's Self column, docs/perf-compat.md) readable."""
    n = sum(1 for h in sec.headings if h in PERCENT_HEADINGS | COUNT_HEADINGS)
    if n == 0 or n >= len(starts):
        return starts
    m = re.match(rb"(\s*\S+){%d}" % n, line)
    if m is None:
        return starts
    # the numeric columns' heading area ends 2 bytes (the separator) before the first key
    shift = m.end() - (starts[n] - 2)
    return starts[:n] + [s + shift for s in starts[n:]]


def _row(headings: list[str], cells: list[bytes]) -> Row:
    key: list[str] = []
    percents: dict[str, float] = {}
    samples = None
    for h, c in zip(headings, cells, strict=False):
        if h in PERCENT_HEADINGS:
            percents[h] = float(c.strip().rstrip(b"%"))
        elif h == "Samples":
            samples = int(c.strip())
        elif h in COUNT_HEADINGS:
            pass
        else:
            # key cells are left-aligned and padded to the column width ("%-*.*s"); the
            # last one is padded too. Only the padding goes.
            key.append(_decode(c.rstrip(b" ")))
    return Row(tuple(key), percents, samples)


@functools.cache
def empty_dir(what: str) -> str:
    """An empty directory for this process (HOME, symfs), removed when it exits."""
    d = tempfile.mkdtemp(prefix=f"bpfsym-compat-{what}-")
    atexit.register(shutil.rmtree, d, True)
    return d


def perf_env() -> dict[str, str]:
    """perf's environment: no user or system perfconfig, an empty build-id cache, no
    debuginfod (perf 6.1 would ask the network for build ids it does not have)."""
    env = dict(os.environ)
    env["HOME"] = empty_dir("home")
    env["PERF_CONFIG_NOSYSTEM"] = "1"
    env.pop("PERF_CONFIG", None)
    env.pop("PERF_BUILDID_DIR", None)
    env.pop("DEBUGINFOD_URLS", None)
    env["PAGER"] = "cat"
    return env


def perf_argv(path: str, keys: str, children: bool = False) -> list[str]:
    return [
        PERF,
        "report",
        "-i",
        path,
        "--stdio",
        "--children" if children else "--no-children",
        "-g",
        "none",
        "--sort",
        keys,
        "-n",
        "--symfs",
        empty_dir("symfs"),
        "--no-branch-stack",
        "--no-group",
    ]


@functools.cache
def bpfsym_options() -> frozenset[str]:
    """The long options `bpfsym report --help` lists (so that --symfs is passed once it
    exists: the reference reading looks up no binary of this host, bpfsym should not either)."""
    p = subprocess.run(
        [sys.executable, "-P", "-m", "bpfsym", "report", "--help"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=TIMEOUT,
        check=False,
    )
    return frozenset(m.decode() for m in re.findall(rb"(--[a-z][a-z-]*)", p.stdout))


def bpfsym_argv(path: str, keys: str, children: bool = False) -> list[str]:
    argv = [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--stdio", "--no-side"]
    argv += ["--sort", keys]
    if "--symfs" in bpfsym_options():
        argv += ["--symfs", empty_dir("symfs")]
    if children:
        argv.append("-g")
    return argv


def _run(tool: str, argv: list[str], env: dict[str, str] | None) -> Reading:
    try:
        p = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            timeout=TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout if isinstance(e.stdout, bytes) else b""
        err = e.stderr if isinstance(e.stderr, bytes) else b""
        return Reading(tool, argv, -9, out, err, [], timed_out=True)
    return Reading(tool, argv, p.returncode, p.stdout, p.stderr, parse_report(p.stdout))


def perf_report(path: str, keys: str, children: bool = False) -> Reading:
    """The installed perf's reading of path, now."""
    return _run("perf", perf_argv(path, keys, children), perf_env())


def bpfsym_report(path: str, keys: str, children: bool = False) -> Reading:
    """The installed bpfsym's reading of path (this interpreter's), now."""
    return _run("bpfsym", bpfsym_argv(path, keys, children), None)


def refusal_ok(bs: Reading) -> list[str]:
    """Problems with bpfsym's answer to a file perf cannot read (empty: acceptable)."""
    if bs.timed_out:
        return [f"bpfsym timed out after {TIMEOUT} s"]
    if bs.returncode == 0:
        return []
    lines = bs.stderr_lines()
    problems = []
    if bs.returncode != 2:
        problems.append(f"bpfsym exit status {bs.returncode} (wanted 0, or 2 with one line)")
    if any("Traceback" in ln for ln in lines):
        problems.append("bpfsym printed a traceback")
    if len(lines) != 1:
        problems.append(f"bpfsym printed {len(lines)} lines on stderr (wanted 1)")
    if problems:
        problems.append("stderr: " + " | ".join(lines[-5:]))
    return problems


def compare(perf: Reading, bs: Reading) -> Verdict:
    """Apply the agreement rules (module docstring) to two readings of one file and keys."""
    if not perf.readable:
        return Verdict(not (p := refusal_ok(bs)), p, False)
    problems: list[str] = []
    if bs.timed_out or bs.returncode != 0:
        lines = bs.stderr_lines()
        tail = " | ".join(lines[-3:])
        why = "timed out" if bs.timed_out else f"exit {bs.returncode}"
        return Verdict(False, [f"perf reads the file, bpfsym {why}: {tail}"], True)
    pe = [s.event for s in perf.sections]
    be = [s.event for s in bs.sections]
    if pe != be:
        problems.append(f"events: perf {pe}, bpfsym {be}")
    bs_by_event: dict[str, list[Section]] = {}
    for s in bs.sections:
        bs_by_event.setdefault(s.event, []).append(s)
    for i, ps in enumerate(perf.sections):
        same_place = i < len(bs.sections) and bs.sections[i].event == ps.event
        cands = [bs.sections[i]] if same_place else bs_by_event.get(ps.event, [])
        if not cands:
            continue  # reported above as an event mismatch
        problems += compare_section(ps, cands[0])
    return Verdict(not problems, problems, True)


def _count_text(s: str) -> str:
    """A printed sample count in perf's unit form (bpfsym may print the exact number)."""
    return convert_unit(int(s)) if s.isdigit() else s


def compare_section(ps: Section, bs: Section) -> list[str]:
    """Problems of one event's table: its sample count and its rows of >= MIN_PERCENT."""
    ev = ps.event
    problems = []
    if _count_text(ps.samples) != _count_text(bs.samples):
        problems.append(f"{ev}: samples: perf {ps.samples}, bpfsym {bs.samples}")
    pk, bk = ps.key_headings(), bs.key_headings()
    if pk != bk:
        problems.append(f"{ev}: columns: perf {pk}, bpfsym {bk}")
        return problems
    # perf sizes the Command column by each thread's latest comm, cached (hist.c
    # hists__calc_col_len -> thread.c thread__comm_len), and prints every entry's comm cut
    # to that width ("%-*.*s", sort.c _sort__comm_snprintf): "perf-exec" shows as "perf-ex"
    # when the thread is "lsattr" by the end. A perf bug; compared as perf shows it.
    cut = {}
    w = ps.key_width("Command")
    if w is not None:
        cut[pk.index("Command")] = w
    mine = bs.totals(cut)
    # perf 6.1 in pipe mode decides about children before any attr has arrived
    # (builtin-report.c report__setup_sample_type: no CALLCHAIN in the empty evlist turns
    # cumulate_callchain off): its Overhead is the self share, bpfsym's Self
    alias = {}
    if "Overhead" in ps.headings and "Overhead" not in bs.headings and "Self" in bs.headings:
        alias["Overhead"] = "Self"
    theirs = ps.totals()
    if "Children" in ps.headings:
        # perf gives a call-chain node without a map the privilege level left over from the
        # node before it (callchain.c fill_callchain_info) and merges such rows by address
        # whatever their level: a perf bug (docs/perf-compat.md); those rows are compared
        # without their level
        theirs, mine = _levelless(theirs), _levelless(mine)
    for key, cols in sorted(theirs.items(), key=lambda kv: -max(kv[1].values())):
        if max(cols.values()) < MIN_PERCENT:
            continue
        got = mine.get(key)
        if got is not None and alias:
            got = {h: got[alias[h]] for h in alias if alias[h] in got}
        if got is None:
            want = ", ".join(f"{h} {p:.2f}%" for h, p in cols.items())
            problems.append(f"{ev}: perf row {' | '.join(key)} ({want}): no bpfsym row")
            continue
        for h, p in cols.items():
            q = got.get(h)
            if q is None:
                problems.append(f"{ev}: {' | '.join(key)}: bpfsym has no {h} column")
            elif abs(p - q) > TOLERANCE + 1e-9:
                problems.append(
                    f"{ev}: {' | '.join(key)}: {h} perf {p:.2f}%, bpfsym {q:.2f}% ({q - p:+.2f})"
                )
    return problems


def _levelless(
    totals: dict[tuple[str, ...], dict[str, float]],
) -> dict[tuple[str, ...], dict[str, float]]:
    """Rows of [unknown] code with "[?]" for their level, rows made alike added up."""
    out: dict[tuple[str, ...], dict[str, float]] = {}
    for key, cols in totals.items():
        if "[unknown]" in key:
            key = tuple(re.sub(r"^\[[k.]\] ", "[?] ", c) for c in key)
        got = out.setdefault(key, {})
        for h, p in cols.items():
            got[h] = got.get(h, 0.0) + p
    return out


def has_callchains(path: str) -> bool:
    """Whether perf sees PERF_SAMPLE_CALLCHAIN in an event of the file (perf evlist -v)."""
    try:
        p = subprocess.run(
            [PERF, "evlist", "-v", "-i", path],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=perf_env(),
            timeout=TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return p.returncode == 0 and re.search(rb"sample_type: \S*CALLCHAIN", p.stdout) is not None


@dataclass
class Comparison:
    path: str
    keys: str
    children: bool
    perf: Reading
    bpfsym: Reading
    verdict: Verdict


def check(path: str, keys: str, children: bool = False) -> Comparison:
    """Read path with perf and bpfsym (keys, or the call-graph totals) and compare."""
    perf = perf_report(path, keys, children)
    bs = bpfsym_report(path, keys, children)
    return Comparison(path, keys, children, perf, bs, compare(perf, bs))


CORPUS = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "perfdata-corpus")
)


def corpus_files(corpus: str = CORPUS) -> list[str]:
    """The corpus's perf.data files (those SOURCES.tsv lists), sorted by name."""
    with open(os.path.join(corpus, "SOURCES.tsv"), encoding="utf-8") as f:
        names = [ln.split("\t", 1)[0] for ln in f if ln.strip() and not ln.startswith("#")]
    return sorted(os.path.join(corpus, n) for n in names)


def describe(c: Comparison) -> str:
    """A failure message: the commands, their statuses, and what differs."""
    what = "children" if c.children else c.keys
    lines = [
        f"{os.path.basename(c.path)} [{what}]: "
        + ("perf reads it" if c.verdict.perf_readable else "perf cannot read it"),
        "perf:   " + " ".join(c.perf.argv) + f"  -> exit {c.perf.returncode}",
        "bpfsym: " + " ".join(c.bpfsym.argv) + f"  -> exit {c.bpfsym.returncode}",
        c.verdict.explain(),
    ]
    return "\n".join(lines)
