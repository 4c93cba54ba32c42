"""annotate's bulk readings answer as the plain ones they replace on big files.

- the heat pass in bulk (annotate.heat, numpy over read.bulk's windows) counts what the
  record-by-record pass counts, on every perf.data fixture and corpus file it takes;
- placing samples per address and stretch of time (heat.place) gives what the timeline's
  per-sample pick gives;
- kallsyms names read column-wise from the texts (annotate.ksyms.TextNames) are those of
  the parsed list (KernelNames over read.kallsyms.capture_kernel_symbols).
"""

from __future__ import annotations

import glob
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bpfsym.annotate import beside as beside_mod
from bpfsym.annotate import heat
from bpfsym.annotate.beside import Beside
from bpfsym.annotate.ksyms import KernelNames, TextNames
from bpfsym.errors import FormatError
from bpfsym.model import Capture, Function, Program
from bpfsym.read.bulk import NotBulk
from bpfsym.read.kallsyms import capture_kernel_symbols, parse_kallsyms
from bpfsym.read.perfdata import PerfData
from bpfsym.read.sidefile import read_capture
from bpfsym.symbolize.symbols import FROM_SIDE
from bpfsym.symbolize.timeline import BpfFunc, BpfTimeline, capture_timeline

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
SIDE = os.path.join(FIX, "sidefile", "side.data")
DATA = sorted(
    glob.glob(os.path.join(FIX, "perfdata", "*.data"))
    + glob.glob(os.path.join(FIX, "dwarf", "*.data"))
    + [
        p
        for p in glob.glob(os.path.join(FIX, "perfdata-corpus", "*"))
        if not p.endswith((".md", ".tsv"))
    ]
)


def everything(cut: int | None) -> BpfTimeline:
    """A timeline whose functions cover every address: one program before time cut,
    another from it on (so that each sample's ip and time both matter)."""
    tl = BpfTimeline()
    first, second = Program(1, "a", "0" * 16, 6), Program(2, "b", "1" * 16, 6)
    tl.add(BpfFunc("a", 0, (1 << 64) - 1, None, cut, FROM_SIDE, first))
    tl.add(BpfFunc("b", 0, (1 << 64) - 1, cut, None, FROM_SIDE, second))
    return tl


def bulk_counts(path: str, timeline: BpfTimeline) -> heat.Heat | None:
    """The bulk reading's counts, None where it declines the file (or cannot open it)."""
    try:
        pd = PerfData(path)
    except FormatError:
        return None
    with pd:
        data = heat._bulk_data(pd, np)
        if data is None:
            return None
        try:
            return heat._bulk_counts(pd, data, np, timeline)
        except NotBulk:
            return None


def test_the_side_file_fixtures_heat_in_bulk_is_the_record_by_record_one() -> None:
    timeline = capture_timeline(read_capture(SIDE + ".bpfsym"), FROM_SIDE)
    got = bulk_counts(SIDE, timeline)
    want = heat._record_counts(SIDE, timeline, None)
    assert got == want and sum(sum(v.values()) for v in want.values()) > 500


def test_bulk_heat_at_the_ends_of_the_address_space() -> None:
    """No functions at all ([lo, hi) empty), and one reaching past the last u64."""
    data = os.path.join(FIX, "perfdata", "bpf.data")
    assert bulk_counts(data, BpfTimeline()) == {} == heat._record_counts(data, BpfTimeline(), None)
    tl = BpfTimeline()
    tl.add(BpfFunc("top", 1 << 63, 1 << 63, None, None, FROM_SIDE, Program(3, "t", "2" * 16, 6)))
    assert tl.hi == 1 << 64
    want = heat._record_counts(data, tl, None)
    assert want and bulk_counts(data, tl) == want


def sample_times(path: str) -> list[int]:
    """The times of the file's samples, by the record reader ([] when it fails)."""
    out = []
    try:
        with PerfData(path) as pd:
            for rtype, _misc, buf, start, size, _off in pd.records():
                if rtype != 9:
                    continue
                ev = pd.attr_of_sample(buf, start, size)
                at = ev.field_index("time")
                if at >= 0 and ev.prefix.size + 8 <= size:
                    out.append(ev.prefix.unpack_from(buf, start + 8)[at])
    except FormatError:
        return []
    return out


@pytest.mark.parametrize("path", DATA, ids=os.path.basename)
def test_bulk_heat_counts_every_sample_as_the_record_reader(path: str) -> None:
    times = sorted(sample_times(path))
    tl = everything(times[len(times) // 2] if times else None)
    try:
        want = heat._record_counts(path, tl, None)
    except FormatError:
        assert bulk_counts(path, tl) is None  # what the record reader refuses, so does bulk
        return
    got = bulk_counts(path, tl)
    assert got is None or got == want


@given(
    st.lists(
        st.tuples(
            st.integers(0, 40),  # start
            st.integers(0, 12),  # size
            st.one_of(st.none(), st.integers(0, 50)),  # load
            st.one_of(st.none(), st.integers(0, 50)),  # unload
        ),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=60),
)
def test_placing_by_stretch_of_time_is_the_timelines_pick(
    funcs: list[tuple[int, int, int | None, int | None]], samples: list[tuple[int, int]]
) -> None:
    tl = BpfTimeline()
    for k, (addr, size, load, unload) in enumerate(funcs):
        prog = Program(k + 1, f"p{k}", f"{k:016x}", 6)
        tl.add(BpfFunc(f"f{k}", addr, size, load, unload, FROM_SIDE, prog))
    want: dict[int, dict[int, int]] = {}
    inside = [(ip, t) for ip, t in samples if tl.lo <= ip < tl.hi]
    for ip, t in inside:
        fn = BpfTimeline.pick(tl.candidates(ip), t)
        if fn is not None and fn.prog is not None:
            per = want.setdefault(fn.prog.id, {})
            per[ip] = per.get(ip, 0) + 1
    ips = np.array([ip for ip, _ in inside], dtype=np.uint64)
    ts = np.array([t for _, t in inside], dtype=np.uint64)
    assert heat.place(np, tl, ips, ts) == want


def check_names(texts: list[str], probes: list[int], names: list[str]) -> None:
    fast = TextNames.from_texts(texts, np)
    assert fast is not None
    cap = Capture(None, kallsyms_texts=texts)  # type: ignore[arg-type]
    slow = KernelNames(capture_kernel_symbols(cap))
    for a in probes:
        assert fast.first_at(a) == slow.first_at(a), hex(a)
        assert fast.floor(a) == slow.floor(a), hex(a)
    for n in names:
        assert fast.find(n) == slow.find(n), n


def test_the_side_file_fixtures_kallsyms_names_read_in_place() -> None:
    cap = read_capture(SIDE + ".bpfsym")
    texts = cap.kallsyms_texts
    syms = parse_kallsyms("".join(texts))
    assert len(syms) > 1000
    picked = syms[:: max(len(syms) // 3000, 1)]
    probes = [s.addr for s in picked] + [s.addr + 7 for s in picked]
    probes += [0, 1 << 63, (1 << 64) - 1, 1 << 64]  # past the last address too
    names = [s.name for s in picked[:300]] + ["__bpf_call_base", "no_such_symbol"]
    check_names(texts, probes, names)


LINE = st.tuples(
    st.integers(0, 12),  # address (small: aliases and ties are frequent)
    st.sampled_from("tTwWdDbBr"),
    st.sampled_from(["f", "g", "h", "f_x", "xf"]),
    st.sampled_from(["", "\t[mod]"]),
)


@given(st.lists(st.lists(LINE, max_size=12), min_size=1, max_size=3))
def test_text_names_are_the_parsed_lists_names(texts: list[list[tuple]]) -> None:
    out = ["".join(f"{a:016x} {t} {n}{m}\n" for a, t, n, m in lines) for lines in texts]
    check_names(out, list(range(-1, 15)), ["f", "g", "h", "f_x", "xf", "x"])


@given(st.lists(st.lists(LINE, max_size=12), min_size=1, max_size=3))
def test_text_names_of_8_digit_addresses_are_the_parsed_lists_names(
    texts: list[list[tuple]],
) -> None:
    # a 32-bit kernel's kallsyms: the address column is 8 digits wide
    out = ["".join(f"{a:08x} {t} {n}{m}\n" for a, t, n, m in lines) for lines in texts]
    check_names(out, list(range(-1, 15)) + [1 << 32, 1 << 64], ["f", "g", "x"])


@pytest.mark.parametrize(
    "text",
    [
        "0000000000000010 t a\n0010 t b\n",
        "0000000000000010 t\n",  # no name: parse_kallsyms skips the line
        "\n0000000000000010 t a\n",
        "0000000000000010  t a\n",
        "0000000000000010 t a\r0000000000000020 t b\n",  # splitlines() breaks at \r
        "0x00000000000010 t a\n",  # int(, 16) would read it
        "000000000000001g t a\n",
        "0000000000000010 t \u00e9\n",
    ],
)
def test_texts_that_are_not_plain_kallsyms_go_to_the_parser(text: str) -> None:
    assert TextNames.from_texts([text], np) is None


def test_counting_beside_gives_the_counts_and_the_errors_of_counting_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(beside_mod, "BESIDE_MIN_BYTES", 0)  # the fixture is small
    monkeypatch.setattr(beside_mod, "usable_cpus", lambda: 2)
    cap = read_capture(SIDE + ".bpfsym")
    beside = Beside(SIDE)  # forked before the side file is read
    assert beside.pid is not None
    beside.send(cap)
    assert beside.result(cap) == heat.bpf_sample_counts(SIDE, cap) != {}
    # more programs than a pipe holds by default (64 KiB): sent in one write all the same
    many = Capture(cap.header, list(cap.programs))
    for i in range(3000):
        p = Program(10**6 + i, f"extra{i}", "0" * 16, 6, None, None)
        p.functions = [Function(f"bpf_prog_{i:016x}_extra{i}", 0x1000 + 64 * i, 48)]
        many.programs.append(p)
    beside = Beside(SIDE)
    beside.send(many)
    assert beside.tell == -1  # sent: the child counts
    assert beside.result(many) == heat.bpf_sample_counts(SIDE, cap)
    # a data section cut short: the child fails, and counting here says why
    cut = tmp_path / "cut.data"
    with open(SIDE, "rb") as f:
        cut.write_bytes(f.read()[:-100])
    with pytest.raises(FormatError) as here:
        heat.bpf_sample_counts(str(cut), cap)
    beside = Beside(str(cut))
    with pytest.raises(FormatError) as there:
        beside.result(cap)  # (sends first when the caller has not)
    assert str(there.value) == str(here.value)
    Beside(SIDE).close()  # ended before it was sent anything: no child left
    beside = Beside(SIDE)
    beside.send(cap)
    beside.close()  # ended before its result
