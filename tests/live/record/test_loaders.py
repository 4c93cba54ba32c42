"""Programs loaded by other people's loaders are captured like any other: bcc (its own
compiler and loader, through the system python's bcc module) and iproute2 (`ip link ...
xdp obj`), checked against /proc/kallsyms read while they were alive."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

from kit.livekit import REPO, Recording, kallsyms_bpf

from bpfsym.read.sidefile import read_capture

BCC = r"""
import json, sys
from bcc import BPF
b = BPF(text='''
static inline int fold(int x) { return (x >> 3) ^ x; }  // bcc cannot load BPF-to-BPF calls
int bcc_filter(struct __sk_buff *skb) { return fold(skb->len) & 1; }
int bcc_count(struct __sk_buff *skb) { return skb->len; }
''')
fds = [b.load_func(n, BPF.SOCKET_FILTER).fd for n in ("bcc_filter", "bcc_count")]
ids = []
for fd in fds:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        ids += [int(l.split()[1]) for l in f if l.startswith("prog_id:")]
with open("/proc/kallsyms") as f:
    ks = {int(l.split()[0], 16): l.split()[2] for l in f if l.rstrip().endswith("[bpf]")}
print(json.dumps({"ids": ids, "kallsyms": {str(k): v for k, v in ks.items()}}))
"""


def _check(cap, ids, ks):
    progs = {p.id: p for p in cap.programs}
    for i in ids:
        p = progs[i]
        assert p.origin == "sideband" and p.has_image, (i, p.missing)
        assert p.unload_time is not None and p.load_time < p.unload_time
        assert [f.name for f in p.functions] == [ks[f.addr] for f in p.functions]


def test_bcc_programs(tmp_path):
    with Recording(tmp_path / "bcc") as rec:
        out = subprocess.run(
            ["/usr/bin/python3", "-c", BCC], capture_output=True, text=True, timeout=300, check=True
        )
        time.sleep(0.3)
        rec.stop()
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    ks = {int(k): v for k, v in doc["kallsyms"].items()}
    assert len(doc["ids"]) == 2
    _check(read_capture(str(rec.side)), doc["ids"], ks)
    names = {p.name for p in read_capture(str(rec.side)).programs if p.id in doc["ids"]}
    assert names == {"bcc_filter", "bcc_count"}


def test_iproute2_xdp_program(tmp_path):
    ns = f"bpfsym{uuid.uuid4().hex[:8]}"
    obj = REPO / "tests/fixtures/btf/minimal.bpf.o"

    def ip(*args):
        return subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True, check=True)

    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        ip("link", "add", "va", "type", "veth", "peer", "name", "vb")
        ip("link", "set", "va", "up")
        with Recording(tmp_path / "ip") as rec:
            ip("link", "set", "dev", "va", "xdp", "obj", str(obj), "sec", "xdp")
            link = json.loads(ip("-j", "link", "show", "va").stdout)[0]
            prog_id = link["xdp"]["prog"]["id"]
            ks = kallsyms_bpf()
            ip("link", "set", "dev", "va", "xdp", "off")
            time.sleep(0.3)
            rec.stop()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    _check(read_capture(str(rec.side)), [prog_id], ks)
