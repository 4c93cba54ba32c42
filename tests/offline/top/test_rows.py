"""bpfsym top's pure parts: interval deltas, new/vanished programs, sorting, filters, output."""

from __future__ import annotations

import argparse
import csv
import errno
import io
import itertools
import json
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bpfsym.commands import top as top_cmd
from bpfsym.formats import btf as fbtf
from bpfsym.formats.bpf import PROG_TYPES
from bpfsym.formats.errors import FormatError
from bpfsym.live.stats import ProgSample, Snapshot, enable_error, fdinfo_prog_id
from bpfsym.top import render
from bpfsym.top import rows as toprows
from bpfsym.top.holders import KernelTypes, Layout, LayoutError, kernel_layout, program

S = 1_000_000_000


def prog(
    pid: int,
    *,
    run_time: int = 0,
    cnt: int = 0,
    misses: int = 0,
    at: int = 10 * S,
    load: int = 1 * S,
    name: str = "p",
    ptype: int = 6,
) -> ProgSample:
    tag = f"{pid:016x}"
    return ProgSample(
        id=pid, type=ptype, tag=tag, name=name, ksym=f"bpf_prog_{tag}_{name}", load_time=load,
        run_time_ns=run_time, run_cnt=cnt, recursion_misses=misses, time_ns=at,
    )  # fmt: skip


def snap(start: int, *progs: ProgSample) -> Snapshot:
    return Snapshot(start, {p.id: p for p in progs})


def test_continuing_program_deltas() -> None:
    prev = snap(10 * S, prog(7, run_time=5_000, cnt=50, misses=1, at=10 * S))
    cur = snap(12 * S, prog(7, run_time=405_000, cnt=4_050, misses=4, at=12 * S))
    rows, new, gone = toprows.compute_rows(prev, cur, {7: [(99, "loader"), (3, "init")]}, ncpus=4)
    (r,) = rows
    assert (new, gone) == ([], [])
    assert r.interval_ns == 2 * S and r.runs == 4_000 and r.run_ns == 400_000 and r.misses == 3
    assert r.runs_per_s == 2_000.0  # 4000 runs in 2 s
    assert r.avg_ns == 100.0  # 400 us over 4000 runs
    assert r.cpu_one == 0.02  # 400 us of 2 s = 0.02 %
    assert r.cpu_all == 0.005  # of 4 CPUs
    assert (r.run_time_ns, r.run_cnt, r.recursion_misses) == (405_000, 4_050, 4)
    assert r.holders == [(3, "init"), (99, "loader")] and not r.new


def test_each_program_uses_its_own_read_times() -> None:
    prev = snap(10 * S, prog(1, at=10 * S + 1_000), prog(2, at=10 * S + 5_000_000))
    cur = snap(11 * S, prog(1, cnt=10, at=11 * S + 1_000), prog(2, cnt=10, at=11 * S + 25_000_000))
    rows, _, _ = toprows.compute_rows(prev, cur, {}, ncpus=1)
    by_id = {r.id: r for r in rows}
    assert by_id[1].interval_ns == S and by_id[1].runs_per_s == 10.0
    assert by_id[2].interval_ns == S + 20_000_000 and by_id[2].runs_per_s == 10 / 1.02


def test_new_program_counts_from_zero_since_previous_refresh() -> None:
    prev = snap(10 * S, prog(1, at=10 * S))
    # loaded half a second after the previous refresh began, ran 300 times
    late = prog(2, run_time=30_000, cnt=300, load=10 * S + S // 2, at=11 * S)
    rows, new, gone = toprows.compute_rows(
        prev, snap(11 * S, prog(1, at=11 * S), late), {}, ncpus=2
    )
    r = next(r for r in rows if r.id == 2)
    assert new == [2] and gone == [] and r.new
    assert r.interval_ns == S and r.runs == 300 and r.run_ns == 30_000 and r.avg_ns == 100.0


def test_program_missed_by_previous_refresh_waits_one_refresh() -> None:
    # loaded before the previous refresh began, but that refresh did not see it
    missed = prog(3, run_time=10**9, cnt=10**6, load=9 * S, at=11 * S)
    rows, new, _ = toprows.compute_rows(snap(10 * S), snap(11 * S, missed), {}, ncpus=1)
    assert rows == [] and new == []
    then = prog(3, run_time=10**9 + 500, cnt=10**6 + 5, load=9 * S, at=12 * S)
    rows, new, _ = toprows.compute_rows(snap(11 * S, missed), snap(12 * S, then), {}, ncpus=1)
    assert [(r.id, r.runs, r.run_ns, r.new) for r in rows] == [(3, 5, 500, False)] and new == []


def test_vanished_and_reused_id() -> None:
    prev = snap(10 * S, prog(4, cnt=100, load=2 * S, at=10 * S), prog(5, cnt=9, at=10 * S))
    # id 4 now names another program, loaded after the previous refresh
    reborn = prog(4, cnt=3, load=10 * S + 1, at=11 * S)
    rows, new, gone = toprows.compute_rows(prev, snap(11 * S, reborn), {}, ncpus=1)
    assert gone == [4, 5] and new == [4]
    assert [(r.id, r.runs, r.new) for r in rows] == [(4, 3, True)]


def row(pid: int, **kw: object) -> toprows.Row:
    base: dict[str, object] = dict(
        id=pid, type="xdp", name=f"n{pid}", ksym=f"bpf_prog_{pid:016x}_n{pid}", tag=f"{pid:016x}",
        interval_ns=S, runs=0, run_ns=0, misses=0, run_time_ns=0, run_cnt=0, recursion_misses=0,
        ncpus=2,
    )  # fmt: skip
    base.update(kw)
    return toprows.Row(**base)  # type: ignore[arg-type]


def test_sort_directions_and_ties() -> None:
    rows = [
        row(3, runs=10, run_ns=5_000, type="xdp", name="b", run_time_ns=9, holders=[(50, "x")]),
        row(1, runs=30, run_ns=3_000, type="socket_filter", name="c", run_time_ns=7),
        row(2, runs=10, run_ns=9_000, type="kprobe", name="", run_time_ns=8, holders=[(40, "y")]),
        row(4, runs=0, run_ns=0, type="xdp", name="a", recursion_misses=2),
    ]

    def ids(key: str, reverse: bool = False) -> list[int]:
        return [r.id for r in toprows.sort_rows(rows, key, reverse)]

    assert ids("id") == [1, 2, 3, 4]
    assert ids("runs") == [1, 2, 3, 4]  # 30, then the tie 10/10 by id, then 0
    assert ids("runs", reverse=True) == [4, 2, 3, 1]
    assert ids("cpu") == [2, 3, 1, 4]
    assert ids("avg") == [2, 3, 1, 4]  # 900, 500, 100, none
    assert ids("type") == [2, 1, 3, 4]  # kprobe, socket_filter, xdp, xdp
    assert ids("name") == [4, 3, 1, 2]  # a, b, c, unnamed last
    assert ids("time") == [3, 2, 1, 4]
    assert ids("misses") == [4, 1, 2, 3]
    assert ids("pids") == [2, 3, 1, 4]  # pid 40, pid 50, none, none


def test_filters() -> None:
    rows = [
        row(1, name="xdp_fw", type="xdp", holders=[(10, "a")]),
        row(2, name="sock_count", type="socket_filter", holders=[(10, "a"), (20, "b")]),
        row(3, name="", type="xdp"),
    ]

    def ids(**kw: object) -> list[int]:
        f = toprows.Filter(**kw)  # type: ignore[arg-type]
        return [r.id for r in rows if f.matches(r)]

    assert ids() == [1, 2, 3]
    assert ids(names=["count"]) == [2]
    assert ids(names=["fw", "sock"]) == [1, 2]
    assert ids(types=["xdp"]) == [1, 3]
    assert ids(ids=[3, 2]) == [2, 3]
    assert ids(pids=[20]) == [2]
    assert ids(pids=[10], types=["xdp"]) == [1]
    assert ids(names=["fw"], pids=[20]) == []


def test_number_formats() -> None:
    assert [render.fmt_si(x) for x in (0, 0.5, 7, 999, 1000, 12_345, 123_456, 1_234_567, 2e9)] == [
        "0", "0.5", "7", "999", "1.00k", "12.3k", "123k", "1.23M", "2.00G",
    ]  # fmt: skip
    assert render.fmt_si(999_999) == "1.00M" and render.fmt_si(999_499) == "999k"
    assert [render.fmt_si(x, 2) for x in (7, 99, 1_234, 12_345, 123_456, 2_500_000)] == [
        "7",
        "99",
        "1.2k",
        "12k",
        "120k",
        "2.5M",
    ]
    assert (
        render.fmt_duration(400 * 86_400 * S) == "400d"
        and render.fmt_duration(99 * 86_400 * S) == "99d00h"
    )
    assert [render.fmt_duration(n) for n in (0, 850_000, 999 * 10**6, 59 * S, 61 * S, 3_600 * S, 100 * 3_600 * S)] == [
        "0us", "850us", "999ms", "59.0s", "1m01s", "1h00m", "4d04h",
    ]  # fmt: skip
    assert [render.fmt_pct(x) for x in (0, 12.345, 999.9, 1234.4)] == [
        "0.0",
        "12.3",
        "999.9",
        "1234",
    ]
    assert [render.fmt_pids(h) for h in ([], [(7, "a")], [(7, "a"), (8, "b"), (9, "c")])] == [
        "-",
        "7",
        "7+2",
    ]


def test_default_table_under_80_columns() -> None:
    big = row(
        999_999, type="raw_tracepoint_writable", name="a" * 15, runs=987_654_321, run_ns=50 * S,
        interval_ns=S, run_time_ns=400 * 86_400 * S, recursion_misses=12_345, holders=[(99_999, "c")] * 3,
    )  # fmt: skip
    lines = render.table([big, row(1)])
    assert all(len(line) < 80 for line in lines), lines
    assert lines[0].split() == [
        "ID",
        "TYPE",
        "NAME",
        "RUNS/S",
        "AVG_NS",
        "%1CPU",
        "%ALL",
        "RUNTIME",
        "MISS",
        "PIDS",
    ]
    # 50 s of run time in 1 s: 5000 % of one CPU, 2500 % of the 2 CPUs
    assert lines[1].split() == [
        "999999",
        "raw_tp_w",
        "a" * 15,
        "988M",
        "51",
        "5000",
        "2500",
        "400d",
        "12k",
        "99999+2",
    ]
    wide = render.table([big], wide=True)
    assert "raw_tracepoint_writable" in wide[1] and "99999/c,99999/c,99999/c" in wide[1]


def test_json_and_csv() -> None:
    r = row(9, runs=4, run_ns=400, run_cnt=40, run_time_ns=4_000, holders=[(5, "a b")], new=True)
    idle = row(10)
    ref = toprows.Refresh(1_700_000_000.25, S, 2, [r, idle], total=3, new=[9], vanished=[8])
    d = json.loads(render.refresh_json(ref, [r, idle], "cpu"))
    assert (d["time"], d["interval_s"], d["ncpus"], d["programs_total"], d["new"], d["vanished"]) == (
        1_700_000_000.25, 1.0, 2, 3, [9], [8],
    )  # fmt: skip
    p = d["programs"][0]
    assert (p["runs_per_s"], p["avg_ns"], p["cpu_pct_one_cpu"], p["cpu_pct_all_cpus"]) == (
        4.0,
        100.0,
        4e-05,
        2e-05,
    )
    assert p["holders"] == [{"pid": 5, "comm": "a b"}] and p["new"] is True
    assert d["programs"][1]["avg_ns"] is None
    text = render.csv_lines(ref, [r, idle], header=True)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == render.CSV_FIELDS
    assert rows[0]["holders"] == "5/a b" and rows[0]["new"] == "1" and rows[1]["avg_ns"] == ""
    assert render.csv_lines(ref, [], header=False) == ""


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    top_cmd.configure(p)
    return p.parse_args(argv)


def test_command_line() -> None:
    a = parse(["-b", "2.5", "3", "--type", "socket", "--id", "4,5", "--id", "6", "-s", "avg"])
    assert top_cmd._settle(a) == ""
    assert (a.interval, a.count, a.type, a.id, a.sort) == (
        2.5,
        3,
        ["socket_filter"],
        [[4, 5], [6]],
        "avg",
    )
    a = parse(["-d", "0.5", "-n", "2"])
    assert top_cmd._settle(a) == "" and (a.interval, a.count) == (0.5, 2)
    a = parse([])
    assert top_cmd._settle(a) == "" and (a.interval, a.count) == (1.0, None)
    assert (
        top_cmd.run(parse(["-d", "1", "2"])) == 2
    )  # interval given twice: refused before any bpf()
    assert top_cmd.run(parse(["-n", "1", "1", "3"])) == 2
    for bad in (["--type", "nosuch"], ["-d", "0"], ["-n", "-1"], ["--id", "x"], ["-s", "color"]):
        try:
            parse(bad)
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(bad)


def test_enable_errors_say_what_to_do() -> None:
    assert "CAP_SYS_ADMIN" in enable_error(errno.EPERM)
    assert "5.8" in enable_error(errno.EINVAL) and "bpf_stats_enabled" in enable_error(errno.EINVAL)
    assert all("\n" not in enable_error(e) for e in (errno.EPERM, errno.EINVAL, errno.ENOMEM))


# /proc/PID/fdinfo of a program fd and of a link fd, as Linux 6.18 prints them
PROG_FDINFO = (
    "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2065\nprog_type:\t6\nprog_jited:\t1\n"
    "prog_tag:\t35e9c3c4911be0ad\nmemlock:\t4096\nprog_id:\t171\nrun_time_ns:\t0\nrun_cnt:\t0\n"
    "recursion_misses:\t0\nverified_insns:\t70\n"
)
LINK_FDINFO = "pos:\t0\nflags:\t02000000\nmnt_id:\t15\nino:\t2066\nlink_type:\txdp\nlink_id:\t3\nprog_tag:\tab\nprog_id:\t42\n"


def test_fdinfo_prog_id() -> None:
    assert fdinfo_prog_id(PROG_FDINFO) == 171
    assert fdinfo_prog_id(LINK_FDINFO) == 42
    # bad input: no such line, a truncated line, garbage
    assert fdinfo_prog_id("pos:\t0\nflags:\t02\n") is None
    assert fdinfo_prog_id(PROG_FDINFO.split("prog_id")[0] + "prog_id:") is None
    assert fdinfo_prog_id("prog_id:\tseven\n") is None
    assert fdinfo_prog_id("\x00\xff garbage") is None


@given(st.text(), st.integers(min_value=0, max_value=2**32 - 1))
def test_fdinfo_prog_id_property(noise: str, prog_id: int) -> None:
    cleaned = "".join(
        line for line in noise.splitlines(keepends=True) if not line.startswith("prog_id")
    )
    text = (
        cleaned + ("" if cleaned.endswith("\n") or not cleaned else "\n") + f"prog_id:\t{prog_id}\n"
    )
    assert fdinfo_prog_id(text) == prog_id
    got = fdinfo_prog_id(noise)  # never raises on any text
    assert got is None or got >= 0


counters = st.tuples(st.integers(0, 10**12), st.integers(0, 10**9), st.integers(0, 10**6))


@given(
    st.dictionaries(st.integers(1, 50), st.tuples(counters, st.integers(0, 20 * S)), max_size=12),
    st.dictionaries(st.integers(1, 50), st.tuples(counters, st.integers(0, 20 * S)), max_size=12),
    st.sampled_from(toprows.SORT_KEYS),
    st.booleans(),
)
def test_compute_and_sort_properties(
    before: dict[int, tuple[tuple[int, int, int], int]],
    after: dict[int, tuple[tuple[int, int, int], int]],
    key: str,
    reverse: bool,
) -> None:
    prev = snap(
        10 * S,
        *(
            prog(i, run_time=c[0], cnt=c[1], misses=c[2], load=ld, at=10 * S)
            for i, (c, ld) in before.items()
        ),
    )
    cur = snap(
        11 * S,
        *(
            prog(i, run_time=c[0], cnt=c[1], misses=c[2], load=ld, at=11 * S)
            for i, (c, ld) in after.items()
        ),
    )
    rows, new, gone = toprows.compute_rows(prev, cur, {}, ncpus=3)
    for r in rows:
        assert (
            r.id in after and r.runs >= 0 and r.run_ns >= 0 and r.misses >= 0 and r.interval_ns == S
        )
        same = r.id in before and before[r.id][1] == after[r.id][1]
        assert r.new == (not same)
        assert (
            not r.new or after[r.id][1] > 10 * S
        )  # from zero only if loaded after the last refresh
        if r.new:
            assert (r.runs, r.run_ns) == (after[r.id][0][1], after[r.id][0][0])
    assert set(new) == {r.id for r in rows if r.new}
    assert set(gone) == {i for i in before if i not in after or before[i][1] != after[i][1]}
    shown = {r.id for r in rows}
    assert shown == {
        i for i in after if (i in before and before[i][1] == after[i][1]) or after[i][1] > 10 * S
    }
    ordered = toprows.sort_rows(rows, key, reverse)
    assert sorted(r.id for r in ordered) == sorted(shown)
    values = [toprows._SORT_VALUE[key](r) for r in ordered]
    descending = (key in toprows._DESCENDING) != reverse
    assert all((a >= b) if descending else (a <= b) for a, b in itertools.pairwise(values))


# --- the default table's fast line, held to the column-by-column one -------------------------

row_values = st.fixed_dictionaries(
    dict(
        id=st.integers(1, 2**31 - 1),
        type=st.sampled_from([*PROG_TYPES, "type99"]),
        name=st.text(max_size=15),
        interval_ns=st.integers(-S, 100 * S),
        runs=st.integers(0, 10**12),
        run_ns=st.integers(0, 10**15),
        misses=st.integers(0, 10**6),
        run_time_ns=st.integers(0, 10**18),
        run_cnt=st.integers(0, 10**12),
        recursion_misses=st.integers(0, 10**13),
        ncpus=st.integers(0, 512),
        holders=st.lists(st.tuples(st.integers(1, 2**22), st.text(max_size=15)), max_size=4),
        new=st.booleans(),
    )
)


@given(st.lists(row_values, max_size=8), st.sampled_from([0, 1]))
def test_fast_line_is_the_column_line(values: list[dict], idle: int) -> None:
    rows = [
        toprows.Row(ksym="k", tag="t", **{**v, **({"runs": 0, "run_ns": 0} if idle else {})})
        for v in values
    ]
    lines = render.table(rows)
    assert lines[1:] == [render.line_of(r) for r in rows]
    assert lines[0] == render.table([])[0]


# --- KernelTypes: member offsets through anonymous unions, typedefs and qualifiers ------------

BTF_FIX = Path(__file__).resolve().parents[2] / "fixtures" / "btf"


def bpftool_members(text: str) -> tuple[dict[str, int], dict[int, list[tuple[str, int, int]]]]:
    """bpftool btf dump's text: struct name -> id, id -> [(member, type id, bit offset)]."""
    names: dict[str, int] = {}
    members: dict[int, list[tuple[str, int, int]]] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"\[(\d+)\] (STRUCT|UNION) '([^']*)'", line)
        if m:
            cur = int(m.group(1))
            members[cur] = []
            names.setdefault(m.group(3), cur)
            continue
        m = re.match(r"\t'([^']*)' type_id=(\d+) bits_offset=(\d+)", line)
        if m and cur is not None and line.startswith("\t"):
            members[cur].append((m.group(1), int(m.group(2)), int(m.group(3))))
        elif not line.startswith("\t"):
            cur = None
    return names, members


def bpftool_offset(text: str, struct_name: str, dotted: str) -> int:
    """The byte offset of struct_name.dotted as bpftool's dump gives it (anonymous members
    searched as C does); modifiers and typedefs are followed by id through the dump."""
    names, members = bpftool_members(text)
    heads = {
        int(m.group(1)): int(m.group(2))
        for m in re.finditer(
            r"^\[(\d+)\] (?:TYPEDEF|CONST|VOLATILE)[^\n]* type_id=(\d+)", text, re.M
        )
    }

    def find(tid: int, name: str) -> tuple[int, int] | None:
        while tid in heads:
            tid = heads[tid]
        for mname, mtype, bits in members.get(tid, []):
            if mname == name:
                return bits // 8, mtype
            if mname == "(anon)":
                sub = find(mtype, name)
                if sub is not None:
                    return bits // 8 + sub[0], sub[1]
        return None

    tid, total = names[struct_name], 0
    for part in dotted.split("."):
        got = find(tid, part)
        assert got is not None, (struct_name, dotted)
        total += got[0]
        tid = got[1]
    return total


@pytest.mark.parametrize(
    "struct_name, dotted, size",
    [
        ("__sk_buff", "flow_keys", 8),  # in an anonymous union
        ("__sk_buff", "sk", 8),
        ("__sk_buff", "tstamp", 8),
        ("sample", "count", 4),  # volatile typedef
        ("sample", "f.rest", 4),  # through a const struct
        ("sample", "w.c", 4),  # char[4] in a union
        ("sample", "history", 32),  # long[4]
        ("sample", "hidden", 8),
    ],
)
def test_kernel_types_offsets_match_bpftool(struct_name: str, dotted: str, size: int) -> None:
    types = KernelTypes(
        (BTF_FIX / "btftest.btf").read_bytes(), "btftest.btf", ["__sk_buff", "sample"]
    )
    text = (BTF_FIX / "btftest.btf.txt").read_text()
    off, tid = types.offset(struct_name, dotted)
    assert off == bpftool_offset(text, struct_name, dotted)
    assert types.size(tid) == size


def test_kernel_types_missing_and_bad() -> None:
    blob = (BTF_FIX / "btftest.btf").read_bytes()
    types = KernelTypes(blob, "btftest.btf", ["sample", "nosuch"])
    with pytest.raises(LayoutError):
        types.named(fbtf.KIND_STRUCT, "nosuch")
    with pytest.raises(LayoutError):
        types.offset("sample", "f.nosuch")
    with pytest.raises(LayoutError):
        types.offset("sample", "f.low")  # a bitfield is not something the program reads
    with pytest.raises(LayoutError):
        kernel_layout(types)  # no bpf_iter_task_file here
    with pytest.raises(FormatError):
        KernelTypes(blob[:-200] + bytes(3), "cut.btf")  # cut in the middle of the types


def test_iterator_program_shape() -> None:
    # the layout's offsets land in the instructions that read them; jumps stay inside
    lay = Layout(
        attach_btf_id=7, ctx_meta=0, ctx_task=8, ctx_file=24, meta_seq=0, file_dentry=152,
        file_private=200, dentry_name=40, link_prog=24, prog_aux=56, aux_id=28, task_tgid=1500,
        task_leader=1600, task_comm=1900,
    )  # fmt: skip
    code = program(lay)
    insns = [struct.unpack("<BBhi", code[i : i + 8]) for i in range(0, len(code), 8)]
    assert insns[-1][0] == 0x95 and insns[-2][0] == 0xB7  # r0 = 0; exit
    loads = {(op, regs >> 4, off) for op, regs, off, _ in insns if op in (0x61, 0x79)}
    assert (0x79, 7, 152) in loads and (0x79, 1, 40) in loads and (0x61, 8, 1500) in loads
    assert (0x79, 8, 1600) in loads and (0x79, 1, 1900) in loads and (0x79, 1, 1908) in loads
    for i, (op, _, off, _) in enumerate(insns):
        if op & 0x07 == 0x05 and op not in (0x85, 0x95):  # BPF_JMP, not call/exit
            assert 0 <= i + 1 + off < len(insns)


@given(st.lists(st.lists(row_values, max_size=6), min_size=1, max_size=4), st.data())
def test_line_cache_gives_the_same_table(refreshes: list[list[dict]], data: st.DataObject) -> None:
    # consecutive tables of rows, some idle and some carried over unchanged or changed
    cache = render.LineCache()
    carried: list[dict] = []
    for values in refreshes:
        keep = [v for v in carried if data.draw(st.booleans())]
        # the same program idle again with one thing its line shows changed
        field_values = {
            "holders": st.lists(st.tuples(st.integers(1, 9), st.text(max_size=3)), max_size=2),
            "run_time_ns": st.integers(0, 10**12),
            "recursion_misses": st.integers(0, 10**4),
            "name": st.text(max_size=4),
            "type": st.sampled_from(PROG_TYPES),
        }
        changed = []
        for v in carried:
            key = data.draw(st.sampled_from(sorted(field_values)))
            changed.append({**v, key: data.draw(field_values[key])})
        idle = [{**v, "runs": 0, "run_ns": 0} for v in values[: len(values) // 2]]
        rows = [toprows.Row(ksym="k", tag="t", **v) for v in (*keep, *changed, *idle, *values)]
        assert render.table(rows, cache=cache) == render.table(rows)
        carried = [*keep, *idle]
