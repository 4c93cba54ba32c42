"""The numpy accelerator of bpfsym report gives the same reports as the pure-Python reader.

Fixtures are perf.data files recorded on a real kernel (tests/fixtures/perfdata);
the pure-Python path is the record-by-record reader, checked against perf elsewhere.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.formats.errors import FormatError
from bpfsym.read.bulk import NotBulk
from bpfsym.read.kallsyms import (
    SEARCHES_IN_PLACE,
    KernelSymbols,
    SortedKallsyms,
    capture_kernel_symbols,
)
from bpfsym.read.perfdata import PerfData
from bpfsym.report.analysis import NUMPY_MIN_BYTES, analyze
from bpfsym.report.render import render_folded, render_json, render_stdio

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "perfdata")
EMPTY = os.devnull  # an empty kallsyms file: the same (no) kernel symbols on any host


def rendered(
    path: str, keys: list[str], graph: bool, bpf_only: bool, fast: bool, parallel: bool = False
) -> str:
    an = analyze(path, None, keys, graph, bpf_only, EMPTY, None, fast, parallel)
    assert an.accelerated == fast
    out = render_stdio(an, None, 0.0) + render_json(an, None)
    return out + (render_folded(an) if graph else "")


def _watch_windows(monkeypatch: Any) -> tuple[list[tuple[int, list, list]], list[int]]:
    """What the bulk pass's Rounds.take is given of each window with samples (how many
    waiting samples it carries, then its own samples' seqs and their record times) and
    how many waiting samples each join (rounds._concat) takes."""
    from bpfsym.report import rounds

    seen: list[tuple[int, list, list]] = []
    joined: list[int] = []
    take, concat = rounds.Rounds.take, rounds._concat

    def noting_take(self: rounds.Rounds, w: Any, last: bool) -> Any:
        if w.samples is not None:
            own = w.samples["seq"][w.carried :].tolist()
            seen.append((w.carried, own, w.times[w.sample_at].tolist()))
        return take(self, w, last)

    def noting_concat(np_: Any, a: Any, b: Any) -> Any:
        joined.append(len(a["off"]))
        return concat(np_, a, b)

    monkeypatch.setattr(rounds.Rounds, "take", noting_take)
    monkeypatch.setattr(rounds, "_concat", noting_concat)
    return seen, joined


@pytest.mark.parametrize("name", ["bpf", "multi"])
@pytest.mark.parametrize("keys,graph", [(["comm", "dso", "sym"], False), (["pid", "sym"], True)])
def test_samples_waiting_across_many_windows_go_out_as_the_pure_python_reader_delivers(
    name: str, keys: list[str], graph: bool, monkeypatch
) -> None:
    # windows of 4 kB: samples whose round flush comes in a later window wait for it,
    # read again ahead of that window's own (window.WindowReader.read's carry) or, when
    # they outnumber them (these files' rounds are far apart), joined to them
    from bpfsym.report import bulk

    path = os.path.join(FIX, f"{name}.data")
    seen, joined = _watch_windows(monkeypatch)
    whole = rendered(path, keys, graph, False, True)
    # each sample's record time, from one window (nothing carried)
    times = {q: t for _, own, ts in seen for q, t in zip(own, ts, strict=True)}
    seen.clear()
    monkeypatch.setattr(bulk, "SINGLE", bulk.Share(4096, None))
    assert rendered(path, keys, graph, False, True) == whole
    assert whole == rendered(path, keys, graph, False, False)
    waited = sum(1 for c, _, _ in seen if c) + len(joined)  # windows that took earlier samples
    assert len(seen) > 10 and waited > len(seen) // 2
    timed = [(q, t) for _, own, ts in seen for q, t in zip(own, ts, strict=True)]
    assert len(timed) == len(times) and all(times[q] == t for q, t in timed)


@pytest.mark.parametrize("round_every", [7, 0])
def test_samples_waiting_in_many_windows_are_joined_not_read_again(
    tmp_path: object, round_every: int, monkeypatch
) -> None:
    # without round flushes (0: one at the end) every sample waits for the last window:
    # those waiting outnumber a window's own, and Rounds.take joins them (read again
    # each window, they would be read a window's count of times); with rounds every 7
    # samples a few wait, and the window's gather reads them again
    from kit.perfdata_builder import build_file

    from bpfsym.formats import perf as K
    from bpfsym.report import bulk

    st_ = K.SAMPLE_IDENTIFIER | K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME | K.SAMPLE_CPU
    path = os.path.join(str(tmp_path), "built.data")
    with open(path, "wb") as f:
        f.write(build_file(True, st_, n=3000, round_every=round_every))
    whole = rendered(path, ["comm", "dso", "sym"], False, False, True)
    monkeypatch.setattr(bulk, "SINGLE", bulk.Share(4096, None))
    seen, joined = _watch_windows(monkeypatch)
    assert rendered(path, ["comm", "dso", "sym"], False, False, True) == whole
    assert whole == rendered(path, ["comm", "dso", "sym"], False, False, False)
    carried = [c for c, _, _ in seen]
    assert "# Samples: 3K" in whole and len(carried) > 20
    if round_every:
        assert not joined and sum(1 for c in carried if c) > len(carried) // 2
    else:
        assert sum(1 for c in carried if c) <= 1 and len(joined) > 20
        assert joined == sorted(joined)  # all of them waiting, more each window


@pytest.mark.parametrize("name", ["bpf", "multi"])
@pytest.mark.parametrize(
    "keys,graph,bpf_only",
    [
        (["comm", "dso", "sym"], False, False),
        (["comm", "dso", "sym"], True, False),
        (["sym"], False, False),
        (["pid", "cpu", "sym"], True, False),
        (["prog", "func", "srcline"], False, True),
        (["cpu", "srcline"], True, True),
    ],
)
def test_numpy_and_pure_python_reports_are_identical(
    name: str, keys: list[str], graph: bool, bpf_only: bool
) -> None:
    path = os.path.join(FIX, f"{name}.data")
    fast = rendered(path, keys, graph, bpf_only, True)
    assert fast == rendered(path, keys, graph, bpf_only, False)
    assert "# Samples:" in fast
    # two processes, each with part of the samples (the file cut in five windows)
    assert rendered(path, keys, graph, bpf_only, True, parallel=True) == fast


def test_a_failing_second_process_leaves_the_report_to_the_plain_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bpfsym.report import split

    def broken(bulk: object) -> tuple:
        raise RuntimeError("child went wrong")  # only the forked child calls this

    monkeypatch.setattr(split, "portable", broken)
    path = os.path.join(FIX, "bpf.data")
    an = analyze(path, None, None, True, False, EMPTY, None, True, True)
    assert not an.accelerated  # the record-by-record reader did it instead
    want = analyze(path, None, None, True, False, EMPTY, None, False)
    assert render_stdio(an, None, 0.0) == render_stdio(want, None, 0.0)


def test_a_second_process_cut_off_mid_message_leaves_the_report_to_the_plain_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child's sums are unpickled as they are written: a message that stops in the
    middle (here: pickling fails after the first frames went out) is the child's failure."""
    from bpfsym.report import split

    def half(bulk: object) -> tuple:
        return (list(range(100000)), lambda: None)  # the lambda does not pickle

    monkeypatch.setattr(split, "portable", half)
    path = os.path.join(FIX, "bpf.data")
    an = analyze(path, None, None, True, False, EMPTY, None, True, True)
    assert not an.accelerated
    want = analyze(path, None, None, True, False, EMPTY, None, False)
    assert render_stdio(an, None, 0.0) == render_stdio(want, None, 0.0)


@pytest.mark.parametrize("little", [True, False])
def test_built_files_of_both_byte_orders_read_alike_every_way(tmp_path: object, little: bool):
    # samples with call chains, rounds every 7 samples and losses on both sides of the
    # middle: one process or two, numpy or not, little- or big-endian
    from kit.perfdata_builder import build_file

    from bpfsym.formats import perf as K

    st_ = K.SAMPLE_IDENTIFIER | K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME | K.SAMPLE_CPU
    st_ |= K.SAMPLE_PERIOD | K.SAMPLE_CALLCHAIN
    path = os.path.join(str(tmp_path), "built.data")
    with open(path, "wb") as f:
        f.write(build_file(little, st_, n=400, round_every=7, lost_at=(50, 350)))
    out = []
    for fast, parallel in ((False, False), (True, False), (True, True)):
        for graph in (False, True):
            an = analyze(path, None, ["pid", "cpu", "sym"], graph, False, EMPTY, None, fast,
                         parallel)  # fmt: skip
            assert an.accelerated == fast and an.lost == 10 and an.total_samples == 400
            out.append(render_stdio(an, None, 0.0) + render_json(an, None))
    assert out[0] == out[2] == out[4] and out[1] == out[3] == out[5]
    assert "0xffffffff8100018f" in out[0]  # sample 399's address, unresolved without kallsyms


@pytest.mark.parametrize("dummy_at", [(), (100, 300)])
@pytest.mark.parametrize("longer", [False, True])
def test_a_second_event_of_another_sample_layout(
    tmp_path: object, dummy_at: tuple, longer: bool
) -> None:
    # perf -a without -F: its dummy:HG side-band event has no PERIOD. The fast reader takes
    # the file while none of the dummy's samples shows up, and leaves it to the plain
    # reader when one does; the report is the same every way. `longer`: a dummy layout
    # whose samples are no shorter than the first event's (ADDR shifts the fields after
    # ip; RAW adds bytes), so only the event of each sample tells them apart
    from kit.perfdata_builder import build_file

    from bpfsym.formats import perf as K

    common = K.SAMPLE_IDENTIFIER | K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME | K.SAMPLE_CPU
    st_ = common | K.SAMPLE_PERIOD | (0 if longer else K.SAMPLE_CALLCHAIN)
    dummy = common | (K.SAMPLE_ADDR | K.SAMPLE_RAW if longer else 0)
    path = os.path.join(str(tmp_path), "two.data")
    with open(path, "wb") as f:
        f.write(build_file(True, st_, n=400, round_every=7, dummy=dummy, dummy_at=dummy_at))

    def check(an: Any, fast: bool) -> None:
        assert an.accelerated == (fast and not dummy_at)
        assert an.total_samples == 400 + len(dummy_at)

    _alike_three_ways(path, check)


def _alike_three_ways(path: str, check: Callable[[Any, bool], None]) -> None:
    """The call-graph report of path read record by record, with numpy, and with numpy
    in two processes: the same text and JSON; check(analysis, numpy or not) on each."""
    out = []
    for fast, parallel in ((False, False), (True, False), (True, True)):
        an = analyze(path, None, ["pid", "cpu", "sym"], True, False, EMPTY, None, fast, parallel)
        check(an, fast)
        out.append(render_stdio(an, None, 0.0) + render_json(an, None))
    assert out[0] == out[1] == out[2]


def test_times_of_another_process_share_are_the_samples_and_zero_for_the_rest(
    tmp_path: object,
) -> None:
    # the second reading process reads only the times of the first one's records: one
    # gather for all, the last record (a one-word FINISHED_ROUND) reading inside the data
    from kit.perfdata_builder import build_file

    from bpfsym.formats import perf as K
    from bpfsym.report.window import SampleHeads

    st_ = K.SAMPLE_IDENTIFIER | K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME | K.SAMPLE_CPU
    st_ |= K.SAMPLE_PERIOD | K.SAMPLE_CALLCHAIN
    for little in (True, False):
        path = os.path.join(str(tmp_path), f"t{little}.data")
        with open(path, "wb") as f:
            f.write(build_file(little, st_, n=50, round_every=7, lost_at=(20,)))
        with PerfData(path) as pd:
            data = pd.bulk(np)
            assert data is not None
            starts = np.concatenate(list(data.windows()))
            assert int(starts[-1]) == data.nwords - 1  # the closing FINISHED_ROUND
            types = [rtype for rtype, *_ in pd.records()]
            other = np.array([i for i, t in enumerate(types) if t != K.RECORD_SAMPLE])
            heads = SampleHeads(pd, data, np)
            sample_at = np.flatnonzero(np.array(types) == K.RECORD_SAMPLE)
            want = np.zeros(len(starts), dtype=np.uint64)
            want[sample_at] = heads.decode(starts[sample_at], sample_at + 1)["t"]
            got = heads.times(starts, other)
        assert got.dtype == np.uint64 and got.tolist() == want.tolist()
        assert len(set(want[sample_at].tolist())) == 50


@pytest.mark.parametrize("masks", [8, 0])  # one comparison per id, or a search
def test_each_sample_is_of_the_event_its_id_names(tmp_path: object, monkeypatch, masks) -> None:
    # two events of one layout (ids 7 and 8) and a sample of an id no event has (the
    # first event's, as the record-by-record reader takes it): the event of each is the
    # one the file's id table (PerfData.id_to_attr) names
    from kit.perfdata_builder import build_file

    from bpfsym.formats import perf as K
    from bpfsym.report import window

    monkeypatch.setattr(window, "ID_MASKS", masks)
    st_ = K.SAMPLE_IDENTIFIER | K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME | K.SAMPLE_CPU
    st_ |= K.SAMPLE_PERIOD | K.SAMPLE_CALLCHAIN
    for little in (True, False):
        blob = bytearray(build_file(little, st_, n=30, dummy=st_, dummy_at=(3, 9, 14, 29)))
        path = os.path.join(str(tmp_path), f"ids{little}.data")
        with open(path, "wb") as f:
            f.write(blob)
        with PerfData(path) as pd:
            samples = [off for rtype, *_, off in pd.records() if rtype == K.RECORD_SAMPLE]
        # SAMPLE_IDENTIFIER: the id is the first word after the header
        struct.pack_into("<Q" if little else ">Q", blob, samples[5] + 8, 99)
        with open(path, "wb") as f:
            f.write(blob)
        with PerfData(path) as pd:
            data = pd.bulk(np)
            assert data is not None
            ids = [
                struct.unpack_from("<Q" if little else ">Q", blob, off + 8)[0] for off in samples
            ]
            want = [pd.id_to_attr[i].index if i in pd.id_to_attr else 0 for i in ids]
            starts = np.array([(off - pd.data_offset) // 8 for off in samples], dtype=np.int64)
            got = window.SampleHeads(pd, data, np).decode(starts, starts + 1)
        assert got is not None and got["ev"].tolist() == want
        assert want.count(1) == 4 and ids.count(99) == 1 and want[5] == 0


def test_bulk_walk_finds_every_record() -> None:
    for name in ("bpf", "multi"):
        pd = PerfData(os.path.join(FIX, f"{name}.data"))
        with pd:
            want = [(off - pd.data_offset) // 8 for *_, off in pd.records()]
            bulk = pd.bulk(np)
            assert bulk is not None
            got = np.concatenate(list(bulk.windows(window=4096))).tolist()
            assert got == want and len(got) > 500


def _corrupt(blob: bytes, at: int, value: int) -> bytes:
    data_off = struct.unpack_from("<Q", blob, 40)[0]  # perf_file_header.data.offset
    b = bytearray(blob)
    struct.pack_into("<H", b, data_off + at + 6, value)  # a record's header.size
    return bytes(b)


@pytest.mark.parametrize("value", [0, 3, 12, 0xFFF8])
def test_bad_record_size_gives_the_same_error_either_way(tmp_path: object, value: int) -> None:
    blob = open(os.path.join(FIX, "bpf.data"), "rb").read()
    bad = os.path.join(str(tmp_path), "bad.data")
    with open(bad, "wb") as f:
        f.write(_corrupt(blob, 0, value))
    pd = PerfData(bad)
    with pd, pytest.raises(NotBulk):
        list(pd.bulk(np).windows())  # type: ignore[union-attr]
    errors = []
    for fast in (True, False):
        with pytest.raises(FormatError) as e:
            analyze(bad, None, None, True, False, EMPTY, None, accelerate=fast)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and bad in errors[0]


def _kallsyms_lines() -> list[str]:
    """Kernel-looking kallsyms lines from a fixture's BPF lines, renamed and typed anew."""
    out = []
    with open(os.path.join(FIX, "bpf.kallsyms-bpf.txt")) as f:
        for i, line in enumerate(f):
            addr, _t, name = line.split()[:3]
            out.append(f"{addr} {'tTdbW'[i % 5]} k_{name}" + ("\t[mod]" if i % 3 == 0 else ""))
    return out


def test_kallsyms_columns_agree_with_line_parsing() -> None:
    lines = _kallsyms_lines()
    text = "\n".join([*lines, lines[0].replace(" k_", " again_"), "0000000000000000 T zero"])
    a = KernelSymbols.from_text(text + "\n", "x", np=np)
    b = KernelSymbols.from_text(text + "\n", "x")
    assert a._line is not None  # the numpy reading was used
    assert a.addrs == b.addrs and a.syms == b.syms and len(a) >= 4
    for ip in (a.addrs[0] - 1, a.addrs[0], a.addrs[-1] + 100, a.addrs[1] + 3):
        assert a.lookup(ip) == b.lookup(ip)
    # one-by-one lookups: in the numpy column first, over a list of addresses once many
    c = KernelSymbols.from_text(text + "\n", "x", np=np)
    probes = [x + d for x in b.addrs for d in (-1, 0, 1, 7)] + [0, 2**64 - 1]
    for ip in probes * (SEARCHES_IN_PLACE // len(probes) + 2):
        assert c.index(ip) == b.index(ip), hex(ip)
    assert c._addrs is not None  # the list was made


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**64 - 1),
            st.sampled_from("TtWwDdBbulAaRrNn?"),
            st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1,
                    max_size=12),
            st.sampled_from(["", "\t[ext4]", "\t[bpf]", " x"]),
        ),
        max_size=30,
    ),
    st.sampled_from([16, 8]),
)  # fmt: skip
def test_kallsyms_reading_is_the_same_on_any_text(rows: list, width: int) -> None:
    text = "".join(f"{a % (1 << (4 * width)):0{width}x} {t} {n}{m}\n" for a, t, n, m in rows)
    a = KernelSymbols.from_text(text, "x", np=np)
    b = KernelSymbols.from_text(text, "x")
    assert a.addrs == b.addrs and a.syms == b.syms
    # as read from a file: bytes, decoded a line at a time (or whole where not ASCII)
    for raw in (text.encode(), text.encode()[:-1]):
        c = KernelSymbols.from_text(raw, "x", np=np)
        assert c.addrs == b.addrs and c.syms == b.syms


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**64 - 1),
            st.sampled_from("TtWwDdBbulAaRrNn"),
            st.text(st.characters(min_codepoint=33, max_codepoint=0x7E), min_size=1,
                    max_size=12),
        ),
        max_size=400,
    ),
    st.lists(
        st.tuples(st.integers(0, 2**64 - 1), st.sampled_from("tTdD"), st.sampled_from("ab")),
        max_size=8,
    ),
    st.lists(st.integers(0, 2**64 - 1), max_size=40),
)  # fmt: skip
def test_kallsyms_looked_up_in_place_answer_as_read_in_full(
    core: list, mods: list, ips: list
) -> None:
    # the kernel's own lines sorted by address (as /proc/kallsyms has them), then modules;
    # hundreds of lines, so lookups cross SortedKallsyms' 4 KB windows
    core = sorted(core, key=lambda r: r[0])
    text = "".join(f"{a:016x} {t} {n}\n" for a, t, n in core)
    text += "".join(f"{a:016x} {t} m_{n}\t[mod_{n}]\n" for a, t, n in mods)
    full = KernelSymbols.from_text(text, "x", np=np)
    here = SortedKallsyms(text, "x")
    assert here.syms == full.syms
    if full.syms:
        assert len(here)
    if not any(a for a, _, _ in core) and not mods:
        assert not len(here)  # every address zero: kptr_restrict hides them
    probes = ips + [a + d for a in full.addrs[:50] for d in (-1, 0, 1)]
    for ip in probes:
        assert here.lookup(ip) == full.lookup(ip), hex(ip)


def test_side_file_kallsyms_read_three_ways_answer_alike() -> None:
    # a side file keeps /proc/kallsyms' kernel part and the [bpf] trampoline lines as
    # text; report reads the text itself (in place, or with numpy), others parse it
    from bpfsym.model import Capture, CaptureHeader
    from bpfsym.symbolize.kernel import kernel_symbols as _kernel_symbols

    # as /proc/kallsyms has it: the kernel's own lines by address, then module lines
    lines = [x.split("\t")[0] for x in _kallsyms_lines()]
    kernel = "".join(f"{line}\n" for line in sorted(lines, key=lambda x: int(x.split()[0], 16)))
    kernel += "ffffffffc0100000 t mod_fn\t[some_mod]\n"
    bpf = "ffffffffc0200000 t bpf_trampoline_6442\t[bpf]\n"
    cap = Capture(CaptureHeader("", "", 0, "", -1, 0), kallsyms_texts=[kernel, bpf])
    here, _ = _kernel_symbols(None, cap, None)  # type: ignore[arg-type]
    full, _ = _kernel_symbols(None, cap, None, np)  # type: ignore[arg-type]
    parsed = KernelSymbols(capture_kernel_symbols(cap), "x")
    assert isinstance(here, SortedKallsyms) and full is not None and here is not None
    assert len(capture_kernel_symbols(cap)) == len(lines) + 2  # the trampoline too, for annotate
    for s in parsed.syms:
        for ip in (s.addr - 1, s.addr, s.addr + 1, 0xFFFFFFFFC0200005):
            assert here.lookup(ip) == full.lookup(ip) == parsed.lookup(ip), hex(ip)


def test_small_files_are_read_without_numpy() -> None:
    # below NUMPY_MIN_BYTES importing numpy would cost more than it saves
    path = os.path.join(FIX, "bpf.data")
    assert os.path.getsize(path) < NUMPY_MIN_BYTES
    an = analyze(path, None, None, False, False, EMPTY, None)
    assert not an.accelerated
    assert render_stdio(an, None, 0.0) == render_stdio(
        analyze(path, None, None, False, False, EMPTY, None, True), None, 0.0
    )


PIPE = open(os.path.join(FIX, "pipe.data"), "rb").read()


def test_streams_take_the_record_by_record_reader() -> None:
    a = analyze("p.data", None, None, True, False, EMPTY, io.BytesIO(PIPE), accelerate=True)
    b = analyze("p.data", None, None, True, False, EMPTY, io.BytesIO(PIPE), accelerate=False)
    assert render_stdio(a, None, 0.0) == render_stdio(b, None, 0.0)


@pytest.mark.parametrize("second_at", [(0,), (150,), (300, 301)])
def test_an_event_first_sampled_in_a_later_delivery(tmp_path: object, second_at: tuple) -> None:
    # a second event of the same layout whose first sample comes after many rounds went
    # out with the first event's only: it is listed, second, with its samples, every way
    from kit.perfdata_builder import build_file

    from bpfsym.formats import perf as K

    st_ = K.SAMPLE_IDENTIFIER | K.SAMPLE_IP | K.SAMPLE_TID | K.SAMPLE_TIME | K.SAMPLE_CPU
    st_ |= K.SAMPLE_PERIOD | K.SAMPLE_CALLCHAIN
    path = os.path.join(str(tmp_path), "later.data")
    with open(path, "wb") as f:
        f.write(build_file(True, st_, n=400, round_every=7, dummy=st_, dummy_at=second_at))

    def check(an: Any, fast: bool) -> None:
        assert an.accelerated == fast and an.total_samples == 400 + len(second_at)
        assert [st.samples for st in an.events.values()] == [400, len(second_at)]

    _alike_three_ways(path, check)
