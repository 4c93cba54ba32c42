"""How fast bpfsym reads ELF symbol tables: its bulk decode against pyelftools' own symbol
iteration, on the same big real files in one run; and what a whole load_elf_symbols costs.

The bulk decode (bpfsym/read/elf.py ElfImage.functions: numpy, else struct.iter_unpack,
with the Elf_Sym record pyelftools declares) stays only because pyelftools is slower at
symbol arrays; this prints by how much. Both ways compute the same thing, perf's function
symbols (STT_FUNC/STT_GNU_IFUNC, defined, named; unsized ones end with their section)
sorted by address, and the script checks that they agree. Times are the best and the
median of --repeat runs each, interleaved (the machine may be shared).

    python3 bench/elf_speed.py              # the default files that exist here
    python3 bench/elf_speed.py -r 9 FILE... # other files (.symtab, else .dynsym)
"""

from __future__ import annotations

import argparse
import functools
import mmap
import os
import statistics
import sys
import time
from collections.abc import Callable
from sysconfig import get_config_var as cfg
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from bpfsym.read.elf import DEBUG_ROOT, ElfImage, load_elf_symbols

LIB = "/usr/lib/x86_64-linux-gnu"
# (file, symbol table): big real tables of the kinds report reads
DEFAULT = [
    (f"{LIB}/libpython3.11.so.1.0", ".dynsym"),
    # the libpython this Python runs (pyenv's keeps its .symtab)
    (os.path.join(str(cfg("LIBDIR")), str(cfg("INSTSONAME"))), ".symtab"),
    (f"{LIB}/libc.so.6", ".dynsym"),
    ("libc.so.6's build-id debug file", ".symtab"),
    ("/usr/bin/perf", ".dynsym"),
    (f"{LIB}/libLLVM-15.so.1", ".dynsym"),
]
FUNC_TYPES = ("STT_FUNC", "STT_LOOS")  # pyelftools calls STT_GNU_IFUNC (10) STT_LOOS
BINDS = {"STB_LOCAL": 0, "STB_GLOBAL": 1, "STB_WEAK": 2, "STB_GNU_UNIQUE": 10}


def debug_file(path: str) -> str | None:
    with open(path, "rb") as f:
        bid = ElfImage(path, f.read()).build_id()
    dbg = f"{DEBUG_ROOT}/{bid[:2]}/{bid[2:]}.debug"
    return dbg if bid and os.path.exists(dbg) else None


def by_pyelftools(m: Any, index: int, ends: list[int]) -> list[tuple[int, int, int, str]]:
    """perf's function symbols of section index through pyelftools' iter_symbols (ends:
    each section's sh_addr + sh_size, given: iter_sections() would parse hash tables)."""
    elf = ELFFile(m)
    sec = elf.get_section(index)
    assert isinstance(sec, SymbolTableSection)
    out = []
    for sym in sec.iter_symbols():
        shndx = sym["st_shndx"]
        if sym["st_info"]["type"] not in FUNC_TYPES or shndx == "SHN_UNDEF" or not sym.name:
            continue
        size = sym["st_size"]
        if not size and isinstance(shndx, int) and shndx < len(ends):
            size = -(ends[shndx] - sym["st_value"])
        out.append((sym["st_value"], size, BINDS.get(sym["st_info"]["bind"], 0), sym.name))
    out.sort(key=lambda x: x[0])
    return out


def by_bulk(m: Any, path: str, table: str, np: Any) -> list[tuple[int, int, int, str]]:
    """The same through ElfImage.functions (numpy when np, else struct)."""
    fs = ElfImage(path, m).functions(table, np)
    tab = fs.strtab
    names = [tab[o : tab.find(b"\0", o)].decode("utf-8", "replace") for o in fs.names]
    return list(zip(fs.values, fs.sizes, fs.binds, names, strict=True))


def decode(m: Any, path: str, table: str, np: Any) -> Any:
    """What the timing of the bulk decode covers: the headers (pyelftools) and the table."""
    return ElfImage(path, m).functions(table, np)


def timed(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """Each of fns run repeat times, interleaved: name -> wall times in seconds."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return times


def ms(ts: list[float]) -> str:
    return f"{min(ts) * 1e3:8.2f} {statistics.median(ts) * 1e3:8.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="ELF files (their .symtab, else .dynsym)")
    ap.add_argument("-r", "--repeat", type=int, default=5)
    args = ap.parse_args()
    np: Any = None
    try:
        import numpy

        np = numpy
    except ImportError:
        pass
    todo: list[tuple[str, str]] = []
    for path, table in DEFAULT if not args.files else [(f, "") for f in args.files]:
        if path.startswith("libc.so.6's"):
            dbg = debug_file(f"{LIB}/libc.so.6") if os.path.exists(f"{LIB}/libc.so.6") else None
            if dbg is None:
                print(f"# skipped: {path} (none installed)")
                continue
            path = dbg
        if not os.path.exists(path):
            print(f"# skipped: {path} (not here)")
            continue
        todo.append((path, table))
    print("# symbol arrays: perf's function symbols of one table, both ways (ms: min median)")
    print(f"# {'file':<46} {'table':<8} {'syms':>6} {'funcs':>6}  {'pyelftools':>17}"
          f"  {'struct':>17}  {'numpy':>17}  pyelftools/struct  pyelftools/numpy")  # fmt: skip
    ratios_s, ratios_n = [], []
    for path, table in todo:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            img = ElfImage(path, m)
            if not table:
                table = ".symtab" if img.section_by_name(".symtab") is not None else ".dynsym"
            idx = img.section_by_name(table)
            if idx is None:
                print(f"# skipped: {path} (no {table})")
                continue
            nsyms = img.sections[idx]["sh_size"] // img.sym.size
            ends = [h["sh_addr"] + h["sh_size"] for h in img.sections]
            want = by_pyelftools(m, idx, ends)
            if by_bulk(m, path, table, None) != want or (
                np is not None and by_bulk(m, path, table, np) != want
            ):
                sys.exit(f"{path} {table}: the bulk decode differs from pyelftools")
            fns: dict[str, Callable[[], Any]] = {
                "pyelftools": functools.partial(by_pyelftools, m, idx, ends),
                "struct": functools.partial(decode, m, path, table, None),
            }
            if np is not None:
                fns["numpy"] = functools.partial(decode, m, path, table, np)
            t = timed(fns, args.repeat)
        rs = min(t["pyelftools"]) / min(t["struct"])
        ratios_s.append(rs)
        line = (
            f"  {path[-46:]:<46} {table:<8} {nsyms:>6} {len(want):>6}  {ms(t['pyelftools'])}"
            f"  {ms(t['struct'])}"
        )
        if "numpy" in t:
            rn = min(t["pyelftools"]) / min(t["numpy"])
            ratios_n.append(rn)
            line += f"  {ms(t['numpy'])}  {rs:16.1f}x  {rn:15.1f}x"
        else:
            line += f"  {'-':>17}  {rs:16.1f}x  {'-':>15}"
        print(line)
    if ratios_s:
        print(
            f"pyelftools symbol iteration / bulk decode (best times): struct "
            f"{min(ratios_s):.1f}x to {max(ratios_s):.1f}x"
            + (f", numpy {min(ratios_n):.1f}x to {max(ratios_n):.1f}x" if ratios_n else "")
        )
    print("# a whole load_elf_symbols (structure, build id, symbols, PLT; ms: min median)")
    for path in dict.fromkeys(p for p, _ in todo):
        t = timed({"load": functools.partial(load_elf_symbols, path, "", np)}, args.repeat)
        print(f"  {path[-46:]:<46} {ms(t['load'])}")


if __name__ == "__main__":
    main()
