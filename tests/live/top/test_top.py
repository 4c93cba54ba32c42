"""bpfsym top against the running kernel: rates, averages, names, holders, shared stats fds.

A test driver runs an XDP program through BPF_PROG_TEST_RUN at a paced rate and
logs every run it made; top's figures are checked against that log, against
bpftool's run_time_ns / run_cnt and against /proc/kallsyms.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.topkit import (
    ROOT,
    SYSCTL,
    Driver,
    bpftool_prog,
    driving,
    fixture_prog,
    load_unnamed_filter,
    prog_ids_of,
    prog_test_run,
)

from bpfsym.live.sys import Buffer

TOP = [sys.executable, "-m", "bpfsym", "top"]


def counters(prog_id: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) as bpftool reads them (absent: statistics never counted)."""
    p = bpftool_prog(prog_id)
    return int(p.get("run_time_ns", 0)), int(p.get("run_cnt", 0))


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def prog_rows(lines: list[dict], prog_id: int) -> list[dict]:
    return [p for line in lines for p in line["programs"] if p["id"] == prog_id]


def check_against_driver(lines: list[dict], prog_id: int, driver: Driver) -> None:
    """Each interval's runs/s is within 5% of what the driver ran in that window."""
    checked = 0
    for line in lines:
        for p in line["programs"]:
            if p["id"] != prog_id:
                continue
            end = line["time"]
            driven = driver.runs_between(end - p["interval_s"], end) / p["interval_s"]
            assert driven > 0.5 * driver.rate(), f"driver fell behind: {driven:.0f}/s"
            assert abs(p["runs_per_s"] - driven) <= 0.05 * driven, (p, driven)
            checked += 1
    assert checked == len(lines)


def test_rate_and_average_match_driver_and_bpftool() -> None:
    with fixture_prog() as (fd, prog_id), driving(fd) as driver:
        time.sleep(0.3)
        t0, c0 = counters(prog_id)
        out = subprocess.run(
            [*TOP, "-b", "-n", "3", "-d", "1", "--json", "--id", str(prog_id)],
            cwd=ROOT, check=True, capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
        t1, c1 = counters(prog_id)
    lines = json_lines(out)
    assert len(lines) == 3
    check_against_driver(lines, prog_id, driver)
    rows = prog_rows(lines, prog_id)
    runs = sum(r["runs"] for r in rows)
    run_ns = sum(r["run_ns"] for r in rows)
    # top's three intervals lie inside the window bpftool read around them
    assert 0 < runs <= c1 - c0 and 0 < run_ns <= t1 - t0
    top_avg = run_ns / runs
    bpftool_avg = (t1 - t0) / (c1 - c0)
    assert abs(top_avg - bpftool_avg) <= 0.10 * bpftool_avg, (top_avg, bpftool_avg)
    for r in rows:
        assert r["avg_ns"] == pytest.approx(r["run_ns"] / r["runs"])
        # %1CPU is run time over wall time; %ALL divides by the online CPUs
        assert r["cpu_pct_one_cpu"] == pytest.approx(100 * r["run_ns"] / 1e9 / r["interval_s"])
        assert r["cpu_pct_all_cpus"] == pytest.approx(r["cpu_pct_one_cpu"] / os.cpu_count())


def kallsyms_bpf() -> set[str]:
    with open("/proc/kallsyms") as f:
        return {ln.split()[2] for ln in f if ln.rstrip().endswith("[bpf]")}


def test_json_fields_names_holders_new_and_vanished() -> None:
    documented = (ROOT / "docs/top.md").read_text()
    with fixture_prog() as (fd, prog_id):
        proc = subprocess.Popen(
            [*TOP, "-b", "-n", "4", "-d", "0.7", "--json"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        unnamed = load_unnamed_filter()
        unnamed_id = int(bpftool_json_of_fd(unnamed)["id"])
        packet = Buffer(64)
        prog_test_run(unnamed, 5000, packet, 64)
        second = json.loads(proc.stdout.readline())
        os.close(unnamed)
        rest = [json.loads(line) for line in proc.stdout]
        assert proc.wait(timeout=30) == 0
        ksyms = kallsyms_bpf()
    lines = [first, second, *rest]
    assert len(lines) == 4
    for line in lines:
        for key in (
            "time",
            "interval_s",
            "ncpus",
            "sort",
            "programs_total",
            "new",
            "vanished",
            "programs",
        ):
            assert f"`{key}`" in documented, key
        assert line["ncpus"] == os.cpu_count()
        for p in line["programs"]:
            for key in p:
                assert f"`{key}`" in documented, key
    # names exactly as /proc/kallsyms, including the BTF name longer than 15 characters
    fixture = prog_rows(lines, prog_id)
    assert fixture and all(r["ksym"].endswith("_xdp_top_fixture_sum") for r in fixture)
    assert fixture[0]["ksym"] in ksyms
    assert all(r["name"] == "xdp_top_fixture" for r in fixture)
    assert all(
        {"pid": os.getpid(), "comm": Path("/proc/self/comm").read_text().strip()} in r["holders"]
        for r in fixture
    )
    seen = prog_rows(lines, unnamed_id)
    assert seen and seen[0]["new"] and all(not r["new"] for r in seen[1:])
    assert seen[0]["name"] == "" and seen[0]["ksym"] == f"bpf_prog_{seen[0]['tag']}"
    assert sum(r["runs"] for r in seen) == 5000
    assert unnamed_id in [i for line in lines for i in line["new"]]
    gone = [line for line in lines if unnamed_id in line["vanished"]]
    assert len(gone) == 1 and all(
        unnamed_id not in [p["id"] for p in line["programs"]]
        for line in lines[lines.index(gone[0]) :]
    )
    assert all(r["type"] == "socket_filter" for r in seen)


def bpftool_json_of_fd(fd: int) -> dict:
    tag_info = subprocess.run(
        ["bpftool", "-j", "prog", "show"], check=True, capture_output=True, text=True
    ).stdout
    link = os.readlink(f"/proc/self/fd/{fd}")
    assert link == "anon_inode:bpf-prog"
    with open(f"/proc/self/fdinfo/{fd}") as f:
        prog_id = int(next(ln.split()[1] for ln in f if ln.startswith("prog_id:")))
    return next(p for p in json.loads(tag_info) if p["id"] == prog_id)


def test_unnamed_name_matches_kallsyms_while_alive() -> None:
    fd = load_unnamed_filter()
    try:
        info = bpftool_json_of_fd(fd)
        out = subprocess.run(
            [*TOP, "-b", "-n", "1", "-d", "0.2", "--json", "--id", str(info["id"])],
            cwd=ROOT, check=True, capture_output=True, text=True, timeout=30,
        ).stdout  # fmt: skip
        ksyms = kallsyms_bpf()
    finally:
        os.close(fd)
    (line,) = json_lines(out)
    (p,) = line["programs"]
    assert p["ksym"] == f"bpf_prog_{info['tag']}" and p["ksym"] in ksyms
    assert p["holders"] == [
        {"pid": os.getpid(), "comm": Path("/proc/self/comm").read_text().strip()}
    ]


def test_filters_and_csv() -> None:
    with fixture_prog() as (fd, prog_id):
        other = load_unnamed_filter()
        try:
            base = [*TOP, "-b", "-n", "1", "-d", "0.2", "--json"]

            def ids(*extra: str) -> set[int]:
                out = subprocess.run(
                    [*base, *extra], cwd=ROOT, check=True, capture_output=True, text=True
                ).stdout
                return {p["id"] for p in json_lines(out)[0]["programs"]}

            other_id = int(bpftool_json_of_fd(other)["id"])
            assert {prog_id, other_id} <= ids()
            assert prog_id in ids("--type", "xdp") and other_id not in ids("--type", "xdp")
            assert ids("--id", f"{prog_id},{other_id}") == {prog_id, other_id}
            named = ids("--name", "top_fixt")
            assert prog_id in named and other_id not in named
            assert all("top_fixt" in bpftool_prog(i)["name"] for i in named)
            assert ids("--pid", str(os.getpid())) == {prog_id, other_id}
            assert ids("--type", "socket_filter", "--pid", str(os.getpid())) == {other_id}
            assert ids("--pid", str(os.getpid()), "--name", "nothing-like-this") == set()
            top = subprocess.Popen(
                [*TOP, "-b", "-n", "2", "-d", "0.2", "--csv", "--pid", str(os.getpid())],
                cwd=ROOT, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            out, _ = top.communicate(timeout=30)
            assert top.returncode == 0
        finally:
            os.close(other)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert out.count("\ntime,") == 0 and out.startswith("time,id,")  # one header
    assert sorted(int(r["id"]) for r in rows) == sorted([prog_id, other_id] * 2)
    me = f"{os.getpid()}/{Path('/proc/self/comm').read_text().strip()}"
    for r in rows:
        # ours; others only when another tool holds them too (bpfsym record's pinner takes
        # a reference to every program loaded while it records), never top itself
        held = r["holders"].split(";")
        assert me in held and not any(h.startswith(f"{top.pid}/") for h in held), held


def test_batch_text_fits_80_columns_and_sorts() -> None:
    idle = load_unnamed_filter()
    idle_id = int(bpftool_json_of_fd(idle)["id"])
    try:
        with fixture_prog() as (fd, prog_id), driving(fd):
            mine = ["--pid", str(os.getpid())]  # other workloads may be busier than ours
            out = subprocess.run(
                [*TOP, "-b", *mine, "0.5", "2"],
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            by_id = subprocess.run(
                [*TOP, "-b", "-n", "1", "-d", "0.3", "-s", "id"],
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
    finally:
        os.close(idle)
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 2
    for block in blocks:
        lines = block.splitlines()
        assert all(len(ln) < 80 for ln in lines), max(lines, key=len)
        assert lines[1].split()[:3] == ["ID", "TYPE", "NAME"]
        # sorted by CPU: the program being run first, then the idle unnamed filter
        assert [ln.split()[:3] for ln in lines[2:]] == [
            [str(prog_id), "xdp", "xdp_top_fixture"],
            [str(idle_id), "socket", "-"],
        ]
    listed = [int(ln.split()[0]) for ln in by_id.splitlines()[2:]]
    assert listed == sorted(listed) and prog_id in listed


def stats_fd_holders() -> set[int]:
    """Pids holding a BPF_ENABLE_STATS fd, from /proc (anon inode "bpf-stats")."""
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:bpf-stats":
                        pids.add(int(pid))
    return pids


RECORD = [sys.executable, "-m", "bpfsym", "record", "--no-perf", "--stats=0.2"]


def check_record_stats(side: Path, prog_id: int, driver: Driver) -> None:
    """Between consecutive --stats samples, runs/s is within 5% of what the driver ran."""
    from bpfsym.read.sidefile import read_capture

    wall = time.time() - time.monotonic()  # CLOCK_MONOTONIC -> wall, as the driver logs
    samples = [s for s in read_capture(str(side)).stats if s.prog_id == prog_id]
    assert len(samples) >= 3
    for a, b in zip(samples, samples[1:], strict=False):
        dt = (b.time - a.time) / 1e9
        driven = driver.runs_between(wall + a.time / 1e9, wall + b.time / 1e9)
        assert driven > 0 and abs((b.run_cnt - a.run_cnt) - driven) <= 0.05 * driven + 2, (
            a,
            b,
            driven,
        )
        assert b.run_time_ns > a.run_time_ns and dt > 0


def grows(prog_id: int, wait: float = 0.4) -> bool:
    a = counters(prog_id)
    time.sleep(wait)
    b = counters(prog_id)
    return b[0] > a[0] and b[1] > a[1]


@pytest.mark.parametrize("order", [("a", "b", "c"), ("c", "a", "b"), ("b", "c", "a")])
def test_shared_stats_fd(order: tuple[str, str, str], tmp_path: Path) -> None:
    """Two `top -b` and one `record --stats` hold the stats fd at once, stopped in any order."""
    before = Path(SYSCTL).read_text()
    with fixture_prog() as (fd, prog_id), driving(fd) as driver:
        tops = {
            k: subprocess.Popen(
                [*TOP, "-b", "--json", "-d", "0.5", "--id", str(prog_id)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            for k in ("a", "b")
        }
        side = tmp_path / "stats"
        holder = subprocess.Popen(
            [*RECORD, "-o", str(side), "--", "sleep", "600"],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs: dict[str, subprocess.Popen] = {**tops, "c": holder}
        deadline = time.monotonic() + 60
        while holder.pid not in stats_fd_holders() and time.monotonic() < deadline:
            time.sleep(0.05)
        outputs: dict[str, list[dict]] = {}
        for k, p in tops.items():
            assert p.stdout is not None
            outputs[k] = [json.loads(p.stdout.readline()) for _ in range(2)]
        assert {p.pid for p in procs.values()} <= stats_fd_holders()
        for i, k in enumerate(order):
            if k == "c":
                holder.send_signal(signal.SIGINT)
                _, err = holder.communicate(timeout=60)
                assert holder.returncode == 130, err  # the command's status: sleep killed by SIGINT
            else:
                procs[k].send_signal(signal.SIGTERM)
                rest, _ = procs[k].communicate(timeout=10)
                assert procs[k].returncode == 0
                outputs[k] += json_lines(rest)
            assert procs[k].pid not in stats_fd_holders()
            if i < len(order) - 1:
                assert grows(prog_id), f"statistics stopped after {k} quit while others hold them"
        # none of ours holds statistics now; wait out anybody else's before the final check
        deadline = time.monotonic() + 120
        while (
            stats_fd_holders() or Path(SYSCTL).read_text().strip() != "0"
        ) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not stats_fd_holders(), f"other stats holders kept running: {stats_fd_holders()}"
        assert not grows(prog_id, 0.5), "statistics still counting with no holder"
    assert Path(SYSCTL).read_text() == before
    for k in ("a", "b"):
        assert len(outputs[k]) >= 2
        check_against_driver(outputs[k], prog_id, driver)
    check_record_stats(Path(str(side) + ".bpfsym"), prog_id, driver)


def test_no_privilege_is_one_line() -> None:
    r = subprocess.run(
        # root without CAP_SYS_ADMIN, CAP_BPF and CAP_PERFMON
        ["setpriv", "--bounding-set", "-sys_admin,-bpf,-perfmon", *TOP, "-b", "-n", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "CAP_SYS_ADMIN" in lines[0], r.stderr


def read_pty(fd: int, until: bytes, timeout: float = 15.0) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout
    while until not in buf and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError as e:
                if e.errno == errno.EIO:
                    break
                raise
            if not chunk:
                break
            buf += chunk
    return buf


def test_full_screen_keys_and_quit() -> None:
    with fixture_prog() as (fd, prog_id), driving(fd):
        pid, master = pty.fork()
        if pid == 0:
            os.chdir(ROOT)
            os.environ.update(TERM="xterm", LINES="30", COLUMNS="100")
            os.execv(sys.executable, [*TOP, "-d", "0.5"])
        try:
            screen = read_pty(master, b"xdp_top_fixture")
            assert b"xdp_top_fixture" in screen and b"RUNS/S" in screen
            os.write(master, b"/")
            assert b"filter by name" in read_pty(master, b"filter by name")
            os.write(master, b"nothing-matches\r")
            assert b"name~nothing-matches" in read_pty(master, b"name~nothing-matches")
            os.write(master, b"<")  # from cpu one column left: avg (curses redraws just the change)
            assert b"avg" in read_pty(master, b"avg")
            os.write(master, b" ")
            os.write(master, b"q")
            read_pty(master, b"\0", timeout=5)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            pid = 0
        finally:
            os.close(master)
            if pid:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


# --- holders from the task_file iterator, against /proc ---------------------------------------


def proc_holders_of(ids: set[int]) -> dict[int, list[tuple[int, str]]]:
    """/proc's reading (every /proc/PID/fd, its fdinfo prog_id and /proc/PID/comm) of ids."""
    from bpfsym.live.stats import prog_holders

    return {k: sorted(v) for k, v in prog_holders().items() if k in ids}


def test_holders_iterator_matches_proc() -> None:
    from bpfsym.top import holders as th

    src = th.open_holders()
    assert src.kind == "iterator", getattr(src, "why", "")  # it loads on this kernel
    a, b, c = (load_unnamed_filter() for _ in range(3))
    a2 = os.dup(a)  # two fds on one program: one holder
    extra = th.IterHolders(th.kernel_layout(th.KernelTypes(Path(th.VMLINUX_BTF).read_bytes())))
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import ctypes, sys; ctypes.CDLL(None).prctl(15, b'holder child', 0, 0, 0);"
            " print(flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        pass_fds=[b, extra.link_fd],  # a program fd, and a link fd (on extra's program)
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"\n"
        ids = {int(bpftool_json_of_fd(fd)["id"]) for fd in (a, b, c)} | {extra.prog_id}
        for _ in range(5):  # another tool may take or drop a reference in between: read again
            got = {k: sorted(v) for k, v in src.read().items() if k in ids}
            want = proc_holders_of(ids)
            if got == want:
                break
        assert got == want
        me = (os.getpid(), Path("/proc/self/comm").read_text().strip())
        kid = (child.pid, "holder child")
        assert me in got[int(bpftool_json_of_fd(a)["id"])]
        assert {me, kid} <= set(got[int(bpftool_json_of_fd(b)["id"])])
        assert {me, kid} <= set(got[extra.prog_id])  # held through link fds only
    finally:
        child.communicate(b"", timeout=10)
        for fd in (a, a2, b, c):
            os.close(fd)
        extra.close()
        src.close()


LAYOUT_C = r"""
#define BPF_NO_PRESERVE_ACCESS_INDEX
#include "vmlinux.h"
int printf(const char *, ...);
#define P(name, type, member) printf("%s %lu\n", name, __builtin_offsetof(type, member))
int main(void)
{
	P("ctx_meta", struct bpf_iter__task_file, meta);
	P("ctx_task", struct bpf_iter__task_file, task);
	P("ctx_file", struct bpf_iter__task_file, file);
	P("meta_seq", struct bpf_iter_meta, seq);
	P("file_dentry", struct file, f_path.dentry);
	P("file_private", struct file, private_data);
	P("dentry_name", struct dentry, d_name.name);
	P("link_prog", struct bpf_link, prog);
	P("prog_aux", struct bpf_prog, aux);
	P("aux_id", struct bpf_prog_aux, id);
	P("task_tgid", struct task_struct, tgid);
	P("task_leader", struct task_struct, group_leader);
	P("task_comm", struct task_struct, comm);
	return 0;
}
"""


def test_iterator_layout_matches_the_compiler(tmp_path: Path) -> None:
    """Offsets read from vmlinux BTF are those clang computes from bpftool's vmlinux.h."""
    from bpfsym.top import holders as th

    header = subprocess.run(
        ["bpftool", "btf", "dump", "file", th.VMLINUX_BTF, "format", "c"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    (tmp_path / "vmlinux.h").write_bytes(header)
    (tmp_path / "layout.c").write_text(LAYOUT_C)
    subprocess.run(
        ["clang", "-w", "-o", str(tmp_path / "layout"), str(tmp_path / "layout.c")],
        check=True, cwd=tmp_path,
    )  # fmt: skip
    out = subprocess.run([str(tmp_path / "layout")], check=True, capture_output=True, text=True)
    clang = {k: int(v) for k, v in (ln.split() for ln in out.stdout.splitlines())}
    lay = th.kernel_layout(th.KernelTypes(Path(th.VMLINUX_BTF).read_bytes()))
    assert {k: getattr(lay, k) for k in clang} == clang
    dump = subprocess.run(
        ["bpftool", "btf", "dump", "file", th.VMLINUX_BTF],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert f"[{lay.attach_btf_id}] FUNC 'bpf_iter_task_file'" in dump


def test_top_hides_its_iterator_and_unloads_it() -> None:
    proc = subprocess.Popen(
        [*TOP, "-b", "-n", "3", "-d", "0.5", "--json"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    (own,) = prog_ids_of(proc.pid, "anon_inode:bpf_link")  # the iterator's link: its only link
    assert bpftool_prog(own)["name"] == "bpfsym_holders" and bpftool_prog(own)["type"] == "tracing"
    lines = [first, *json_lines(proc.stdout.read())]
    assert proc.wait(timeout=30) == 0 and len(lines) == 3
    assert all(own not in [p["id"] for p in line["programs"]] for line in lines)
    # nothing top held stays behind: the program goes with top's link
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = subprocess.run(["bpftool", "-j", "prog", "show", "id", str(own)], capture_output=True)
        if r.returncode != 0:
            break
        time.sleep(0.1)
    assert r.returncode != 0, "top's iterator program outlived top"


def test_sampler_between_full_walks_finds_new_and_drops_gone() -> None:
    """Ids from the previous pass plus those above the highest seen: a program loaded
    between passes is found, one closed by its owner is gone (top holds no fd across passes)."""
    from bpfsym.live.stats import RuntimeStats, Sampler

    s = Sampler(full_walk_every=1000)
    before = s.snapshot()  # the one full walk
    fd = load_unnamed_filter()
    prog_id = int(bpftool_json_of_fd(fd)["id"])
    try:
        with RuntimeStats():
            prog_test_run(fd, 7, Buffer(64), 64)
        seen = s.snapshot()
        assert prog_id not in before.progs and prog_id in seen.progs
        got = seen.progs[prog_id]
        assert (got.run_time_ns, got.run_cnt) == counters(prog_id)
        assert got.run_cnt == 7 and got.run_time_ns > 0 and got.ksym == f"bpf_prog_{got.tag}"
        assert prog_id in s.snapshot().progs
    finally:
        os.close(fd)
    deadline = time.monotonic() + 10
    while prog_id in s.snapshot().progs and time.monotonic() < deadline:
        time.sleep(0.05)  # the last reference goes after an RCU grace period
    assert prog_id not in s.snapshot().progs
    # a program there at the first pass and after this one was there during it
    kept = s.snapshot()
    full = Sampler().snapshot()
    assert set(before.progs) & set(full.progs) <= set(kept.progs)
    for i in set(kept.progs) & set(full.progs):
        a, b = kept.progs[i], full.progs[i]
        assert (a.type, a.tag, a.name, a.ksym, a.load_time) == (
            b.type, b.tag, b.name, b.ksym, b.load_time,
        )  # fmt: skip
