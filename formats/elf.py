"""The ELF note header, for live/host.py's reading of /sys/kernel/notes (a bare run of
notes, not an ELF file); the head of .eh_frame_hdr and the pointer encodings of its
fields, for symbolize/cfi.py's binary search table.

ELF files themselves are read by pyelftools (bpfsym/read/elf.py): their headers,
notes, relocations and the symbol record of the bulk decode all come from its
declarations. The note header stays only until live/host.py reads the kernel's notes
another way; pyelftools does not read .eh_frame_hdr.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from construct import Int8ul, Int32ub, Int32ul, Struct


@dataclass(frozen=True)
class ElfLayouts:
    nhdr: Struct


@functools.cache
def elf_layouts(is64: bool, little: bool) -> ElfLayouts:
    """Elf{32,64}_Nhdr (the same in both classes: three Elf_Word) in one byte order."""
    u32 = Int32ul if little else Int32ub
    return ElfLayouts(Struct("n_namesz" / u32, "n_descsz" / u32, "n_type" / u32))


# .eh_frame_hdr (LSB gABI, "Exception Frame Header"): version 1, then the DW_EH_PE
# encodings of eh_frame_ptr, fde_count and the table; the encoded fields follow
eh_frame_hdr_head = Struct(
    "version" / Int8ul,
    "eh_frame_ptr_enc" / Int8ul,
    "fde_count_enc" / Int8ul,
    "table_enc" / Int8ul,
)
DW_EH_PE_UDATA4 = 0x03
DW_EH_PE_DATAREL_SDATA4 = 0x3B  # the table as ld and lld write it: pairs of sdata4
# the size of an eh_frame_ptr by its encoding: (u|s)data(4|8), absolute or pc-relative
EH_PE_SIZES = {0x03: 4, 0x0B: 4, 0x1B: 4, 0x04: 8, 0x0C: 8, 0x1C: 8}
