"""The start/stop prototype (bpfsym.proto_record, perfns, fastcap; docs/record-startup.md)
on the real kernel, checked against /proc/kallsyms, the C loader's bpf_prog_info, perf's
own perf.data and bpfsym's construct path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from livekit import DEMO, ENV, Held, kallsyms_bpf, loader_json

from bpfsym import fastcap, perfns
from bpfsym.formats import bpf as fb
from bpfsym.formats import sidefile as sf
from bpfsym.live import progs
from bpfsym.store import SideFileWriter, read_capture

PROTO = [sys.executable, "-P", "-m", "bpfsym.proto_record"]


def _proto(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROTO, *args], env=ENV, capture_output=True, text=True, timeout=300
    )  # fmt: skip


def _full_read_images() -> list[str]:
    with open("/proc/kallsyms") as f:
        return [ln for ln in f if ln.endswith("\t[bpf]\n") and " bpf_prog_" not in ln]


def test_split_gives_the_kernel_part_and_every_image_symbol():
    with Held(DEMO):  # xdp_demo: the dispatcher exists once an XDP program ran (or may)
        kernel, images, status = perfns.split("/proc/kallsyms")
        full = _full_read_images()
        with open("/proc/kallsyms", "rb") as f:
            text = f.read()
    assert text.startswith(kernel)
    assert b"\t[bpf]\n" not in kernel and text[len(kernel) :].split(b"\n")[0].endswith(b"[bpf]")
    # the image lines the split kept are all there are (dispatchers; no trampolines here)
    assert sorted(images.decode().splitlines(keepends=True)) == sorted(full), status


def test_expected_images_follow_bpf_links_and_maps():
    e = perfns.Expected.now(check_xdp=True)
    with Held(DEMO):
        e2 = perfns.Expected.now(check_xdp=True)
    assert e2.xdp  # the held xdp_demo
    names = {ln.split()[2] for ln in _full_read_images()}
    assert e2.trampolines <= names and e.trampolines <= names


def test_fastcap_builds_the_bytes_of_the_construct_path(tmp_path):
    names = fb.prog_info_struct()[1]
    pointers = [i for i, n in enumerate(names) if n in {p for p, _, _ in progs._ARRAYS.values()}]
    info = fb.prog_info_struct()[0]
    with Held(DEMO) as held:
        slow = SideFileWriter(str(tmp_path / "slow"))
        fast = fastcap.FastWriter(str(tmp_path / "fast"))
        for h in held.progs:
            fd = progs.fd_by_id(h["prog_id"])
            try:
                a, b = progs.fetch_blobs(fd), fastcap.fetch_blobs(fd)
            finally:
                os.close(fd)
            ia, ib = list(info.unpack(a.blobs["info"])), list(info.unpack(b.blobs["info"]))
            for i in pointers:
                ia[i] = ib[i] = 0  # each call's own buffer addresses
            assert ia == ib and a.missing == b.missing
            assert {k: v for k, v in a.blobs.items() if k != "info"} == {
                k: v for k, v in b.blobs.items() if k != "info"
            }
            value = {"prog_id": h["prog_id"], "origin": "rescan", "load_time": -1,
                     "missing": a.missing, "blobs": [{"name": k, "data": v} for k, v in a.blobs.items()]}  # fmt: skip
            slow.put(sf.PROGRAM, value)
            fast.put_program(h["prog_id"], "rescan", -1, a.missing, a.blobs)
            slow.write(sf.SIDEBAND, sf.sideband.build({"cpu": 3, "record": b"r" * 40}), False)
            fast.flush_programs()  # keep the two files in one order
            fast = _reopen(fast, tmp_path / "fast")
            fast.sideband(3, b"r" * 40)
        slow.close()
        fast.close()
    assert (tmp_path / "slow").read_bytes() == (tmp_path / "fast").read_bytes()


def _reopen(w: fastcap.FastWriter, path: Path) -> fastcap.FastWriter:
    w.close()
    data = path.read_bytes()
    new = fastcap.FastWriter(str(path))  # truncates and writes the magic: put back the rest
    os.write(new._fd, data[len(sf.MAGIC) :])
    return new


def test_no_perf_capture_names_and_images_equal_the_kernels(tmp_path):
    with Held(DEMO, copies=20) as held:
        ks = kallsyms_bpf()
        r = _proto("--no-perf", "-o", str(tmp_path / "n"), "--", "true")
        assert r.returncode == 0, r.stderr
        ref = {h["prog_id"]: loader_json("info", str(h["prog_id"])) for h in held.progs[:3]}
    cap = read_capture(str(tmp_path / "n.bpfsym"))
    got = {p.id: p for p in cap.programs}
    for h in held.progs:
        p = got[h["prog_id"]]
        assert p.has_image and p.origin == "snapshot"
        assert [f.name for f in p.functions] == [ks[f.addr] for f in p.functions]
    for prog_id, info in ref.items():
        assert b"".join(f.image or b"" for f in got[prog_id].functions).hex() == info["jited"]
    # the kernel part, and the image lines a full read finds
    with open("/proc/kallsyms") as f:
        want = [(int(p[0], 16), p[2]) for p in (ln.split() for ln in f)
                if p[-1] != "[bpf]" or not p[2].startswith("bpf_prog_")]  # fmt: skip
    assert sorted((s.addr, s.name) for s in cap.kernel_symbols()) == sorted(want)


def test_perf_in_namespace_writes_what_plain_perf_writes_and_the_command_sees_kallsyms(
    tmp_path,
):
    count = "grep -c '\\[bpf\\]' /proc/kallsyms"
    with Held(DEMO, copies=20) as held:
        r = _proto("-a", "-e", "cpu-clock", "-o", str(tmp_path / "ns"), "--", "sh", "-c", count)
        assert r.returncode == 0, r.stderr
        plain = subprocess.run(
            ["perf", "record", "-q", "-a", "-e", "cpu-clock", "-o", str(tmp_path / "plain"),
             "--", "true"], capture_output=True, text=True,
        )  # fmt: skip
        assert plain.returncode == 0, plain.stderr
        nfuncs = sum(len(h["funcs"]) for h in held.progs)
    # the recorded command saw the real /proc/kallsyms, [bpf] lines and all
    assert int(r.stdout.split()[-1]) >= nfuncs
    held_ids = {h["prog_id"] for h in held.progs}

    def header_ids(data: Path) -> set[int]:
        out = subprocess.run(["perf", "report", "-i", str(data), "--header-only"],
                             capture_output=True, text=True).stdout  # fmt: skip
        return {int(m) for m in re.findall(r"^# bpf_prog_info (\d+):", out, re.M)}

    def dump(data: Path) -> str:
        return subprocess.run(["perf", "report", "-i", str(data), "-D"],
                              capture_output=True, text=True).stdout  # fmt: skip

    assert held_ids <= header_ids(tmp_path / "ns") and held_ids <= header_ids(tmp_path / "plain")
    d_ns, d_plain = dump(tmp_path / "ns"), dump(tmp_path / "plain")

    # perf synthesized a KSYMBOL for every held function both ways, under one name (perf's
    # own: it names a main function with prog_tags[0], see docs/kernel-notes.md)
    def ksyms(d: str) -> dict[int, str]:
        pat = r"PERF_RECORD_KSYMBOL addr ([0-9a-f]+) len \d+ type \d+ flags 0x0 name (\S+)"
        return {int(a, 16): n for a, n in re.findall(pat, d)}

    k_ns, k_plain = ksyms(d_ns), ksyms(d_plain)
    addrs = [int(fn["addr"], 16) for h in held.progs for fn in h["funcs"]]
    assert all(a in k_plain and k_ns.get(a) == k_plain[a] for a in addrs)
    assert ("bpf_dispatcher_xdp" in d_ns) == ("bpf_dispatcher_xdp" in d_plain)
    kmap = r"PERF_RECORD_MMAP -1/0: \[(0x[0-9a-f]+)\(0x[0-9a-f]+\) @ (0x[0-9a-f]+)\]: x \[kernel\.kallsyms\](\S+)"
    assert re.search(kmap, d_ns).groups() == re.search(kmap, d_plain).groups()
    # the side file has every held program with its image
    cap = read_capture(str(tmp_path / "ns.bpfsym"))
    assert held_ids <= {p.id for p in cap.programs if p.has_image}
