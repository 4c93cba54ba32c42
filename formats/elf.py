"""The ELF note header, for live/host.py's reading of /sys/kernel/notes (a bare run of
notes, not an ELF file).

ELF files themselves are read by pyelftools (bpfsym/read/elf.py): their headers,
notes, relocations and the symbol record of the bulk decode all come from its
declarations. This stays only until live/host.py reads the kernel's notes another way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from construct import Int32ub, Int32ul, Struct


@dataclass(frozen=True)
class ElfLayouts:
    nhdr: Struct


@functools.cache
def elf_layouts(is64: bool, little: bool) -> ElfLayouts:
    """Elf{32,64}_Nhdr (the same in both classes: three Elf_Word) in one byte order."""
    u32 = Int32ul if little else Int32ub
    return ElfLayouts(Struct("n_namesz" / u32, "n_descsz" / u32, "n_type" / u32))
