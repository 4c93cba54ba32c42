"""bpfsym report's everyday options read corpus files as the installed perf 6.1 does.

    python -P tests/compat/test_options.py [-j 2] [-v] [FILE ...]   # figures, per option

Options: --header-only, --comms, --pid, --tid, --cpu, --time (absolute, open-ended and
percent slices), --percent-limit. perf reads every file now, with perfcompat's command
line (perf_argv) plus the option; bpfsym reads it with the same option through
`bpfsym report`'s own parsing, once by each pass over the samples: the record-by-record
pass and the numpy bulk pass (in two processes), in this process.

The option values of a file come from perf's own reading of it (`perf script -F
comm,pid,tid,cpu,time`), never from bpfsym's: the second commonest comm and the commonest,
the commonest pid and tid, every CPU but the busiest, the middle of the sampled span.

Agreement, per reading (perfcompat.compare, and the converse): perf's rules one way (every
perf row of >= 0.5 % matched within 0.05 points, events and sample counts alike), and
every bpfsym row of >= 0.55 % matched by a perf row of the same key: a filter or a
percent limit that lets through what perf hides fails. perf's thread filters mark a row
hidden or shown by the first sample that made it (hist.c hists__findnew_entry merges the
later ones whatever their thread, a perf bug: docs/perf-compat.md), so they are compared
with the filtered column in the sort keys, where a row is one thread's or one comm's.

--header-only: perf's and bpfsym's output alike line by line, compared per feature (the
`# ========` framing with "captured on", each feature's lines, "missing features"). A
file perf cannot read (exit status not 0, or no framing): bpfsym exits 0, or 2 with one
line.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

# run as a script too (python -P tests/compat/test_options.py): the kit is in tests/
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402
from kit import perfcompat as P  # noqa: E402

FIXTURES = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "perfdata")
)
FIXTURE_FILES = [os.path.join(FIXTURES, f"{n}.data") for n in ("bpf", "multi", "pipe", "z")]

# files with several comms, pids, tids and CPUs, sample times, rows under 2 %; the 1.5 MB
# forkexit-3.4 takes the bulk pass from the command line too
SELECTION = [
    os.path.join(P.CORPUS, n)
    for n in (
        "quipper__perf.data.systemwide.5-3.8",
        "quipper__perf.data.forkexit-3.4",
        "quipper__perf.data.busy.1-3.8",
        "quipper__perf.data.piped.target-3.8",
        "pp__parallel_static_gcc_perf.data.zstd",
        "quipper__perf.data.lost_samples-4.4",
    )
] + FIXTURE_FILES

OPTIONS = ("comms", "pid", "tid", "cpu", "time", "time-from", "time-to", "time-pct", "limit")


@dataclass
class Sample:
    comm: str
    pid: int
    tid: int
    cpu: int | None
    time: float | None


SCRIPT_LINE = re.compile(
    rb"^\s*(?P<comm>.*?)\s+(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+"
    rb"(?:\[(?P<cpu>\d+)\]\s+)?(?:(?P<time>\d+\.\d+):)?"
)


@functools.cache
def fixture_kallsyms() -> str:
    from kit import perftext

    return perftext.fixture_kallsyms()


def extra(path: str) -> list[str]:
    """The options both programs get for a file: the fixtures' own kallsyms."""
    return ["--kallsyms", fixture_kallsyms()] if path in FIXTURE_FILES else []


@functools.cache
def perf_samples(path: str) -> list[Sample]:
    """Every sample's comm, pid, tid, cpu and time as `perf script` reads them."""
    for fields in ("comm,pid,tid,cpu,time", "comm,pid,tid,time", "comm,pid,tid"):
        argv = [P.PERF, "script", "-i", path, "-F", fields, *extra(path)]
        r = subprocess.run(
            argv, capture_output=True, env=P.perf_env(), timeout=P.TIMEOUT, check=False
        )
        if r.returncode == 0 and r.stdout.strip():
            break
    else:
        return []
    out = []
    for line in r.stdout.splitlines():
        m = SCRIPT_LINE.match(line)
        if m is None or not m.group("comm"):
            continue
        cpu, t = m.group("cpu"), m.group("time")
        out.append(
            Sample(
                m.group("comm").decode("utf-8", "surrogateescape"),
                int(m.group("pid")),
                int(m.group("tid")),
                int(cpu) if cpu is not None else None,
                float(t) if t is not None else None,
            )
        )
    return out


def _usec(t: float) -> str:
    return f"{t:.6f}"


def option_args(path: str, option: str) -> tuple[list[str], str] | None:
    """(the option's arguments for path, the sort keys to compare with), None when the file
    has nothing for the option to work on (no samples, one CPU, no times)."""
    samples = perf_samples(path)
    if not samples:
        return None
    if option == "comms":
        common = [c for c, _ in collections.Counter(s.comm for s in samples).most_common()]
        if len(common) < 2:
            return ["--comms", common[0]], "comm,dso,sym"
        return ["--comms", f"{common[1]},{common[0]}"], "comm,dso,sym"
    if option == "pid":
        pid = collections.Counter(s.pid for s in samples).most_common(1)[0][0]
        return ["--pid", str(pid)], "pid,dso,sym"
    if option == "tid":
        tids = [t for t, _ in collections.Counter(s.tid for s in samples).most_common(2)]
        return ["--tid", ",".join(map(str, tids))], "pid,dso,sym"
    if option == "cpu":
        cpus = collections.Counter(s.cpu for s in samples if s.cpu is not None)
        if len(cpus) < 2:
            return None
        busiest = cpus.most_common(1)[0][0]
        return ["--cpu", _cpu_text(sorted(c for c in cpus if c != busiest))], "comm,dso,sym"
    if option == "limit":
        return ["--percent-limit", "2"], "dso,sym"
    times = sorted(s.time for s in samples if s.time is not None)
    if len(times) < 10 or times[-1] - times[0] < 1e-3:
        return None
    lo, hi = times[0], times[-1]
    a, b = lo + 0.3 * (hi - lo), lo + 0.7 * (hi - lo)
    if option == "time":
        return ["--time", f"{_usec(a)},{_usec(b)}"], "comm,dso,sym"
    if option == "time-from":
        return ["--time", f"{_usec(a)},"], "comm,dso,sym"
    if option == "time-to":
        return ["--time", f",{_usec(b)}"], "comm,dso,sym"
    if option == "time-pct":
        if not _has_sample_time(path):
            return None
        return ["--time", "10%/3"], "comm,dso,sym"
    raise ValueError(option)


def _cpu_text(cpus: list[int]) -> str:
    """0,1,2,5 -> "0-2,5": ranges, as a user writes them."""
    parts: list[str] = []
    for c in cpus:
        if parts and "-" not in parts[-1].split(",")[-1] and int(parts[-1]) == c - 1:
            parts[-1] = f"{c - 1}-{c}"
        elif parts and "-" in parts[-1] and int(parts[-1].split("-")[1]) == c - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{c}"
        else:
            parts.append(str(c))
    return ",".join(parts)


@functools.cache
def _has_sample_time(path: str) -> bool:
    r = perf_header(path)
    return b"# time of last sample" in r.stdout and b"time of last sample : 0.000000" not in (
        r.stdout
    )


# ---- readings ---------------------------------------------------------------------


def perf_reading(path: str, keys: str, args: list[str]) -> P.Reading:
    return P._run("perf", P.perf_argv(path, keys) + extra(path) + args, P.perf_env())


def bpfsym_argv(path: str, keys: str, args: list[str]) -> list[str]:
    return P.bpfsym_argv(path, keys) + extra(path) + args


def bpfsym_reading(path: str, keys: str, args: list[str], bulk: bool) -> P.Reading:
    """bpfsym's reading, in this process, by one pass: the command line parsed by `bpfsym
    report`'s own parser, the query forced to the record-by-record or the bulk pass."""
    from bpfsym.commands.report import configure, query_of
    from bpfsym.errors import one_line
    from bpfsym.report.analysis import analyze_query
    from bpfsym.report.render import render

    argv = bpfsym_argv(path, keys, args)
    ap = argparse.ArgumentParser()
    configure(ap)
    try:
        ns = ap.parse_args(argv[argv.index("report") + 1 :])
        query = replace(query_of(ns), accelerate=bulk, parallel=True if bulk else None)
        an = analyze_query(query)
        text = render(an, query).encode("utf-8", "surrogateescape")
    except Exception as e:  # noqa: BLE001 - told as the command line would tell it
        line = one_line(e)
        if line is None:
            raise
        return P.Reading("bpfsym", argv, 2, b"", line.encode() + b"\n", [])
    tool = "bpfsym-bulk" if an.accelerated else "bpfsym-ordered"
    return P.Reading(tool, argv, 0, text, b"", P.parse_report(text))


BPF_TAG = re.compile(r"bpf_prog_[0-9a-f]{16}_")


def _untag(r: P.Reading) -> None:
    """BPF program names without their tags: perf names a program's main function after
    prog_tags[0], bpfsym after its own tag as /proc/kallsyms does (docs/design.md; the
    offline report tests pin bpfsym's names against the recorded kallsyms). The options,
    not the naming, are compared here."""
    for s in r.sections:
        for row in s.rows:
            row.key = tuple(BPF_TAG.sub("bpf_prog_<tag>_", c) for c in row.key)


def converse(perf: P.Reading, bs: P.Reading) -> list[str]:
    """bpfsym rows of >= 0.55 % that perf has no row for (a filter letting through what
    perf hides)."""
    if not perf.readable or bs.returncode != 0:
        return []
    problems = []
    for ps, bsec in zip(perf.sections, bs.sections, strict=False):
        cut = {}
        w = ps.key_width("Command")
        if w is not None and "Command" in bsec.key_headings():
            cut[bsec.key_headings().index("Command")] = w
        theirs = ps.totals()
        for key, cols in bsec.totals(cut).items():
            p = cols.get("Overhead", 0.0)
            if p >= P.MIN_PERCENT + P.TOLERANCE and key not in theirs:
                problems.append(
                    f"{bsec.event}: bpfsym row {' | '.join(key)} ({p:.2f}%): not perf's"
                )
    return problems


@dataclass
class Case:
    path: str
    option: str
    args: list[str]
    keys: str
    perf: P.Reading
    readings: list[P.Reading]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        head = f"{os.path.basename(self.path)} {' '.join(self.args)} [--sort {self.keys}]"
        lines = [head, "perf:   " + " ".join(self.perf.argv) + f" -> {self.perf.returncode}"]
        for r in self.readings:
            lines.append(f"{r.tool}: " + " ".join(r.argv) + f" -> {r.returncode}")
        return "\n".join(lines + self.problems[:30])


def check_option(path: str, option: str) -> Case | None:
    """perf and both bpfsym passes with one option on one file (None: not applicable)."""
    got = option_args(path, option)
    if got is None:
        return None
    args, keys = got
    perf = perf_reading(path, keys, args)
    readings = [bpfsym_reading(path, keys, args, bulk) for bulk in (False, True)]
    if path in FIXTURE_FILES:
        for r in (perf, *readings):
            _untag(r)
    problems = []
    for r in readings:
        v = P.compare(perf, r)
        problems += [f"[{r.tool}] {x}" for x in v.problems]
        problems += [f"[{r.tool}] {x}" for x in converse(perf, r)]
    return Case(path, option, args, keys, perf, readings, problems)


# ---- --header-only ------------------------------------------------------------------

FEATURE_OF = [  # line prefix -> the feature that prints it
    ("# captured on", "framing"), ("# header version", "framing"), ("# data offset", "framing"),
    ("# data size", "framing"), ("# feat offset", "framing"), ("# ========", "framing"),
    ("# hostname", "HOSTNAME"), ("# os release", "OSRELEASE"), ("# perf version", "VERSION"),
    ("# arch", "ARCH"), ("# nrcpus", "NRCPUS"), ("# cpudesc", "CPUDESC"), ("# cpuid", "CPUID"),
    ("# total memory", "TOTAL_MEM"), ("# cmdline", "CMDLINE"), ("# event", "EVENT_DESC"),
    ("# pmu mappings", "PMU_MAPPINGS"), ("# group", "GROUP_DESC"),
    ("# contains samples with branch stack", "BRANCH_STACK"),
    ("# contains AUX", "AUXTRACE"), ("# contains stat", "STAT"),
    ("# time of", "SAMPLE_TIME"), ("# sample duration", "SAMPLE_TIME"),
    ("# clockid frequency", "CLOCKID"), ("# directory data", "DIR_FORMAT"),
    ("# bpf_prog_info", "BPF_PROG_INFO"), ("# \tsub_prog", "BPF_PROG_INFO"),
    ("# btf info", "BPF_BTF"), ("# compressed", "COMPRESSED"),
    ("# cpu pmu capabilities", "CPU_PMU_CAPS"), ("# clockid:", "CLOCK_DATA"),
    ("# reference time", "CLOCK_DATA"), ("# missing features", "missing"),
]  # fmt: skip
INFO_LINE = re.compile(r"^# (\w+) info available, use -I to display$")


def header_features(text: bytes) -> dict[str, list[str]]:
    """--header-only output as {feature: its lines, in order}."""
    out: dict[str, list[str]] = {}
    for raw in text.decode("utf-8", "surrogateescape").splitlines():
        m = INFO_LINE.match(raw)
        if m is not None:
            feat = m.group(1)
        elif raw.endswith(" pmu capabilities: ") or " pmu capabilities: " in raw:
            feat = "CPU_PMU_CAPS" if raw.startswith("# cpu pmu") else "PMU_CAPS"
        else:
            feat = next((f for p, f in FEATURE_OF if raw.startswith(p)), "other")
        out.setdefault(feat, []).append(raw)
    return out


@functools.cache
def perf_header(path: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [P.PERF, "report", "-i", path, "--header-only"],
        capture_output=True,
        env=P.perf_env(),
        timeout=P.TIMEOUT,
        check=False,
    )


def check_header(path: str) -> list[str]:
    """Problems of bpfsym's --header-only against perf's (empty: they agree)."""
    perf = perf_header(path)
    argv = [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--header-only"]
    bs = subprocess.run(argv, capture_output=True, timeout=P.TIMEOUT, check=False)
    if perf.returncode != 0 or not perf.stdout.startswith(b"# ========"):
        reading = P.Reading("bpfsym", argv, bs.returncode, bs.stdout, bs.stderr, [])
        return P.refusal_ok(reading)
    if bs.returncode != 0:
        return [f"perf reads it, bpfsym exits {bs.returncode}: {bs.stderr.decode()[-300:]}"]
    theirs, mine = header_features(perf.stdout), header_features(bs.stdout)
    problems = []
    for feat in sorted(set(theirs) | set(mine)):
        a, b = theirs.get(feat, []), mine.get(feat, [])
        if a != b:
            problems.append(f"{feat}: perf {a[:4]}, bpfsym {b[:4]}")
    return problems


# ---- tests --------------------------------------------------------------------------


def _id(path: str) -> str:
    return os.path.basename(path)


@pytest.mark.parametrize("path", [*P.corpus_files(), *FIXTURE_FILES], ids=_id)
def test_header_only_agrees_with_perf(path: str) -> None:
    problems = check_header(path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("path", SELECTION, ids=_id)
def test_option_agrees_with_perf(path: str, option: str) -> None:
    case = check_option(path, option)
    if case is None:
        pytest.skip(f"nothing for {option} to work on in this file")
    assert case.ok, case.describe()


PT_FILE = os.path.join(P.CORPUS, "quipper__perf.data.intel_pt-4.14")


def _row_samples(r: P.Reading) -> dict[str, collections.Counter]:
    """Per event: samples per row key (perf's -n column)."""
    return {
        sec.event: collections.Counter({row.key: row.samples or 0 for row in sec.rows})
        for sec in r.sections
    }


def _json_samples(path: str, args: list[str]) -> dict[str, collections.Counter]:
    argv = [*bpfsym_argv(path, "comm,dso,sym", args), "--json"]
    doc = json.loads(subprocess.run(argv, capture_output=True, check=True).stdout)
    return {
        ev["name"]: collections.Counter(
            {(r["comm"], r["dso"], r["sym"]): r["samples"] for r in ev["rows"] if r["samples"]}
        )
        for ev in doc["events"]
        if ev["samples"]
    }


def test_intel_pt_time_span_is_perfs_whole_trace_decode_not_its_restarted_one() -> None:
    """Where perf is wrong: with `--time a,b` on an Intel PT file perf restarts its decoder
    at a (intel-pt.c time_ranges) and reports what a restart makes up: a cbr sample for a
    CBR packet whose ratio did not change, psb samples in the restart's unknown mode. Its
    own decode of the whole trace (`--time ,b` less `--time ,a-1us`) has neither; bpfsym
    reports that span of the whole trace."""
    args, keys = option_args(PT_FILE, "time")
    a, b = args[1].split(",")
    before = f"{float(a) - 1e-6:.6f}"
    upto = _row_samples(perf_reading(PT_FILE, keys, ["--time", f",{b}"]))
    head = _row_samples(perf_reading(PT_FILE, keys, ["--time", f",{before}"]))
    whole = {e: upto[e] - head.get(e, collections.Counter()) for e in upto}
    whole = {e: c for e, c in whole.items() if c}
    restarted = _row_samples(perf_reading(PT_FILE, keys, args))
    restarted = {e: c for e, c in restarted.items() if sum(c.values())}
    assert restarted != whole  # perf's artifact (if perf stops making it, say so in docs)
    assert sum(restarted.get("cbr", collections.Counter()).values()) > sum(
        whole.get("cbr", collections.Counter()).values()
    )
    assert _json_samples(PT_FILE, args) == whole


def test_the_selection_exercises_the_options() -> None:
    # several comms, pids and CPUs; --time windows inside the span (fewer samples than the
    # whole file, some left); --percent-limit hiding rows perf shows without it; and the
    # bulk pass taking some of the files (it may send a file to the other pass)
    comms = pids = cpus = windows = hidden = 0
    bulk = False
    for path in SELECTION:
        samples = perf_samples(path)
        comms += len({s.comm for s in samples}) >= 3
        pids += len({s.pid for s in samples}) >= 3
        cpus += len({s.cpu for s in samples if s.cpu is not None}) >= 3
        case = check_option(path, "time")
        if case is not None and case.perf.readable:
            whole = perf_reading(path, case.keys, []).sections
            part = case.perf.sections
            windows += any(
                0 < (b.event_count or 0) < (a.event_count or 0)
                for a, b in zip(whole, part, strict=False)
            )
            bulk = bulk or any(r.tool == "bpfsym-bulk" for r in case.readings)
        lim = check_option(path, "limit")
        if lim is not None and lim.perf.readable:
            whole = perf_reading(path, lim.keys, []).sections
            part = lim.perf.sections
            hidden += any(len(a.rows) > len(b.rows) for a, b in zip(whole, part, strict=False))
    assert comms >= 3 and pids >= 3 and cpus >= 2
    assert windows >= 3 and hidden >= 3
    assert bulk


CHAINED = os.path.join(P.CORPUS, "quipper__perf.data.callgraph-3.8")


@pytest.mark.parametrize("option", ["comms", "pid", "cpu", "time", "limit"])
def test_children_with_an_option_agree_with_perf(option: str) -> None:
    # the call-graph totals (perf --children, bpfsym -g) with the filters, both passes
    got = option_args(CHAINED, option)
    assert got is not None
    args = got[0]
    keys = {"comms": "comm,dso,sym", "pid": "pid,dso,sym"}.get(option, "dso,sym")
    perf = P._run("perf", P.perf_argv(CHAINED, keys, children=True) + args, P.perf_env())
    assert perf.readable
    for bulk in (False, True):
        r = bpfsym_reading(CHAINED, keys, [*args, "-g"], bulk)
        v = P.compare(perf, r)
        assert v.ok, f"{r.tool} {' '.join(args)}\n" + v.explain()


BAD_VALUES = [
    ("--cpu", "x"),
    ("--cpu", "3-1"),
    ("--time", "5,3"),
    ("--time", "abc"),
    ("--time", "10%/0"),
    ("--time", "120%/1"),
    ("--pid", "12a"),
    ("--tid", ""),
    ("--comms", ","),
    ("--percent-limit", "x"),
    ("--percent-limit", "101"),
]


@pytest.mark.parametrize(("option", "value"), BAD_VALUES)
def test_bad_option_values_are_one_line_and_exit_2(option: str, value: str) -> None:
    path = os.path.join(FIXTURES, "bpf.data")
    argv = [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--no-side"]
    r = subprocess.run([*argv, option, value], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_cpu_of_a_file_without_cpus_is_one_line() -> None:
    # perf: "File does not contain CPU events. Remove -C option to proceed."
    path = os.path.join(FIXTURES, "multi.data")
    argv = [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--no-side", "-C", "0"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr


# ---- figures ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="perf.data files (default: the corpus)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    files = args.files or P.corpus_files()
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        headers = list(pool.map(check_header, files))
        cases = {o: list(pool.map(check_option, files, [o] * len(files))) for o in OPTIONS}
    print(f"{sum(not h for h in headers)} of {len(files)} agree on --header-only")
    if args.verbose:
        for f, h in zip(files, headers, strict=True):
            if h:
                print(f"    {os.path.basename(f)}: " + "\n      ".join(h[:5]))
    for o in OPTIONS:
        got = [c for c in cases[o] if c is not None]
        print(f"{sum(c.ok for c in got)} of {len(got)} agree on {o} (both passes)")
        if args.verbose:
            for c in got:
                if not c.ok:
                    print("    " + c.describe().replace("\n", "\n    "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
