"""bpfsym report against perf report on fresh recordings of real BPF programs (root, perf)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from kit.perftext import event_counts, is_bpf_func, sections

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "perfdata")
PKT = "/tmp/bpfsym_live_pkt64"


def sh(*cmd: str, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def pins() -> Iterator[str]:
    if subprocess.run(["mountpoint", "-q", "/sys/fs/bpf"]).returncode:
        sh("mount", "-t", "bpf", "bpf", "/sys/fs/bpf")
    d = f"/sys/fs/bpf/bpfsym_report_live_{uuid.uuid4().hex[:8]}"
    os.makedirs(d)
    with open(PKT, "wb") as f:
        f.write(bytes(64))
    # loaded before perf starts: perf synthesizes its records
    sh("bpftool", "prog", "load", os.path.join(FIX, "xdp_spin.bpf.o"), f"{d}/spin")
    yield d
    sh("rm", "-rf", d)


def bpf_kallsyms() -> dict[int, str]:
    with open("/proc/kallsyms") as f:
        return {
            int(line.split()[0], 16): line.split()[2]
            for line in f
            if line.rstrip().endswith("[bpf]")
        }


def workload(pins: str, tag: str, ksyms: str) -> str:
    """Shell text: run the preloaded program, then load, run and unload xdp_burn.

    The /proc/kallsyms BPF lines seen while xdp_burn is loaded go to the file ksyms.
    """
    run = f"bpftool prog run pinned {{}} data_in {PKT} repeat {{}} >/dev/null"
    burn = f"{pins}/burn_{tag}"
    return "; ".join(
        [
            run.format(f"{pins}/spin", 40000),
            f"bpftool prog load {FIX}/xdp_burn.bpf.o {burn}",
            f"grep -F '[bpf]' /proc/kallsyms > {ksyms} || true",
            run.format(burn, 40000),
            f"rm {burn}",
            "dd if=/dev/zero of=/dev/null bs=1 count=150000 2>/dev/null",
        ]
    )


def perf_record(out: str, opts: list[str], cmd: str) -> None:
    sh("perf", "record", "-q", *opts, "-o", out, "--", "sh", "-c", cmd,
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def perf_report(path: str, *args: str) -> str:
    return subprocess.run(
        ["perf", "report", "-i", path, "--stdio", *args],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def bpfsym(*args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "bpfsym", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def perf_renames(path: str, ksyms: dict[int, str]) -> dict[str, str]:
    """perf's synthesized names that differ from kallsyms at the same address."""
    text = perf_report(path, "--header-only", "-I")
    out = {}
    for name, addr in re.findall(r"sub_prog \d+: (\S+) addr 0x([0-9a-f]+)", text):
        k = ksyms.get(int(addr, 16))
        if k and k != name:
            out[f"[k] {name}"] = f"[k] {k}"
    return out


def compare(ours: str, perf: str, renames: dict[str, str]) -> tuple[int, float]:
    """Every symbol both name has the same percentage; returns (compared, perf % covered)."""
    o, p = sections(ours), sections(perf)
    assert set(o) == set(p)
    n = 0
    covered = 0.0
    for ev, rows in p.items():
        want: dict[str, float] = {}
        for s, pct in rows.items():
            want[renames.get(s, s)] = want.get(renames.get(s, s), 0.0) + pct
        for s, pct in want.items():
            if s in o[ev]:
                assert abs(o[ev][s] - pct) <= 0.0101 + 0.01 * (s in renames.values()), (ev, s)
                n += 1
                covered += pct
    return n, covered / len(p)


def test_flat_percentages_equal_perf_system_wide(pins: str, tmp_path: object) -> None:
    data = os.path.join(str(tmp_path), "a.data")
    perf_record(
        data,
        ["-e", "cpu-clock", "-a", "-g"],
        workload(pins, "a", os.path.join(str(tmp_path), "ksyms.txt")),
    )
    ksyms = bpf_kallsyms()
    ours = bpfsym("report", "-i", data, "--no-side", "--sort", "sym")
    perf = perf_report(data, "--no-children", "-g", "none", "--sort", "sym")
    assert event_counts(ours) == event_counts(perf)
    n, covered = compare(ours, perf, perf_renames(data, ksyms))
    assert n > 50 and covered > 97.0
    spin = [s for s in sections(ours)["cpu-clock"] if s.endswith("_spin_mix")]
    assert spin and spin[0][4:] in ksyms.values()

    # the DSO column too: perf gives every BPF function (a KSYMBOL) a DSO of its name.
    # perf prints a row per symbol, and two symbols of one DSO can share a name (the
    # kernel's static functions); bpfsym merges rows that print alike. Such rows are
    # summed, each printed percentage rounded: the bound grows by a rounding per row.
    def dso_rows(text: str) -> dict[tuple[str, str], tuple[float, int]]:
        found = re.findall(r"^\s+([\d.]+)%\s+(\S+)\s+(\[.\] \S+)\s*$", text, re.M)
        rows: dict[tuple[str, str], tuple[float, int]] = {}
        for p, d, s in found:
            sum_, n = rows.get((d, s), (0.0, 0))
            rows[d, s] = (sum_ + float(p), n + 1)
        return rows

    o = dso_rows(bpfsym("report", "-i", data, "--no-side", "--sort", "dso,sym"))
    p = dso_rows(perf_report(data, "--no-children", "-g", "none", "--sort", "dso,sym"))
    bpf_rows = [k for k in o if is_bpf_func(k[1])]
    assert bpf_rows and all(d == s[4:] for d, s in bpf_rows)
    assert all(n == 1 for _, n in o.values())  # bpfsym: one row per printed key
    same = [k for k in o if k in p]
    bad = [(k, o[k], p[k]) for k in same if abs(o[k][0] - p[k][0]) > 0.0101 * p[k][1]]
    assert len(same) > 50 and not bad, bad  # the rows that differ, when some do
    assert any(k in p for k in bpf_rows)  # spin_mix: perf names sub-programs as kallsyms


def test_unloaded_programs_named_as_kallsyms_had_them(pins: str, tmp_path: object) -> None:
    data = os.path.join(str(tmp_path), "u.data")
    perf_record(
        data,
        ["-e", "cpu-clock", "-a"],
        workload(pins, "u", os.path.join(str(tmp_path), "ksyms.txt")),
    )
    with open(os.path.join(str(tmp_path), "ksyms.txt")) as f:
        while_loaded = {line.split()[2] for line in f}
    gone = {n for n in while_loaded if n.endswith(("_xdp_burn", "_burn_mix"))}
    assert len(gone) >= 2 and not gone & set(bpf_kallsyms().values())  # unloaded by now
    ours = sections(bpfsym("report", "-i", data, "--no-side", "--sort", "sym", "--bpf-only"))
    named = {s[4:] for s in ours["cpu-clock"]}
    assert any(n.endswith("_burn_mix") for n in named)
    assert {n for n in named if "burn" in n} <= gone


@pytest.mark.parametrize(
    "kind,opts",
    [
        ("pipe", ["-e", "cpu-clock", "-a", "-g"]),
        ("compressed", ["-z", "-e", "cpu-clock", "-a", "-g"]),
        ("multi", ["-e", "cpu-clock,task-clock", "-a"]),
    ],
)
def test_pipe_compressed_and_multi_event_totals(
    pins: str, tmp_path: object, kind: str, opts: list[str]
) -> None:
    data = os.path.join(str(tmp_path), f"{kind}.data")
    cmd = workload(pins, kind, os.path.join(str(tmp_path), "ksyms.txt"))
    if kind == "pipe":
        with open(data, "wb") as out:
            sh("perf", "record", "-q", *opts, "-o", "-", "--", "sh", "-c", cmd, stdout=out,
               stderr=subprocess.DEVNULL)  # fmt: skip
    else:
        perf_record(data, opts, cmd)
    ksyms = bpf_kallsyms()
    # perf record -z and pipe mode record no build ids: nothing proves the host runs the
    # recorded kernel, so its kallsyms are taken only when named (perf takes them unasked)
    named = ["--kallsyms", "/proc/kallsyms"] if kind != "multi" else []
    ours = bpfsym("report", "-i", data, "--no-side", "--sort", "sym", *named)
    if named:
        unasked = bpfsym("report", "-i", data, "--no-side", "--sort", "sym")
        why = "pipe mode" if kind == "pipe" else "perf record -z"
        assert f"# no kallsyms: perf.data records no kernel build id ({why}" in unasked
    else:
        assert re.search(r"# kernel symbols: host /proc/kallsyms \(build id \w+ matches", ours)
    perf = perf_report(data, "--no-children", "-g", "none", "--sort", "sym")
    counts = event_counts(ours)
    assert counts == event_counts(perf)
    assert len(counts) == (2 if kind == "multi" else 1)
    n, covered = compare(ours, perf, perf_renames(data, ksyms))
    assert n > 20 and covered > 95.0


def test_side_file_names_and_kallsyms_file(pins: str, tmp_path: object) -> None:
    data = os.path.join(str(tmp_path), "s.data")
    r = subprocess.run(
        [sys.executable, "-m", "bpfsym", "record", "-o", data, "-e", "cpu-clock", "-a",
         "--", "sh", "-c", workload(pins, "s", os.path.join(str(tmp_path), "ksyms.txt"))],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    with open(os.path.join(str(tmp_path), "ksyms.txt")) as f:
        while_loaded = {int(line.split()[0], 16): line.split()[2] for line in f}
    ours = bpfsym("report", "-i", data, "--sort", "sym")
    assert f"# side file: {data}.bpfsym" in ours
    perf = perf_report(data, "--no-children", "-g", "none", "--sort", "sym")
    n, covered = compare(ours, perf, perf_renames(data, while_loaded))
    assert n > 20
    bpf = {s[4:] for s in sections(ours)["cpu-clock"] if is_bpf_func(s)}
    assert any(b.endswith("_burn_mix") for b in bpf) and bpf <= set(while_loaded.values())
    # the kallsyms file holds every BPF function seen, also the unloaded xdp_burn
    ksyms = os.path.join(str(tmp_path), "ksyms")
    bpfsym("kallsyms", "-i", data + ".bpfsym", "-o", ksyms)
    with open(ksyms) as f:
        lines = f.read().splitlines()
    listed = {(int(x.split()[0], 16), x.split()[2]) for x in lines if x.endswith("\t[bpf]")}
    mine = {(a, n) for a, n in while_loaded.items() if n.endswith(("_xdp_burn", "_burn_mix"))}
    assert len(mine) == 2 and mine <= listed
    assert os.stat(ksyms).st_mode & 0o777 == 0o600
    named = perf_report(data, "--kallsyms", ksyms, "--no-children", "-g", "none", "--sort", "sym")
    assert any(n in named for _a, n in mine)


@pytest.mark.parametrize("freq", [["-F", "4000"], []])
def test_numpy_accelerator_matches_the_pure_python_reader(
    pins: str, tmp_path: object, freq: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a system-wide -g recording has MMAP/COMM/FORK records interleaved with samples and a
    # BPF program loaded and unloaded in between: both readers must place them alike, and
    # so must two processes sharing the samples (the parallel reading of large files),
    # the second taking the host's kallsyms table from the first (report.split.
    # KernelHandoff: kernel_symbols runs in the first only; each call leaves its pid).
    # Without -F, perf 6.1 gives its side-band event (dummy:HG) a sample_type of its own
    # (no PERIOD; IDENTIFIER in both): the fast reader must take that file too
    from kit.splitkit import kernel_symbols_callers

    from bpfsym.read.perfdata import PerfData
    from bpfsym.report.analysis import analyze
    from bpfsym.report.render import render_folded, render_json, render_stdio

    callers = kernel_symbols_callers(monkeypatch, str(tmp_path))

    data = os.path.join(str(tmp_path), "n.data")
    perf_record(
        data,
        ["-e", "cpu-clock", "-a", "-g", *freq],
        workload(pins, "n", os.path.join(str(tmp_path), "ksyms.txt")),
    )
    with PerfData(data) as pd:
        types = {a.sample_type for a in pd.attrs}
    assert len(pd.attrs) == 2 and len(types) == (1 if freq else 2)
    for keys in (["comm", "dso", "sym"], ["pid", "cpu", "prog", "srcline"]):
        out = []
        for fast, parallel in ((True, False), (False, False), (True, True)):
            an = analyze(data, None, keys, True, False, accelerate=fast, parallel=parallel)
            assert an.accelerated == fast
            assert callers() == [os.getpid()]  # this process's only
            out.append(render_stdio(an, None, 0.0) + render_json(an, None) + render_folded(an))
        assert out[0] == out[1] == out[2]
    assert "_burn_mix" in out[0]
    assert ";do_idle;" in out[0]  # the host's kallsyms named kernel code (idle CPUs)


def test_srcline_text_is_the_demo_source_line(tmp_path: object) -> None:
    """--sort func,srcline names each BPF line with its text from BTF: the text must be
    that line of bpf/demo.bpf.c (none for line 0), from the side file and from perf.data
    alike."""
    import json

    from kit.livekit import BPF, bpfsym_run, record_demo

    out = os.path.join(str(tmp_path), "demo.data")
    record_demo(out, "-e", "cpu-clock", "-F", "4999", "-a")  # type: ignore[arg-type]
    with open(BPF / "demo.bpf.c") as f:
        source = f.read().splitlines()
    for extra in ([], ["--no-side"]):
        r = bpfsym_run(
            "report", "-i", out, *extra, "--sort", "func,srcline", "--bpf-only", "--json"
        )
        assert r.returncode == 0, r.stderr
        rows = [
            row
            for row in json.loads(r.stdout)["events"][0]["rows"]
            if row["srcline"].startswith("demo.bpf.c:")
        ]
        assert rows, extra
        assert any(int(row["srcline"].split(":")[1]) > 0 for row in rows), extra
        for row in rows:
            line = int(row["srcline"].split(":")[1])
            # line 0: code the compiler made (its line_info names no line, BTF no text);
            # a sample lands there now and then (2 recordings of 25 here)
            want = " ".join(source[line - 1].split()) if line > 0 else ""
            assert row["source"] == want, row


def test_kallsyms_read_beside_equals_reading_it_here(pins: str, tmp_path: object) -> None:
    """HostKallsyms (a child process reads /proc/kallsyms up to the BPF part) gives what
    kernel_kallsyms gives; with a BPF program loaded the [bpf] lines are cut off."""
    from bpfsym.live.host import HostKallsyms, kernel_kallsyms

    text = HostKallsyms().raw()
    assert text == kernel_kallsyms()
    assert b"\t[bpf]" not in text and len(text.splitlines()) > 10000
    with open("/proc/kallsyms") as f:
        assert "\t[bpf]" in f.read()  # pins holds a program: there was something to cut
    other = os.path.join(str(tmp_path), "ksyms.txt")
    with open(other, "w") as f:
        f.write("ffffffff81000000 T _stext\nffffffffc0000000 t bpf_prog_1_x\t[bpf]\n")
    assert HostKallsyms(other).raw() == b"ffffffff81000000 T _stext\n"
    with pytest.raises(FileNotFoundError):
        HostKallsyms(os.path.join(str(tmp_path), "missing")).raw()


def test_host_kallsyms_looked_up_in_place_as_read_in_full() -> None:
    """Small reports look /proc/kallsyms up where it lies (SortedKallsyms), relying on the
    kernel's own symbols coming sorted by address: the same answers as reading it all."""
    import random

    import numpy as np

    from bpfsym.live.host import kernel_kallsyms
    from bpfsym.read.kallsyms import KernelSymbols, SortedKallsyms

    text = kernel_kallsyms().decode()
    full = KernelSymbols.from_text(text, "x", np=np)
    here = SortedKallsyms(text, "x")
    assert len(full) > 10000 and len(here)
    rng = random.Random(7)
    addrs = full.addrs
    ips = [a + d for a in rng.sample(addrs, 3000) for d in (-1, 0, 5)]
    ips += [rng.randrange(addrs[0] - 4096, addrs[-1] + 4096) for _ in range(3000)]
    assert [here.lookup(ip) for ip in ips] == [full.lookup(ip) for ip in ips]


def _report_until_sigint(after: float | None) -> tuple[int, bytes, float]:
    """A report of the fixture; SIGINT to its process group (what Ctrl-C sends) `after`
    seconds from the moment bpfsym's code runs (its kallsyms memfd exists), or none.
    Returns (exit status, stderr, seconds from that moment to the end)."""
    path = os.path.join(ROOT, "tests", "fixtures", "perfdata", "bpf.data")
    p = subprocess.Popen(
        [sys.executable, "-m", "bpfsym", "report", "-i", path, "--stdio"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    fd_dir = f"/proc/{p.pid}/fd"
    deadline = time.monotonic() + 20
    started = False
    while not started and time.monotonic() < deadline and p.poll() is None:
        with contextlib.suppress(OSError):
            started = any(
                "bpfsym-kallsyms" in os.readlink(os.path.join(fd_dir, fd))
                for fd in os.listdir(fd_dir)
            )
        time.sleep(0.001)
    t0 = time.monotonic()
    if after is not None:
        time.sleep(after)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert started or p.returncode == 0
    return p.returncode, err, time.monotonic() - t0


def test_ctrl_c_at_any_point_ends_with_130_and_no_traceback() -> None:
    """Ctrl-C at 64 points spread over a whole report's life (measured first, so the grid
    fits this machine's speed): during the imports, the option parsing, the reading and
    the end, the status is 130 (0 if it came too late) and nothing but that is said."""
    code, err, life = _report_until_sigint(None)
    assert code == 0, err
    points = 64
    for k in range(points):
        code, err, _ = _report_until_sigint(life * (k + 0.5) / points)
        assert code in (0, 130), (k, err)
        assert b"Traceback" not in err and b"Error" not in err, (k, err)
