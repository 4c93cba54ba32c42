"""The Intel PT trace of a corpus perf.data decoded as the installed perf decodes it.

perf's own reading is the reference, made at test time (nothing stored): its packet dump
(``perf report -D``), the samples and errors it synthesizes with the code unreadable
(``perf script --itrace=... --symfs EMPTY``), and, for the pipe-mode copy that perf 6.1
misreads as a regular file (docs/perf-compat.md, "Where perf is wrong" 5), perf reading the
same bytes through a real pipe. Bad trace data gives FormatError or a reading, nothing else.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.errors import FormatError
from bpfsym.read import intel_pt as pt
from bpfsym.read.perfdata import PerfData
from bpfsym.report.analysis import analyze
from bpfsym.report.ordered import OrderedPass
from bpfsym.report.query import ReportQuery

CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "perfdata-corpus")
FILE = os.path.join(CORPUS, "quipper__perf.data.intel_pt-4.14")
PIPED = os.path.join(CORPUS, "quipper__perf.data.piped.intel_pt-4.14")
PERF = shutil.which("perf") or "perf"
# perf report's default --itrace for the events it can make here: power events (cbr, psb)
# and errors; the other defaults (instructions every 100 us, ...) need the traced code
ITRACE = "--itrace=i100usxwpoe"


@cache
def _empty(what: str) -> str:
    return tempfile.mkdtemp(prefix=f"bpfsym-ipt-{what}-")


def _perf(args: list[str], stdin_path: str | None = None) -> str:
    """perf's output, with no perfconfig or build-id cache of this machine's user."""
    env = dict(os.environ, HOME=_empty("home"), PERF_CONFIG_NOSYSTEM="1", PAGER="cat")
    for k in ("PERF_CONFIG", "PERF_BUILDID_DIR", "DEBUGINFOD_URLS"):
        env.pop(k, None)
    argv = [PERF, *args, "--symfs", _empty("symfs")]
    data = None
    if stdin_path is not None:  # through a pipe: perf misreads a regular file as stdin too
        with open(stdin_path, "rb") as f:
            data = f.read()
    p = subprocess.run(argv, env=env, input=data, capture_output=True, timeout=300, check=True)
    return p.stdout.decode("utf-8", "replace")


# ---- bpfsym's side ----------------------------------------------------------


def _payloads(path: str) -> list[tuple[tuple[int, ...], bytes]]:
    """Each AUXTRACE record's head and trace, as the reader hands them on."""
    with PerfData(path) as pd:
        heads = pd.auxtrace_buffers()
    out = []
    with open(path, "rb") as f:
        for head, at in heads:
            f.seek(at)
            out.append((head, f.read(head[0])))
    return out


def _bpfsym_pass(path: str) -> OrderedPass:
    """bpfsym report's record-by-record pass over path, its synthesized samples kept."""
    query = ReportQuery(path=path, keys=("comm", "dso", "sym"))
    with PerfData(path) as pd:
        ordered = OrderedPass(pd, query, None)
        ordered.trace_log = []
        ordered.run()
    return ordered


def _ns(t: int) -> str:
    sec, ns = divmod(t, 1_000_000_000)
    return f"{sec}.{ns:09d}"


# ---- perf's side --------------------------------------------------------------

_PKT = re.compile(r"^\.  ([0-9a-f]{8}):  ((?:[0-9a-f]{2} )+)\s*(\S.*?)\s*$")


def _perf_dump(path: str) -> list[list[tuple[int, int, str]]]:
    """perf report -D: per AUXTRACE record, its packets (offset, length, description)."""
    sections: list[list[tuple[int, int, str]]] = []
    for line in _perf(["report", "-i", path, "-D"]).splitlines():
        if "Intel Processor Trace data: size" in line:
            sections.append([])
            continue
        m = _PKT.match(line)
        if m and sections:
            sections[-1].append((int(m[1], 16), len(m[2].split()), m[3]))
    return sections


def _describe(p: pt.Packet) -> str:
    """A packet as perf's dump describes it (intel-pt-pkt-decoder.c intel_pt_pkt_desc)."""
    n, v = p.name, p.payload
    if p.kind in (pt.PAD, pt.PSB, pt.PSBEND, pt.TRACESTOP, pt.OVF, pt.BAD):
        return n
    if p.kind == pt.TNT:
        bits = "".join("T" if v >> (63 - i) & 1 else "N" for i in range(p.cnt))
        return f"{n} {bits} ({p.cnt})"
    if p.kind in (pt.TIP_PGD, pt.TIP_PGE, pt.TIP, pt.FUP) and not p.cnt:
        return f"{n} no ip"
    if p.kind in (pt.TIP_PGD, pt.TIP_PGE, pt.TIP, pt.FUP, pt.CYC, pt.MTC, pt.CBR, pt.TSC):
        return f"{n} {v:#x}"
    if p.kind == pt.TMA:
        return f"{n} CTC {v:#x} FC {p.cnt:#x}"
    if p.kind == pt.MODE_EXEC:
        return f"{n} IF:{int(bool(p.cnt & 4))} {v}"
    if p.kind == pt.MODE_TSX:
        return f"{n} TXAbort:{v >> 1 & 1} InTX:{v & 1}"
    if p.kind == pt.PIP:
        return f"{n} {(v & ~1) >> 1:#x} (NR={v & 1})"
    return f"{n} {v:#x} ({p.cnt})"


_SCRIPT = re.compile(
    r"^\s*(?P<comm>\S+)\s+(?P<tid>-?\d+)\s+\[(?P<cpu>-?\d+)\]\s+(?P<time>\d+\.\d+):\s+"
    r"(?P<event>\w+):\s+(?P<rest>.*)$"
)
_ERROR = re.compile(
    r"instruction trace error type \d+ time (?P<time>\d+\.\d+) cpu (?P<cpu>-?\d+) "
    r"pid (?P<pid>-?\d+) tid (?P<tid>-?\d+) ip (?P<ip>0x[0-9a-f]+) code (?P<code>\d+)"
)


def _perf_script(path: str, piped: bool = False) -> tuple[list[tuple], list[tuple]]:
    """perf script's cbr and psb samples (event, tid, cpu, time, ip) and its errors
    (code, cpu, tid, time, ip). A pipe gets perf's default fields: -F fails there."""
    if piped:
        out = _perf(["script", "-i", "-", ITRACE, "--ns"], stdin_path=path)
    else:
        out = _perf(["script", "-i", path, ITRACE, "--ns", "-F", "event,comm,tid,cpu,time,ip"])
    samples, errors = [], []
    for line in out.splitlines():
        e = _ERROR.search(line)
        if e:
            errors.append(
                (int(e["code"]), int(e["cpu"]), int(e["tid"]), e["time"], int(e["ip"], 16))
            )
            continue
        m = _SCRIPT.match(line)
        if m and m["event"] in ("cbr", "psb"):
            # the ip is the first hex word after the event's own fields
            words = [w for w in m["rest"].split() if re.fullmatch(r"[0-9a-f]+", w)]
            ip = int(words[-1] if piped else words[0], 16)
            samples.append((m["event"], int(m["tid"]), int(m["cpu"]), m["time"], ip))
    return samples, errors


def _ours(ordered: OrderedPass) -> tuple[list[tuple], list[tuple]]:
    assert ordered.trace is not None and ordered.trace_log is not None
    names = pt.IntelPT.EVENTS
    samples = [(names[s.event], s.tid, s.cpu, _ns(s.time), s.ip) for s in ordered.trace_log]
    errors = [(e.code, e.cpu, e.tid, _ns(e.time), e.ip) for e in ordered.trace.pt.errors]
    return samples, errors


# ---- tests ------------------------------------------------------------------------


def test_packets_are_perfs() -> None:
    dumps = _perf_dump(FILE)
    ours = _payloads(FILE)
    assert len(dumps) == len(ours) == 2
    for dump, (_head, data) in zip(dumps, ours, strict=True):
        mine = [(p.offset, p.length, _describe(p)) for p in pt.packets(data)]
        # perf prints PAD's and a PSB's description without arguments; all else as is
        assert mine == dump
        kinds = {p.kind for p in pt.packets(data)}
        assert {pt.PSB, pt.PSBEND, pt.FUP, pt.TIP, pt.TIP_PGE, pt.TIP_PGD, pt.TNT} <= kinds
        assert {pt.TSC, pt.TMA, pt.MTC, pt.CBR, pt.PIP, pt.MODE_EXEC, pt.MODE_TSX} <= kinds


def test_synthesized_samples_and_errors_are_perfs() -> None:
    theirs_samples, theirs_errors = _perf_script(FILE)
    samples, errors = _ours(_bpfsym_pass(FILE))
    assert {s[0] for s in theirs_samples} == {"cbr", "psb"}
    assert samples == theirs_samples  # same events, tasks, cpus, times (ns) and ips
    assert len(theirs_errors) > 100
    assert errors == theirs_errors  # every "instruction trace error" at the same time


def test_piped_copy_reads_as_perf_reads_it_through_a_pipe() -> None:
    theirs_samples, theirs_errors = _perf_script(PIPED, piped=True)
    samples, errors = _ours(_bpfsym_pass(PIPED))
    assert theirs_samples and samples == theirs_samples
    assert errors == theirs_errors


def _table(text: str, event: str) -> dict[tuple[str, ...], str]:
    """A perf/bpfsym --stdio table of one event: {(comm, dso, sym): percent}."""
    rows: dict[tuple[str, ...], str] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("# Samples:"):
            inside = f"event '{event}'" in line
            continue
        m = re.match(r"^\s+(\d+\.\d+)%\s+(?:\d+\s+)?(\S+)\s+(\S+)\s+(\[.\] \S+)\s*$", line)
        if inside and m:
            rows[(m[2], m[3], m[4])] = m[1]
    return rows


@pytest.mark.parametrize("path", [FILE, PIPED], ids=os.path.basename)
def test_report_tables_of_the_synthesized_events_are_perfs(path: str) -> None:
    argv = ["report", "--stdio", "--no-children", "-g", "none", "--sort", "comm,dso,sym", "-n"]
    if path == PIPED:
        theirs = _perf([*argv, "-i", "-"], stdin_path=path)
    else:
        theirs = _perf([*argv, "-i", path])
    bpfsym = [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--stdio"]
    p = subprocess.run(
        [*bpfsym, "--no-side", "--sort", "comm,dso,sym"],
        capture_output=True,
        timeout=300,
        check=True,
    )
    ours = p.stdout.decode()
    for event in ("cbr", "psb"):
        assert _table(theirs, event), event
        assert _table(ours, event) == _table(theirs, event)


def _decode_all(buffers: list[tuple[tuple[int, ...], bytes]], config: pt.PtConfig) -> int:
    """Every sample the decoder makes from these buffers, no side-band."""
    ipt = pt.IntelPT(config)
    for head, data in buffers:
        size, _off, ref, idx, tid, cpu, _ = head
        ipt.add_buffer(idx, cpu, tid, ref, data=data)
    n = 0
    for t in range(641_256_000_000, 641_259_000_000, 50_000_000):
        n += len(ipt.process(t))
    return n + len(ipt.flush())


@cache
def _config() -> tuple[pt.PtConfig, tuple[tuple[tuple[int, ...], bytes], ...]]:
    with PerfData(FILE) as pd:
        for _ in pd.records():
            if pd.auxtrace_info is not None:
                break
        assert pd.auxtrace_info is not None
        config = pt.PtConfig.of(pd.auxtrace_info[1], pd.attrs)
    return config, tuple(_payloads(FILE))


@settings(max_examples=40)
@given(
    which=st.integers(0, 1),
    start=st.integers(0, 1 << 20),
    length=st.integers(0, 6000),
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=40),
    junk=st.binary(max_size=64),
)
def test_mutated_trace_gives_a_reading_never_an_exception(
    which: int, start: int, length: int, flips: list[tuple[int, int]], junk: bytes
) -> None:
    config, buffers = _config()
    head, data = buffers[which]
    a = start % max(len(data), 1)
    cut = bytearray(data[a : a + length]) + junk
    for at, value in flips:
        if cut:
            cut[at % len(cut)] = value
    _decode_all([(head, bytes(cut)), buffers[1 - which]], config)


def _mutant(tmp: str, data: bytes, edits: list[tuple[int, int]]) -> str:
    b = bytearray(data)
    for at, value in edits:
        b[at % len(b)] = value
    path = os.path.join(tmp, "mutant.data")
    with open(path, "wb") as f:
        f.write(b)
    return path


@settings(max_examples=15)
@given(
    edits=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8)
)
def test_mutated_file_is_read_or_refused_with_a_format_error(edits: list[tuple[int, int]]) -> None:
    with open(FILE, "rb") as f:
        data = f.read()
    with PerfData(FILE) as pd:
        heads = [at for _h, at in pd.auxtrace_buffers()]
    # most edits land in the AUX payloads (the records around them are fuzzed elsewhere)
    edits = [(heads[i % 2] + at % 60_000 if i % 3 else at, v) for i, (at, v) in enumerate(edits)]
    with tempfile.TemporaryDirectory() as tmp:
        path = _mutant(tmp, data, edits)
        try:
            an: Any = analyze(path, keys=["dso"], accelerate=False)
        except FormatError:
            return
        assert an.total_samples >= 0


def test_other_trace_types_are_skipped_with_a_note() -> None:
    # the corpus file with its AUXTRACE_INFO retyped as ARM CoreSight ETM (3): its own
    # events read as perf reads the original file, no synthesized ones, and a note why
    with open(FILE, "rb") as f:
        data = bytearray(f.read())
    with PerfData(FILE) as pd:
        for _rtype, _misc, _buf, _start, _size, off in pd.records():
            if _rtype == 70:  # PERF_RECORD_AUXTRACE_INFO: u32 type after the header
                data[off + 8 : off + 12] = (3).to_bytes(4, "little")
                break
    theirs = _perf(["report", "-i", FILE, "--stdio", "--no-children", "-g", "none",
                    "--sort", "comm,dso,sym"])  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "etm.data")
        with open(path, "wb") as f:
            f.write(data)
        p = subprocess.run(
            [sys.executable, "-P", "-m", "bpfsym", "report", "-i", path, "--stdio", "--no-side",
             "--sort", "comm,dso,sym"],
            capture_output=True, timeout=300, check=True,
        )  # fmt: skip
    ours = p.stdout.decode()
    assert "ARM CoreSight ETM AUX-area trace is not decoded" in ours
    assert "of event 'cbr'" not in ours and "of event 'psb'" not in ours
    assert _cycles_rows(ours) == _cycles_rows(theirs) != {}


def _cycles_rows(text: str) -> dict[tuple[str, ...], str]:
    rows: dict[tuple[str, ...], str] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("# Samples:"):
            inside = "event 'cycles'" in line
            continue
        m = re.match(r"^\s+(\d+\.\d+)%\s+(?:\d+\s+)?(\S+)\s+(\S+)\s+(\[.\] \S+)\s*$", line)
        if inside and m and float(m[1]) >= 0.5:
            rows[(m[2], m[3], m[4])] = m[1]
    return rows
