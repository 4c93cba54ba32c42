"""User-space symbols: a process's memory maps, ELF symbol tables by path and build id
(perf's build-id cache too), C++ names demangled as perf prints them."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

from bpfsym.read.elf import ElfSymbols, build_id_cache_file, load_elf_symbols


def demangle(names: set[str]) -> dict[str, str]:
    """mangled -> demangled C++ names, in one `c++filt -p` run (binutils; perf prints
    the same text through libiberty). {} where c++filt cannot run: names stay mangled."""
    order = sorted(names)
    if not order:
        return {}
    try:
        out = subprocess.run(
            ["c++filt", "-p"], input="\n".join(order) + "\n", capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) != len(order):
        return {}
    return dict(zip(order, lines, strict=True))


@dataclass
class MapEntry:
    start: int
    end: int
    pgoff: int
    filename: str
    build_id: str = ""


class ElfCache:
    """ELF symbol tables by path, debug files found by build id like perf does."""

    def __init__(self, root: str = "", np: Any = None) -> None:
        self.root = root
        self.np = np  # numpy, when there, reads the symbol tables
        self.cache: dict[tuple[str, str], ElfSymbols | str] = {}

    def get(self, path: str, build_id: str) -> ElfSymbols | str:
        key = (path, build_id)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self._load(path, build_id)
        return hit

    def _load(self, path: str, build_id: str) -> ElfSymbols | str:
        got = (
            None if path.startswith("[") else load_elf_symbols(self.root + path, build_id, self.np)
        )
        if isinstance(got, ElfSymbols):
            return got
        # gone, replaced or never a file ([vdso]): perf's build-id cache may have a copy
        # (perf record keeps one of every DSO with samples; perf archive carries them)
        # (not with a symfs: nothing of the host counts then)
        cached = None if self.root else build_id_cache_file(build_id)
        if cached is not None:
            alt = load_elf_symbols(cached, build_id, self.np)
            if isinstance(alt, ElfSymbols):
                return alt
        return got if got is not None else f"no symbols for {path}"
