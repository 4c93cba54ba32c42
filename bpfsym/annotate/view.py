"""A program's annotation: JIT code with sample heat, split into source lines (each with
its text from BTF and its xlated BPF instructions), rendered as text or JSON.

Each native instruction of a captured JIT image gets its samples; jited_line_info splits the
image into source lines, each shown with its text (from BTF) and the xlated BPF instructions of
that line, printed like `bpftool prog dump xlated`. Runs on any machine from the side file.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bpfsym.annotate import bpfinsn, jitdis
from bpfsym.annotate.ksyms import KernelNames, TextNames
from bpfsym.model import Capture, Function, KernelSymbol, LineEntry, Program
from bpfsym.read.bulk import load_numpy
from bpfsym.read.kallsyms import capture_kernel_symbols

_RED, _GREEN, _BOLD, _RESET = "\033[31m", "\033[32m", "\033[1m", "\033[0m"
HOT = 5.0  # percent of a function: red, like perf annotate

WARM = 0.5  # percent: green


@dataclass
class Row:
    """One native instruction."""

    addr: int
    raw: bytes
    text: str  # mnemonic and operands, with `<target>` for named call/jump targets
    samples: int = 0
    percent: float = 0.0  # of the function's samples
    label: str = ""  # local label when something in the function jumps here
    line: LineEntry | None = None
    bpf_range: tuple[int, int] | None = None  # xlated insns [start, end) this row came from


@dataclass
class Block:
    """The native instructions of one source line (or the prologue, line None)."""

    line: LineEntry | None
    bpf: list[tuple[int, str]]  # (xlated index, kernel text) of the line's BPF insns
    bpf_range: tuple[int, int] | None
    rows: list[Row] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return sum(r.samples for r in self.rows)


@dataclass
class FunctionView:
    name: str
    addr: int
    size: int
    samples: int
    blocks: list[Block]


@dataclass
class ProgramView:
    prog_id: int
    name: str
    tag: str
    arch: str
    samples: int
    functions: list[FunctionView]
    missing: str = ""  # why no disassembly: no image, unknown architecture
    bpf_listing: list[str] = field(default_factory=list)  # when there is no image


def call_names(prog: Program, symbols: jitdis.SymbolTable) -> bpfinsn.CallNames:
    base = symbols.address("__bpf_call_base") or 0
    return bpfinsn.CallNames(symbols.exact, base, [f.addr for f in prog.functions])


def _xlated_ranges(prog: Program, n_insns: int) -> list[tuple[int, int]]:
    """Per function, the xlated slots [start, end) it was compiled from (func_info order)."""
    starts = sorted(fi.insn_off for fi in prog.func_info)
    if len(starts) != len(prog.functions):
        return []
    ends = starts[1:] + [n_insns]
    return list(zip(starts, ends, strict=True))


def _lines_of(
    prog: Program,
    fn: Function,
    xrange: tuple[int, int] | None,
    ordered: list[LineEntry] | None = None,
) -> list[LineEntry]:
    """The function's lines (ordered: the program's lines by insn_off, when known)."""
    lines = ordered if ordered is not None else _by_insn(prog)
    if xrange is not None:
        return [ln for ln in lines if xrange[0] <= ln.insn_off < xrange[1]]
    return [
        ln
        for ln in lines
        if ln.jited_addr is not None and fn.addr <= ln.jited_addr < fn.addr + fn.size
    ]


def _by_insn(prog: Program) -> list[LineEntry]:
    return sorted(prog.lines, key=lambda ln: ln.insn_off)


def build_function(
    prog: Program,
    fn: Function,
    samples: Mapping[int, int],
    symbols: jitdis.SymbolTable,
    arch: str,
    insns: list[bpfinsn.Insn],
    names: bpfinsn.CallNames,
    xrange: tuple[int, int] | None,
    *,
    slots: dict[int, bpfinsn.Insn] | None = None,
    ordered: list[LineEntry] | None = None,
) -> FunctionView:
    """One function's rows and blocks; slots (insns by index) and ordered (the program's
    lines by insn_off) are the program's, when the caller made them already."""
    assert fn.image is not None
    native = jitdis.disassemble(fn.image, fn.addr, arch)
    labels, outside = jitdis.target_names(native, fn.addr, fn.size, symbols)
    rows = []
    for ni in native:
        text = ni.text
        if ni.target is not None:
            name = labels.get(ni.target) or outside.get(ni.target)
            if name:
                text += f" <{name}>"
        rows.append(Row(ni.addr, ni.raw, text, label=labels.get(ni.addr, "")))
    starts = [r.addr for r in rows]
    total = 0
    for addr, n in samples.items():
        if fn.addr <= addr < fn.addr + len(fn.image) and n:
            rows[bisect.bisect_right(starts, addr) - 1].samples += n
            total += n
    for r in rows:
        r.percent = 100.0 * r.samples / total if total else 0.0

    if slots is None:
        slots = {i.index: i for i in insns}
    lines = [ln for ln in _lines_of(prog, fn, xrange, ordered) if ln.jited_addr is not None]
    at = [ln.jited_addr or 0 for ln in lines]  # all set (the filter above)
    xend = xrange[1] if xrange else (insns[-1].index + insns[-1].width if insns else 0)
    blocks: list[Block] = []
    first = at[0] if lines else fn.addr + len(fn.image)
    # rows are in address order: a line's rows are one slice of them
    pro = rows[: bisect.bisect_left(starts, first)]
    if pro:
        blocks.append(Block(None, [], None, pro))
    for k, ln in enumerate(lines):
        lo = at[k]
        hi = at[k + 1] if k + 1 < len(lines) else fn.addr + len(fn.image)
        bend = lines[k + 1].insn_off if k + 1 < len(lines) else xend
        brange = (ln.insn_off, bend)
        bpf = [
            (i, bpfinsn.format_insn(slots[i], names))
            for i in range(ln.insn_off, bend)
            if i in slots
        ]
        mine = rows[bisect.bisect_left(starts, lo) : bisect.bisect_left(starts, hi)]
        for r in mine:
            r.line, r.bpf_range = ln, brange
        blocks.append(Block(ln, bpf, brange, mine))
    return FunctionView(fn.name, fn.addr, len(fn.image), total, blocks)


def build_view(
    prog: Program,
    samples: Mapping[int, int],
    kallsyms: list[KernelSymbol],
    arch: str,
    *,
    programs: list[Program] | None = None,
    only: str | None = None,
    little: bool = True,
    symbols: jitdis.SymbolTable | None = None,
) -> ProgramView:
    """The annotated view of one program (or of its function named `only`).

    samples: native address -> sample count (addresses outside the program are ignored).
    programs: every captured program, so calls into other programs' functions get names.
    symbols: the SymbolTable of kallsyms and programs, when the caller built it already.
    """
    if symbols is None:
        symbols = jitdis.SymbolTable(kallsyms, programs if programs is not None else [prog])
    insns = bpfinsn.decode(prog.xlated, little=little) if prog.xlated else []
    names = call_names(prog, symbols)
    view = ProgramView(prog.id, prog.name, prog.tag, arch, 0, [])
    missing = ""
    if not prog.has_image:
        missing = f"no JIT image was captured ({prog.missing or 'not JIT-compiled'})"
    elif not jitdis.supported(arch):
        missing = f"no disassembler for architecture {arch!r}"
    if missing:
        view.missing = missing
        view.bpf_listing = bpfinsn.format_listing(insns, names)
        return view
    n_slots = insns[-1].index + insns[-1].width if insns else 0
    ranges = _xlated_ranges(prog, n_slots)
    slots = {i.index: i for i in insns}
    ordered = _by_insn(prog)
    for i, fn in enumerate(prog.functions):
        if only is not None and fn.name != only:
            continue
        xrange = ranges[i] if ranges else None
        fv = build_function(
            prog, fn, samples, symbols, arch, insns, names, xrange, slots=slots, ordered=ordered
        )
        view.functions.append(fv)
        view.samples += fv.samples
    return view


def hottest_rows(view: ProgramView, n: int) -> list[tuple[FunctionView, Row]]:
    rows = [(fv, r) for fv in view.functions for b in fv.blocks for r in b.rows if r.samples]
    rows.sort(key=lambda fr: (-fr[1].samples, fr[1].addr))
    return rows[:n]


def hottest_lines(view: ProgramView, n: int) -> list[tuple[LineEntry, int]]:
    """Source lines by samples over the whole program (a line may span several blocks)."""
    acc: dict[tuple[str, int], tuple[LineEntry, int]] = {}
    for fv in view.functions:
        for b in fv.blocks:
            if b.line is not None and b.samples:
                key = (b.line.file, b.line.line)
                old = acc.get(key)
                acc[key] = (old[0] if old else b.line, (old[1] if old else 0) + b.samples)
    out = sorted(acc.values(), key=lambda ls: (-ls[1], ls[0].file, ls[0].line))
    return out[:n]


def _where(ln: LineEntry) -> str:
    return f"{os.path.basename(ln.file)}:{ln.line}:{ln.col}"


def _heat(pct: float, text: str, color: bool) -> str:
    if not color or pct < WARM:
        return text
    return f"{_RED if pct >= HOT else _GREEN}{text}{_RESET}"


def render_text(view: ProgramView, *, top: int = 10, color: bool = False) -> str:
    out: list[str] = []
    head = f"program {view.prog_id} {view.name or '(no name)'}, tag {view.tag}"
    if view.missing:
        out.append(f"{head}: {view.missing}")
        if view.bpf_listing:
            out.append("BPF instructions (xlated):")
            out.extend(view.bpf_listing)
        return "\n".join(out) + "\n"
    nfun = len(view.functions)
    out.append(f"{head}: {view.samples} samples in {nfun} function{'s' * (nfun != 1)}")
    hot_rows = hottest_rows(view, top)
    hot_lines = hottest_lines(view, top)
    hot_keys = {(ln.file, ln.line) for ln, _ in hot_lines}
    total = view.samples or 1
    if hot_rows:
        out.append("")
        out.append("Hottest instructions:")
        for fv, r in hot_rows:
            pct = 100.0 * r.samples / total
            where = f"{fv.name}+{r.addr - fv.addr:#x}"
            src = f"  {_where(r.line)}" if r.line else ""
            out.append(_heat(pct, f"{pct:7.2f}% {r.samples:7d}  {where}  {r.text}{src}", color))
    if hot_lines:
        out.append("")
        out.append("Hottest source lines:")
        for ln, n in hot_lines:
            pct = 100.0 * n / total
            out.append(_heat(pct, f"{pct:7.2f}% {n:7d}  {_where(ln)}  {ln.text.strip()}", color))
    for fv in view.functions:
        out.append("")
        out.append(f"{fv.name}  {fv.addr:x}  {fv.size} bytes  {fv.samples} samples")
        out.append(" Percent Samples  Address           Instruction")
        for b in fv.blocks:
            if b.line is not None:
                src = f"; {_where(b.line)}  {b.line.text.strip()}"
                if color and (b.line.file, b.line.line) in hot_keys:
                    src = f"{_BOLD}{_RED}{src}{_RESET}"
                out.append(f"{'':17}{src}")
                out.extend(f"{'':17};   {i:4d}: {t}" for i, t in b.bpf)
            for r in b.rows:
                if r.label:
                    out.append(f"{'':17}{r.label}:")
                cnt = f"{r.percent:7.2f}% {r.samples:7d}" if r.samples else f"{'':16}"
                out.append(_heat(r.percent, f"{cnt}  {r.addr:x}  {r.text}", color))
    return "\n".join(out) + "\n"


def _line_json(ln: LineEntry | None) -> dict[str, Any] | None:
    if ln is None:
        return None
    return {"file": ln.file, "line": ln.line, "col": ln.col, "text": ln.text}


def render_json(view: ProgramView, *, top: int = 10) -> dict[str, Any]:
    total = view.samples or 1
    out: dict[str, Any] = {
        "prog_id": view.prog_id,
        "name": view.name,
        "tag": view.tag,
        "arch": view.arch,
        "samples": view.samples,
    }
    if view.missing:
        out["missing"] = view.missing
        out["bpf"] = view.bpf_listing
        return out
    out["hottest_instructions"] = [
        {"function": fv.name, "address": r.addr, "samples": r.samples,
         "percent": 100.0 * r.samples / total, "text": r.text}
        for fv, r in hottest_rows(view, top)
    ]  # fmt: skip
    out["hottest_lines"] = [
        {**(_line_json(ln) or {}), "samples": n, "percent": 100.0 * n / total}
        for ln, n in hottest_lines(view, top)
    ]
    funcs = []
    for fv in view.functions:
        insns = []
        for b in fv.blocks:
            for r in b.rows:
                insns.append(
                    {
                        "address": r.addr,
                        "bytes": r.raw.hex(),
                        "text": r.text,
                        "label": r.label or None,
                        "samples": r.samples,
                        "percent": r.percent,
                        "source": _line_json(r.line),
                        "bpf_insn": r.bpf_range[0] if r.bpf_range else None,
                        "bpf_insns": list(r.bpf_range) if r.bpf_range else None,
                    }
                )
        lines = [
            {**(_line_json(b.line) or {}), "bpf": [{"index": i, "text": t} for i, t in b.bpf]}
            for b in fv.blocks
            if b.line is not None
        ]
        funcs.append(
            {"name": fv.name, "address": fv.addr, "size": fv.size, "samples": fv.samples,
             "lines": lines, "instructions": insns}
        )  # fmt: skip
    out["functions"] = funcs
    return out


Heat = Mapping[int, Mapping[int, int]]  # prog id -> native address -> samples


def select(
    capture: Capture, prog_id: int | None, symbol: str | None, samples: Heat
) -> list[tuple[Program, str | None]]:
    """The programs (and the one function, when a function was named) to annotate;
    with neither, the programs with samples, hottest first."""
    progs = capture.programs
    if prog_id is None and symbol is not None and symbol.isdigit():
        prog_id, symbol = int(symbol), None
    if prog_id is not None:
        progs = [p for p in progs if p.id == prog_id]
    if symbol is None:
        if prog_id is not None:
            return [(p, None) for p in progs]
        hot = [p for p in progs if sum(samples.get(p.id, {}).values())]
        hot.sort(key=lambda p: -sum(samples[p.id].values()))
        return [(p, None) for p in hot]
    out: list[tuple[Program, str | None]] = []
    for p in progs:
        if any(f.name == symbol for f in p.functions):
            out.append((p, symbol))
        elif p.name == symbol:
            out.append((p, None))
    return out


def kernel_names(capture: Capture) -> KernelNames:
    """The names of a capture's kallsyms: its texts indexed in place (with numpy), else
    parsed (which also says what is wrong with a text that does not parse)."""
    names = indexed_names(capture)
    return names if names is not None else KernelNames(capture_kernel_symbols(capture))


def indexed_names(capture: Capture) -> TextNames | None:
    """The capture's kallsyms texts indexed in place, or None (no numpy, no texts, or
    texts that are not plain kallsyms); never raises."""
    if capture.kallsyms or not capture.kallsyms_texts:
        return None
    np = load_numpy()
    return TextNames.from_texts(capture.kallsyms_texts, np) if np is not None else None


def annotate(
    capture: Capture,
    samples: Heat,
    *,
    prog_id: int | None = None,
    symbol: str | None = None,
    top: int = 10,
    as_json: bool = False,
    color: bool = False,
    names: KernelNames | None = None,
) -> tuple[str, int]:
    """(output, exit status) for the chosen programs of a capture (names: its kernel
    names, when the caller has them already)."""
    chosen = select(capture, prog_id, symbol, samples)
    if not chosen:
        what = symbol if symbol is not None else f"program {prog_id}" if prog_id else None
        msg = f"no BPF program matches {what}" if what else "no samples in any BPF program"
        return msg + " (see bpfsym report for what was sampled)\n", 1
    symbols = jitdis.SymbolTable(programs=capture.programs, kernel=names or kernel_names(capture))
    views = [
        build_view(p, samples.get(p.id, {}), [], capture.header.arch,
                   programs=capture.programs, only=only, symbols=symbols)
        for p, only in chosen
    ]  # fmt: skip
    if as_json:
        return json.dumps([render_json(v, top=top) for v in views], indent=1) + "\n", 0
    return "\n".join(render_text(v, top=top, color=color) for v in views), 0
