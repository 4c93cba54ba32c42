"""hostsyms: the kernel part of a kallsyms file, also across read chunks, read here or by
the reader process (HostKallsyms) for report and its forked second process."""

from __future__ import annotations

import hashlib
import os
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.live.host import HostKallsyms, kernel_kallsyms
from bpfsym.read.arrays import hex_column
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


def _read_both_ways(p) -> bytes:
    """kernel_kallsyms of file p, read whole (a file with a size) and as a stream in
    chunks (as /proc/kallsyms, whose size is 0: here a FIFO); both must agree."""
    whole = kernel_kallsyms(str(p))
    fifo = str(p) + ".fifo"
    os.mkfifo(fifo)
    data = p.read_bytes()

    def write() -> None:
        try:
            with open(fifo, "wb") as f:
                f.write(data)
        except BrokenPipeError:  # the reader stops at the first BPF line
            pass

    writer = threading.Thread(target=write)
    writer.start()
    try:
        streamed = kernel_kallsyms(fifo)
    finally:
        writer.join()
        os.unlink(fifo)
    assert streamed == whole
    return whole


def test_cut_at_the_first_bpf_line_across_chunks(tmp_path):
    # > 1 MiB of kernel lines: the cut falls in a later read chunk
    whole, want = _kallsyms(40000, 300)
    assert len(want) > 1 << 20
    p = tmp_path / "kallsyms"
    p.write_bytes(whole)
    got = _read_both_ways(p)
    assert got == want
    syms = parse_kallsyms(got.decode())
    assert len(syms) == 40001 and syms[-1].module == "some_mod"


def test_no_bpf_part_and_no_final_newline(tmp_path):
    whole, want = _kallsyms(10, 0)
    p = tmp_path / "kallsyms"
    p.write_bytes(whole[:-1])
    assert _read_both_ways(p) == want[:-1]


def test_host_reader_process_gives_the_kernel_part(tmp_path):
    # HostKallsyms has bpfsym/_kread.py (a process of its own) read the file into a memfd
    whole, want = _kallsyms(3000, 20)
    p = tmp_path / "kallsyms"
    p.write_bytes(whole)
    h = HostKallsyms(str(p))
    assert h.raw() == want
    assert h.raw() == kernel_kallsyms(str(p))
    h.close()
    with pytest.raises(FileNotFoundError):
        HostKallsyms(str(tmp_path / "missing")).raw()


def test_host_reader_text_reaches_a_forked_process(tmp_path):
    whole, want = _kallsyms(2000, 5)
    p = tmp_path / "kallsyms"
    p.write_bytes(whole)
    h = HostKallsyms(str(p))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # what report's second reading process does
        try:
            os.write(w, hashlib.sha256(h.inherit().raw()).digest())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == hashlib.sha256(want).digest()
    assert h.raw() == want  # and the parent still has it
    h.close()


def test_host_reader_without_a_python_to_start(tmp_path, monkeypatch):
    whole, want = _kallsyms(100, 3)
    p = tmp_path / "kallsyms"
    p.write_bytes(whole)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    assert HostKallsyms(str(p)).raw() == want  # read here instead


@pytest.mark.parametrize("shift", range(-8, 3))
@pytest.mark.parametrize("modules", [False, True])
def test_cut_where_the_first_bracket_or_bpf_line_straddles_a_read(tmp_path, shift, modules):
    # reads come 1 MiB at a time from a file: "\t[bpf]" (with modules=False also the
    # first "[") placed across that boundary, so that its search starts in one chunk
    mod = b"ffffffffc1000000 t mod_fn\t[some_mod]\n" if modules else b""
    bpf_head = b"ffffffffc0000000 t bpf_prog_0000000000000000_p"
    bpf = bpf_head + b"\t[bpf]\n"
    size = (1 << 20) + shift - len(bpf_head) - len(mod)  # of the kernel part
    line = b"ffffffff81000000 T fn\n"
    head = line * (size // len(line) - 2)
    last = b"ffffffff81000000 T "
    kern = head + last + b"x" * (size - len(head) - len(last) - 1) + b"\n"
    p = tmp_path / "kallsyms"
    p.write_bytes(kern + mod + bpf + bpf)
    assert (kern + mod + bpf).find(b"\t[bpf]") == (1 << 20) + shift
    assert _read_both_ways(p) == kern + mod


HEX = b"0123456789abcdefABCDEF"


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([8, 16, 1, 7, 12]),
    st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=6),
    st.one_of(
        st.none(),
        st.sampled_from(b"/:@G`g\x00\x7f\x80\xb0\xc1\xff"),  # just outside 0-9 a-f A-F
        st.integers(0, 255),
    ),
)
def test_hex_column_reads_addresses_as_int_does(width, seeds, corrupt):
    # lines "<width digits> t x": digits from HEX, with (corrupt) one byte of that value
    lines = [bytes(HEX[b % len(HEX)] for b in s[:width]) for s in seeds]
    if corrupt is not None:
        k, pos = seeds[0][0] % len(lines), seeds[0][1] % width
        bad = bytearray(lines[k])
        bad[pos] = corrupt
        lines[k] = bytes(bad)
    text = b"".join(x + b" t x\n" for x in lines)
    starts = np.array([i * (width + 5) for i in range(len(lines))], dtype=np.int64)
    got = hex_column(np, np.frombuffer(text, dtype=np.uint8), starts, width)
    ok = all(c in HEX for x in lines for c in x)
    if not ok:
        assert got is None
    else:
        assert got is not None and got.tolist() == [int(x, 16) for x in lines]
