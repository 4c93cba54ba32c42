"""The kallsyms split reader (live/kallsyms_split.py) on kallsyms files of the layout the
kernel writes (kernel part, then [bpf] lines in insertion order): where it stops, what
it keeps, what it asks; in process and as the separate process record starts."""

from __future__ import annotations

import pytest

from bpfsym.formats import bpf_links as fl
from bpfsym.live import kallsyms_split as ks
from bpfsym.live.bpf_images import Expected
from bpfsym.live.prestart import SplitKallsyms

KERNEL = b"".join(b"ffffffff8100%04x T sym_%d\n" % (i, i) for i in range(3000))
TRAMP = fl.trampoline_names(7, 1234)[1]  # a kernel target: bit 31 set in the key


def _bpf_part(n: int, extra: dict[int, bytes]) -> bytes:
    out = []
    for i in range(n):
        name = extra.get(i, b"bpf_prog_%016x_f%d" % (i, i))
        out.append(b"ffffffffc%07x t %s\t[bpf]\n" % (i * 64, name))
    return b"".join(out)


@pytest.fixture
def kallsyms(tmp_path):
    p = tmp_path / "kallsyms"
    images = {3: b"bpf_dispatcher_xdp", 1500: TRAMP.encode()}
    p.write_bytes(KERNEL + _bpf_part(2000, images))
    return p


PAGE = 4096  # what a read of /proc/kallsyms gives at most (seq_file)


def _split(path, answer: str):
    asked: list[bool] = []

    def ask(saw: bool) -> str:
        asked.append(saw)
        return answer

    kernel, images, status = ks.split(str(path), ask, chunk=PAGE)
    return kernel, images.decode().splitlines(), status, asked


def _stopped_after(status: str, line: int) -> bool:
    """Stopped within the page after `line` (a page holds ~90 of these lines)."""
    words = status.split()
    return words[:2] == ["stopped", "after"] and line <= int(words[2]) < line + PAGE // 40


def test_nothing_needed_stops_after_the_prefix(kallsyms):
    kernel, images, status, asked = _split(kallsyms, "")
    assert kernel == KERNEL
    assert asked == [True]  # the dispatcher was among the first lines
    assert [ln.split()[2] for ln in images] == ["bpf_dispatcher_xdp"]
    assert _stopped_after(status, ks.PREFIX_LINES), status


def test_a_needed_trampoline_is_read_up_to_and_kept(kallsyms):
    other = fl.trampoline_names(7, 1234)[0]
    _k, images, status, _a = _split(kallsyms, f"need {other}|{TRAMP}\nneed bpf_dispatcher_xdp")
    assert [ln.split()[2] for ln in images] == ["bpf_dispatcher_xdp", TRAMP]
    assert _stopped_after(status, 1501), status


@pytest.mark.parametrize(
    "answer, why",
    [("all struct_ops map 5", "struct_ops map 5"), ("need bpf_trampoline_1", "not found")],
)
def test_what_cannot_be_found_reads_everything(kallsyms, answer, why):
    _k, images, status, _a = _split(kallsyms, answer)
    assert len(images) == 2
    assert status.startswith("read all 2000 [bpf] lines") and why in status


def test_a_short_bpf_part_is_read_without_asking(tmp_path):
    p = tmp_path / "k"
    p.write_bytes(KERNEL + _bpf_part(100, {99: b"bpf_trampoline_5"}))
    _k, images, status, asked = _split(p, "all never asked")
    assert asked == [] and images[-1].split()[2] == "bpf_trampoline_5"
    p.write_bytes(KERNEL)
    assert _split(p, "")[2] == "no [bpf] lines"


def test_no_dispatcher_in_the_prefix_is_said(tmp_path):
    p = tmp_path / "k"
    p.write_bytes(KERNEL + _bpf_part(1000, {900: b"bpf_dispatcher_xdp"}))
    _k, images, status, asked = _split(p, "need bpf_dispatcher_xdp")
    assert asked == [False] and _stopped_after(status, 901), status


def test_the_reader_process_asks_and_answers_as_in_process(tmp_path):
    # a file read whole at once (1 MB reads): the answer still decides what is kept
    p = tmp_path / "k"
    p.write_bytes(KERNEL + _bpf_part(2000, {3: b"bpf_dispatcher_xdp", 1500: TRAMP.encode()}))
    r = SplitKallsyms(str(p))
    try:
        assert r.question() == "d"
        r.answer(Expected(need=[fl.trampoline_names(7, 1234)]).answer())
        kernel, images, status = r.result()
    finally:
        r.close()
    assert kernel == KERNEL
    assert images.decode().split()[2::4] == ["bpf_dispatcher_xdp", TRAMP]
    assert status.startswith("stopped after 2000")


def test_the_reader_process_gives_up_without_an_answer(kallsyms):
    r = SplitKallsyms(str(kallsyms))
    assert r.question() == "d"
    r.close()  # no answer: it exits, nothing hangs
    r2 = SplitKallsyms(str(kallsyms.parent / "missing"))
    try:
        assert r2.question() is None
        with pytest.raises(FileNotFoundError):
            r2.result()
    finally:
        r2.close()


def test_trampoline_names_follow_the_kernels_key():
    # bpf_trampoline_compute_key (include/linux/bpf_verifier.h): a program target is
    # prog id << 32 | btf id, a kernel one btf obj id << 32 | 0x80000000 | btf id
    assert fl.trampoline_names(3, 17) == (
        f"bpf_trampoline_{(3 << 32) | 17}",
        f"bpf_trampoline_{(3 << 32) | 0x80000000 | 17}",
    )


def test_image_symbols_made_during_capture_become_kallsyms_lines(tmp_path):
    # a KSYMBOL record as the kernel writes one for a new trampoline (and one for a
    # program's function, which is not an image): the recorder keeps a kallsyms line for
    # the trampoline, which the side file's last KALLSYMS record then holds
    from bpfsym.capture.recorder import Recorder
    from bpfsym.formats import perf as fp
    from bpfsym.read.sidefile import SideFileWriter

    lay = fp.layouts()
    trailer = lay.sample_id(fp.SAMPLE_TID | fp.SAMPLE_TIME | fp.SAMPLE_CPU)

    def ksymbol(addr: int, name: str, flags: int = 0) -> bytes:
        body = lay.ksymbol.build(
            {"addr": addr, "len": 4096, "ksym_type": fp.KSYMBOL_TYPE_BPF, "flags": flags,
             "name": name}
        )  # fmt: skip
        body += bytes(-len(body) % 8) + trailer.build({"pid": 0, "tid": 0, "time": 1, "cpu": 0})
        head = lay.header.build({"type": fp.RECORD_KSYMBOL, "misc": 0, "size": 8 + len(body)})
        return head + body

    w = SideFileWriter(str(tmp_path / "s"))
    rec = Recorder(w)
    rec.on_record(0, ksymbol(0xFFFFFFFFC0001000, TRAMP), None)
    rec.on_record(0, ksymbol(0xFFFFFFFFC0002000, "bpf_prog_0123456789abcdef_f"), None)
    rec.on_record(0, ksymbol(0xFFFFFFFFC0001000, TRAMP, fp.KSYMBOL_FLAGS_UNREGISTER), None)
    rec.finish()
    w.close()
    assert rec.images == [f"ffffffffc0001000 t {TRAMP}\t[bpf]\n"]
