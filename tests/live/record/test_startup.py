"""`bpfsym record` on a host with many BPF programs (issue 11, docs/record-startup.md):
the split kallsyms read, perf in a private mount namespace, the perf waker; checked
against /proc/kallsyms as the recorded command reads it, the C loader's bpf_prog_info,
bpftool, and stock perf's reading of perf.data (bpfsym's and perf's own)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from kit.livekit import BPFSYM, CHURN, DEMO, ENV, REPO, Held, bpfsym_run, ensure_loader

from bpfsym.live import bpf_images
from bpfsym.live.prestart import SplitKallsyms
from bpfsym.read.kallsyms import capture_kernel_symbols
from bpfsym.read.sidefile import read_capture

_spec = importlib.util.spec_from_file_location("_progs", REPO / "bench" / "_progs.py")
assert _spec and _spec.loader
_progs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_progs)

PERF_OPTS = ("-a", "-e", "cpu-clock")


def _kallsyms_lines() -> list[str]:
    with open("/proc/kallsyms") as f:
        return f.readlines()


def _images(lines: list[str]) -> list[str]:
    return sorted(ln for ln in lines if ln.endswith("\t[bpf]\n") and " bpf_prog_" not in ln)


def _split_now() -> tuple[bytes, bytes, str]:
    r = SplitKallsyms()
    try:
        saw = r.question()
        if saw is not None:
            r.answer(bpf_images.expected(check_xdp=saw != "d").answer())
        return r.result()
    finally:
        r.close()


def test_split_gives_the_kernel_part_and_every_image_symbol():
    with Held(DEMO, copies=40):  # 160 [bpf] lines of programs, then whatever else exists
        kernel, images, status = _split_now()
        text = "".join(_kallsyms_lines()).encode()
    assert text.startswith(kernel)
    assert b"\t[bpf]\n" not in kernel and text[len(kernel) :].split(b"\n")[0].endswith(b"[bpf]")
    # the image lines it kept are all a full read finds (dispatchers; no trampolines here:
    # fentry/fexit cannot load on this kernel)
    assert sorted(images.decode().splitlines(keepends=True)) == _images(
        text.decode().splitlines(keepends=True)
    ), status


def test_expected_images_follow_bpf_links_maps_and_xdp_programs():
    with Held(DEMO):
        e = bpf_images.expected(check_xdp=True)
        names = {ln.split()[2] for ln in _images(_kallsyms_lines())}
    assert ("bpf_dispatcher_xdp",) in e.need  # the held xdp_demo: it test-ran at load
    assert all(set(alts) & names for alts in e.need), (e, names)
    assert not bpf_images.expected(check_xdp=False).need or e.need


@pytest.fixture
def held3000():  # released right after: plain perf would read 12k [bpf] lines 3 times
    ensure_loader()
    t0 = time.monotonic()
    h = _progs.hold(3000, Path(f"/sys/fs/bpf/bpfsym-test-{os.getpid()}"))
    print(f"3000 programs held in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    try:
        yield h
    finally:
        h.release()


def test_capture_of_3000_held_programs_is_complete(tmp_path, held3000):
    # the recorded command copies /proc/kallsyms while it runs: the file it reads is the
    # real one (perf read a private one), and names are checked against its lines
    seen = tmp_path / "kallsyms.seen"
    out = tmp_path / "perf.data"
    t0 = time.monotonic()
    r = bpfsym_run("record", *PERF_OPTS, "-o", str(out), "--", "cp", "/proc/kallsyms", str(seen))
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    print(f"bpfsym record with 3000 held: {took:.1f} s (the command's full read included)")
    lines = seen.read_text().splitlines()
    bpf_lines = {int(p[0], 16): p[2] for p in (ln.split() for ln in lines) if p[-1] == "[bpf]"}
    held = set(held3000.ids)
    cap = read_capture(str(out) + ".bpfsym")
    progs = {p.id: p for p in cap.programs}
    assert held <= set(progs)
    for i in held:
        p = progs[i]
        assert p.origin == "snapshot" and p.has_image, (i, p.missing)
        assert len(p.functions) == 4
        assert [bpf_lines.get(f.addr) for f in p.functions] == [f.name for f in p.functions]
    # images: every held program's JIT image and functions as the C loader (libbpf) reads
    # its bpf_prog_info
    loader = str(ensure_loader())
    for i in sorted(held):
        info = subprocess.run([loader, "info", str(i)], capture_output=True, text=True, check=True)
        ref = _json(info.stdout)
        p = progs[i]
        assert b"".join(f.image or b"" for f in p.functions).hex() == ref["jited"]
        want = [(f["ksym_name"], int(f["addr"], 16), f["len"]) for f in ref["funcs"]]
        assert [(f.name, f.addr, f.size) for f in p.functions] == want
    # the side file's kallsyms: the kernel part as the command read it, and its image lines
    got = {(s.addr, s.name) for s in capture_kernel_symbols(cap)}
    want_k = {
        (int(p[0], 16), p[2])
        for p in (ln.split() for ln in lines)
        if p[-1] != "[bpf]" or not p[2].startswith("bpf_prog_")
    }
    assert got == want_k
    assert re.search(r"\[ bpfsym record: (\d+) programs at start", r.stderr)


def _json(text: str) -> dict:
    import json

    return json.loads(text.strip().splitlines()[-1])


def _packet(path: Path) -> Path:
    eth = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
    ip = bytes([0x45, 0, 0x03, 0xF2, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2])
    path.write_bytes(eth + ip + bytes((i * 37 + 11) & 0xFF for i in range(1024 - 34)))
    return path


def _workload(pins: list[Path], pkt: Path) -> list[str]:
    """Held programs (loaded before the recording) run by bpftool, then churn.bpf.o loaded,
    run and unloaded three times by the C loader: samples in both kinds of program."""
    runs = "; ".join(
        f"bpftool prog run pinned {p} data_in {pkt} repeat 4000 >/dev/null" for p in pins
    )
    churn = f"{ensure_loader()} run {CHURN} churn_filter --repeat 200000 >/dev/null"
    return ["sh", "-c", f"{runs}; {churn}; {churn}; {churn}"]


def _perf_report(data: Path) -> tuple[Counter[str], int, str]:
    """stock perf report --sort sym: BPF samples by function name (tag dropped), samples
    at raw BPF-area addresses, and perf's stderr."""
    p = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "-q", "--sort", "sym", "-F", "sample,sym"],
        capture_output=True, text=True,
    )  # fmt: skip
    named: Counter[str] = Counter()
    raw = 0
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        n, sym = int(parts[0]), parts[-1]
        if sym.startswith(("bpf_prog_", "bpf_dispatcher", "bpf_trampoline")):
            named[re.sub(r"^bpf_prog_[0-9a-f]{16}_?", "", sym)] += n
        elif re.fullmatch(r"0xffffffffc[0-9a-f]+", sym):
            raw += n
    return named, raw, p.stderr if p.returncode else ""


def _header_ids(data: Path) -> set[int]:
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--header-only"], capture_output=True, text=True
    ).stdout
    return {int(m) for m in re.findall(r"^# bpf_prog_info (\d+):", out, re.M)}


KNOWN_PERF_FAILURE = "failed to process type: 17"  # docs/record-startup.md: KSYMBOL size


def test_stock_perf_report_names_held_and_churned_functions_as_on_perfs_own(tmp_path):
    ensure_loader()
    pkt = _packet(tmp_path / "pkt")
    h = _progs.hold(20, Path(f"/sys/fs/bpf/bpfsym-test-r{os.getpid()}"))
    try:
        pins = sorted(h.dir.iterdir())[:5]
        for attempt in range(3):  # perf 6.1 itself fails on some files: see below
            ours, plain = tmp_path / f"ours{attempt}.data", tmp_path / f"plain{attempt}.data"
            r = bpfsym_run("record", *PERF_OPTS, "-o", str(ours), "--", *_workload(pins, pkt))
            assert r.returncode == 0, r.stderr
            p = subprocess.run(
                ["perf", "record", "-q", *PERF_OPTS, "-o", str(plain), "--",
                 *_workload(pins, pkt)], capture_output=True, text=True,
            )  # fmt: skip
            assert p.returncode == 0, p.stderr
            n_ours, raw_ours, err_ours = _perf_report(ours)
            n_plain, raw_plain, err_plain = _perf_report(plain)
            for err in (err_ours, err_plain):
                assert not err or KNOWN_PERF_FAILURE in err, err
            if not err_ours and not err_plain:
                break
            # perf reads a KSYMBOL's sample_id from the record's end, and 6.18 makes
            # header.size too large with several listeners (docs/kernel-notes.md): stock
            # perf fails on its own files too, at random; try the pair again
            print(f"attempt {attempt}: perf report failed: ours {bool(err_ours)}, "
                  f"plain {bool(err_plain)}")  # fmt: skip
        else:
            pytest.fail("stock perf report failed on 3 pairs of files")
        held_ids = set(h.ids)
        assert held_ids <= _header_ids(ours) and held_ids <= _header_ids(plain)
    finally:
        h.release()
    print("perf report on bpfsym's perf.data:", dict(n_ours), "raw", raw_ours)
    print("perf report on perf's own:       ", dict(n_plain), "raw", raw_plain)
    held_funcs = {"xdp_demo", "parse_ipv4", "hash_mix", "count_bytes"}
    churn_funcs = {"churn_filter", "load_word", "fold32"}
    assert n_ours.keys() & held_funcs and n_ours.keys() & churn_funcs, n_ours
    assert n_plain.keys() & held_funcs, n_plain  # perf's own file may miss churned ones
    assert raw_ours <= raw_plain  # BPF samples perf could not name: none beyond its own
    # every function with a share of the BPF samples in perf's own file is named in ours
    total = sum(n_plain.values())
    for name, n in n_plain.items():
        if n >= 0.05 * total:
            assert name in n_ours, (name, n_plain, n_ours)
    # the wake programs: real programs in perf.data, never sampled
    assert "bpfsym_wake" not in n_ours
    assert re.search(r", (\d+) bpfsym_wake \(bpfsym's own\) \]", r.stderr), r.stderr


def test_perf_in_namespace_writes_what_plain_perf_writes_and_the_command_sees_kallsyms(
    tmp_path,
):
    count = "grep -c '\\[bpf\\]' /proc/kallsyms"
    with Held(DEMO, copies=20) as held:
        r = bpfsym_run("record", *PERF_OPTS, "-o", str(tmp_path / "ns"), "--", "sh", "-c", count)
        assert r.returncode == 0, r.stderr
        plain = subprocess.run(
            ["perf", "record", "-q", *PERF_OPTS, "-o", str(tmp_path / "plain"), "--", "true"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert plain.returncode == 0, plain.stderr
        nfuncs = sum(len(h["funcs"]) for h in held.progs)
    # the recorded command saw the real /proc/kallsyms, [bpf] lines and all
    assert int(r.stdout.split()[-1]) >= nfuncs
    held_ids = {h["prog_id"] for h in held.progs}
    assert held_ids <= _header_ids(tmp_path / "ns") and held_ids <= _header_ids(tmp_path / "plain")

    def dump(data: Path) -> str:
        return subprocess.run(["perf", "report", "-i", str(data), "-D"],
                              capture_output=True, text=True).stdout  # fmt: skip

    d_ns, d_plain = dump(tmp_path / "ns"), dump(tmp_path / "plain")

    # perf synthesized a KSYMBOL for every held function both ways, under one name (perf's
    # own: it names a main function with prog_tags[0], see docs/kernel-notes.md)
    def ksyms(d: str) -> dict[int, str]:
        pat = r"PERF_RECORD_KSYMBOL addr ([0-9a-f]+) len \d+ type \d+ flags 0x0 name (\S+)"
        return {int(a, 16): n for a, n in re.findall(pat, d)}

    k_ns, k_plain = ksyms(d_ns), ksyms(d_plain)
    addrs = [int(fn["addr"], 16) for h in held.progs for fn in h["funcs"]]
    assert all(a in k_plain and k_ns.get(a) == k_plain[a] for a in addrs)
    # trampolines and dispatchers perf synthesizes from the [bpf] lines of its kallsyms
    assert ("bpf_dispatcher_xdp" in d_ns) == ("bpf_dispatcher_xdp" in d_plain)
    kmap = r"PERF_RECORD_MMAP -1/0: \[(0x[0-9a-f]+)\(0x[0-9a-f]+\) @ (0x[0-9a-f]+)\]: x \[kernel\.kallsyms\](\S+)"
    assert re.search(kmap, d_ns).groups() == re.search(kmap, d_plain).groups()
    # the command ran in bpfsym's mount namespace: perf's header names the way back
    head = subprocess.run(["perf", "report", "-i", str(tmp_path / "ns"), "--header-only"],
                          capture_output=True, text=True).stdout  # fmt: skip
    assert re.search(r"^# cmdline : .* -- \S*nsenter --mount=/proc/\d+/ns/mnt ", head, re.M)
    cap = read_capture(str(tmp_path / "ns.bpfsym"))
    assert held_ids <= {p.id for p in cap.programs if p.has_image}
    # bpfsym_wake: the side file has them and says they were bpfsym's own; they came after
    # perf disabled its events, so perf.data has at most the bpf_prog_info of one that
    # perf's side-band thread read before the close, and never a sample
    wake = [p for p in cap.programs if p.name == "bpfsym_wake"]
    note = next(w for w in cap.warnings if "bpfsym_wake" in w)
    assert wake and all(str(p.id) in note for p in wake)
    assert all(p.load_time and p.load_time > cap.header.start_time for p in wake)
    n = int(re.search(r", (\d+) bpfsym_wake \(bpfsym's own\) \]", r.stderr).group(1))
    assert n == len(wake)


def test_no_perf_namespace_runs_perf_as_it_is(tmp_path):
    out = tmp_path / "plain.data"
    r = bpfsym_run("record", "--no-perf-namespace", *PERF_OPTS, "-o", str(out), "--", "true")
    assert r.returncode == 0, r.stderr
    head = subprocess.run(["perf", "report", "-i", str(out), "--header-only"],
                          capture_output=True, text=True).stdout  # fmt: skip
    assert re.search(r"^# cmdline : .*perf record .* -- true\s*$", head, re.M), head
    assert "nsenter" not in head
    assert not [ln for ln in r.stderr.splitlines() if ln.startswith("bpfsym record:")]
    assert read_capture(str(out) + ".bpfsym").end_time is not None


def _path_without(tmp_path: Path, missing: set[str], fake: dict[str, str]) -> str:
    """A PATH holding what record runs, less `missing`, plus `fake` scripts."""
    d = tmp_path / "bin"
    d.mkdir()
    for tool in ("perf", "sh", "true", "unshare", "nsenter", "mount"):
        real = shutil.which(tool)
        if tool not in missing and tool not in fake and real:
            (d / tool).symlink_to(real)
    for tool, script in fake.items():
        (d / tool).write_text(script)
        (d / tool).chmod(0o755)
    return str(d)


@pytest.mark.parametrize(
    "missing, fake, says",
    [
        # a host without util-linux's unshare/nsenter
        ({"unshare", "nsenter"}, {}, "no unshare, nsenter here (util-linux)"),
        # one where a mount namespace cannot be made: unshare fails as it does without
        # CAP_SYS_ADMIN or under a seccomp filter (a stand-in: this root VM can make one)
        (set(), {"unshare": "#!/bin/sh\necho 'unshare: unshare failed: Operation not "
                 "permitted' >&2\nexit 1\n"}, "unshare failed: Operation not permitted"),
    ],
)  # fmt: skip
def test_without_a_namespace_perf_runs_as_it_is_and_record_says_so_once(
    tmp_path, missing, fake, says
):
    out = tmp_path / "x.data"
    env = dict(ENV, PATH=_path_without(tmp_path, missing, fake))
    r = subprocess.run(
        [*BPFSYM, "record", *PERF_OPTS, "-o", str(out), "--", "true"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    mine = [ln for ln in r.stderr.splitlines() if ln.startswith("bpfsym record:")]
    assert len(mine) == 1 and says in mine[0], r.stderr
    assert "perf reads the host's /proc/kallsyms" in mine[0]
    head = subprocess.run(["perf", "report", "-i", str(out), "--header-only"],
                          capture_output=True, text=True).stdout  # fmt: skip
    assert "nsenter" not in head and re.search(r"^# cmdline : .* -- true\s*$", head, re.M)
    assert read_capture(str(out) + ".bpfsym").end_time is not None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_with_perf_in_namespace_closes_cleanly_with_perfs_status(tmp_path, sig):
    # bpfsym forwards the signal to perf and the command; the status is then perf's, as
    # without bpfsym: perf sends its workload SIGTERM and re-raises what it got
    # (builtin-record.c, record__sig_exit)
    trap = ["sh", "-c", 'trap "exit 7" INT TERM; while :; do sleep 0.1; done']
    out = tmp_path / "s.data"
    ours = _signalled(
        [*BPFSYM, "record", *PERF_OPTS, "-o", str(out), "--", *trap], sig, forward=False
    )
    plain = _signalled(
        ["perf", "record", "-q", *PERF_OPTS, "-o", str(tmp_path / "p.data"), "--", *trap],
        sig, forward=True,
    )  # fmt: skip
    # a signal's death is 128 + its number, as a shell says it (record exits, not dies)
    assert ours[0] == (plain[0] if plain[0] >= 0 else 128 - plain[0]), (ours, plain)
    cap = read_capture(str(out) + ".bpfsym")
    assert cap.torn == "" and cap.end_time is not None
    rep = subprocess.run(["perf", "report", "-i", str(out), "--header-only"],
                         capture_output=True, text=True)  # fmt: skip
    assert rep.returncode == 0 and "nsenter" in rep.stdout  # it was the namespace path
    assert "bpfsym record: side file" in ours[1]


def _signalled(argv: list[str], sig: int, forward: bool) -> tuple[int, str]:
    """Run argv until perf's child is the command's sh, send sig (to perf and the
    command as well when forward), and return (exit status, stderr)."""
    from kit.livekit import children, comm

    proc = subprocess.Popen(argv, env=ENV, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    perf = [proc.pid] if forward else []
    while True:
        perfs = [proc.pid] if forward else [c for c in children(proc.pid) if comm(c) == "perf"]
        shs = [g for p in perfs for g in children(p) if comm(g) == "sh"]
        if shs:
            perf = perfs
            break
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    for pid in [*perf, *shs] if forward else [proc.pid]:
        os.kill(pid, sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err
