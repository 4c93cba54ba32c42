"""store.kernel_kallsyms: the kernel part of a kallsyms file, also across read chunks."""

from __future__ import annotations

from bpfsym.hostsyms import kernel_kallsyms, parse_kallsyms


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
