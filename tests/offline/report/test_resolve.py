"""report.resolve.plain_kernel: kernel addresses named from kallsyms in one lookup are
only those no other code (BPF, out-of-line, a module's map) ever covers, up to the
address space's last byte."""

from __future__ import annotations

import numpy as np

from bpfsym.read.kallsyms import KernelSymbols
from bpfsym.report.resolve import plain_kernel
from bpfsym.symbolize.symbolizer import KERNEL_MAP_DSO, Symbolizer

TOP = 1 << 64


def _symbolizer() -> Symbolizer:
    text = "ffffffff81000000 T _stext\nffffffffffffff00 T last_page_fn\n"
    sym = Symbolizer(KernelSymbols.from_text(text, "test", np=np), "")
    sym.kmaps = [(0xFFFFFFFF80000000, TOP, KERNEL_MAP_DSO)]
    return sym


def test_code_that_runs_to_the_last_address_covers_it() -> None:
    ips = np.array([0xFFFFFFFF81000010, TOP - 0x80, TOP - 1], dtype=np.uint64)
    sym = _symbolizer()
    got = plain_kernel(np, sym, [], ips)
    assert got is not None and got[0].tolist() == [0, 1, 2]  # kallsyms' own, all three
    sym.ool[TOP - 0x40] = (0x40, "__ool_tail")  # out-of-line code up to the last byte
    got = plain_kernel(np, sym, [], ips)
    assert got is not None and got[0].tolist() == [0, 1]
    sym.ool.clear()
    sym.kmaps.append((TOP - 0x100, TOP, "[mod]"))  # a module's map, the same
    sym.kmaps.sort()
    got = plain_kernel(np, sym, [], ips)
    assert got is not None and got[0].tolist() == [0]


def test_kallsyms_names_only_what_lies_in_the_kernels_own_map() -> None:
    ips = np.array([0x7F0000001000, 0xFFFFFFFF81000010, TOP - 0x80], dtype=np.uint64)
    sym = _symbolizer()
    sym.kmaps = [(0xFFFFFFFF80000000, TOP - 0x100, KERNEL_MAP_DSO)]  # ends before the top
    got = plain_kernel(np, sym, [], ips)
    assert got is not None and got[0].tolist() == [1]
