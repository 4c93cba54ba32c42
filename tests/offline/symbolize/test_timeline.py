"""symbolize.timeline's line lookup by native address, which report's srcline column, diff
and pprof share.

bpf_prog_pack places each function's image on its own: a sub-program can sit below the
main function (seen live: the diff test's programs), while line info stays in instruction
order (main first). The lookup must not assume the two orders agree.
"""

from __future__ import annotations

from types import SimpleNamespace

from bpfsym.model import Function, LineEntry, Program
from bpfsym.report.diff import Side
from bpfsym.symbolize.symbols import Sym
from bpfsym.symbolize.timeline import BpfFunc, ProgLines

MAIN, SUB = 0xFFFFFFFFA0004000, 0xFFFFFFFFA0001000  # the sub-program's image is lower


def program() -> Program:
    p = Program(7, "xdp_demo", "64827e88058c4a12", 6)
    p.functions = [Function("bpf_prog_64827e88058c4a12_xdp_demo", MAIN, 0x40),
                   Function("bpf_prog_c83b2fcf6bd3090a_hash_mix", SUB, 0x40)]  # fmt: skip
    p.lines = [  # instruction order: main's lines, then the sub-program's
        LineEntry(0, "demo.bpf.c", "int xdp_demo(struct xdp_md *ctx)", 106, 0, MAIN),
        LineEntry(4, "demo.bpf.c", "verdict = hash_mix(data, len);", 124, 9, MAIN + 0x10),
        LineEntry(9, "demo.bpf.c", "}", 138, 1, MAIN + 0x30),
        LineEntry(12, "demo.bpf.c", "h ^= bytes[off];", 77, 3, SUB),
        LineEntry(15, "demo.bpf.c", "h *= 16777619u;", 78, 3, SUB + 0x18),
        LineEntry(18, "demo.bpf.c", "}", 81, 1, SUB + 0x38),
    ]
    return p


def funcs(p: Program) -> list[BpfFunc]:
    return [BpfFunc(f.name, f.addr, f.size, None, prog=p) for f in p.functions]


def test_lines_found_whichever_function_sits_lower():
    pl = ProgLines(program().lines)
    assert pl.addrs == sorted(pl.addrs)
    assert pl.at(SUB - 1) is None
    assert pl.at(SUB + 0x20).line == 78
    assert pl.at(SUB + 0x3F).line == 81
    assert pl.at(MAIN).line == 106
    assert pl.at(MAIN + 0x2F).line == 124
    main, sub = funcs(program())
    assert sub.srcline(SUB + 0x1A) == "demo.bpf.c:78  h *= 16777619u;"
    assert main.srcline(MAIN + 0x11) == "demo.bpf.c:124  verdict = hash_mix(data, len);"


def test_diff_matches_the_lines_the_report_shows():
    side = Side("base", "x", None, SimpleNamespace(events={}, keys=["prog", "func", "srcline"]))
    main, sub = funcs(program())
    s_main = Sym(main.name, "[bpf]", "k", "perf", bpf=main)
    s_sub = Sym(sub.name, "[bpf]", "k", "perf", bpf=sub)
    # (file, text, occurrence of the text in the function, line): the same line the
    # report's srcline cell names for the address
    assert side.line_of(s_sub, SUB + 0x1A) == ("demo.bpf.c", "h *= 16777619u;", 0, 78)
    assert side.line_of(s_main, MAIN + 0x31) == ("demo.bpf.c", "}", 0, 138)
    assert side.line_of(s_sub, SUB + 0x38) == ("demo.bpf.c", "}", 0, 81)
    assert side.line_of(s_main, MAIN + 0x12) == (
        "demo.bpf.c", "verdict = hash_mix(data, len);", 0, 124)  # fmt: skip
