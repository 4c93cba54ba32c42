"""hostsyms: the kernel part of a kallsyms file, also across read chunks, read here or by
the reader process (HostKallsyms) for report and its forked second process."""

from __future__ import annotations

import hashlib
import os
import sys

import pytest

from bpfsym.live.host import HostKallsyms, kernel_kallsyms, read_host_kallsyms
from bpfsym.read.kallsyms import parse_kallsyms


def _kallsyms(n_kernel: int, n_bpf: int) -> tuple[bytes, bytes]:
    kern = b"".join(
        b"ffffffff%08x T kernel_function_%d\n" % (0x81000000 + i * 16, i) for i in range(n_kernel)
    )
    mods = b"ffffffffc1000000 t mod_fn\t[some_mod]\n"
    bpf = b"".join(
        b"ffffffffc00%05x t bpf_prog_%016x_p%d\t[bpf]\n" % (i * 64, i, i) for i in range(n_bpf)
    )
    return kern + mods + bpf, kern + mods


def test_cut_at_the_first_bpf_line_across_chunks(tmp_path):
    # > 1 MiB of kernel lines: the cut falls in a later read chunk
    whole, want = _kallsyms(40000, 300)
    assert len(want) > 1 << 20
    p = tmp_path / "kallsyms"
    p.write_bytes(whole)
    got = kernel_kallsyms(str(p))
    assert got == want
    syms = parse_kallsyms(got.decode())
    assert len(syms) == 40001 and syms[-1].module == "some_mod"


def test_no_bpf_part_and_no_final_newline(tmp_path):
    whole, want = _kallsyms(10, 0)
    p = tmp_path / "kallsyms"
    p.write_bytes(whole[:-1])
    assert kernel_kallsyms(str(p)) == want[:-1]


def test_host_reader_process_gives_the_kernel_part(tmp_path):
    # HostKallsyms has bpfsym/_kread.py (a process of its own) read the file into a memfd
    whole, want = _kallsyms(3000, 20)
    p = tmp_path / "kallsyms"
    p.write_bytes(whole)
    h = HostKallsyms(str(p))
    assert h.text() == want.decode()
    assert h.text() == read_host_kallsyms(str(p))
    h.close()
    with pytest.raises(FileNotFoundError):
        HostKallsyms(str(tmp_path / "missing")).text()


def test_host_reader_text_reaches_a_forked_process(tmp_path):
    whole, want = _kallsyms(2000, 5)
    p = tmp_path / "kallsyms"
    p.write_bytes(whole)
    h = HostKallsyms(str(p))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # what report's second reading process does
        try:
            os.write(w, hashlib.sha256(h.inherit().text().encode()).digest())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == hashlib.sha256(want).digest()
    assert h.text() == want.decode()  # and the parent still has it
    h.close()


def test_host_reader_without_a_python_to_start(tmp_path, monkeypatch):
    whole, want = _kallsyms(100, 3)
    p = tmp_path / "kallsyms"
    p.write_bytes(whole)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    assert HostKallsyms(str(p)).text() == want.decode()  # read here instead
