"""ELF layouts bpfsym reads for user-space symbols: file, section and program headers,
symbols, notes and relocations.

From the System V gABI and include/uapi/linux/elf.h. Fields are in the file's byte
order and word size (e_ident[EI_CLASS], e_ident[EI_DATA]), so everything is built
per (64-bit, little-endian) by ``elf_layouts``. Symbol tables are read in bulk with
the struct.Struct that ``bpfsym.formats.struct_of`` derives from ``sym``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from construct import (
    Bytes,
    Int8ub,
    Int8ul,
    Int16ub,
    Int16ul,
    Int32sb,
    Int32sl,
    Int32ub,
    Int32ul,
    Int64sb,
    Int64sl,
    Int64ub,
    Int64ul,
    Struct,
)

MAGIC = b"\x7fELF"
IDENT_SIZE = 16
EI_CLASS = 4
EI_DATA = 5
ELFCLASS32 = 1
ELFCLASS64 = 2
ELFDATA2LSB = 1
ELFDATA2MSB = 2

SHT_SYMTAB = 2
SHT_STRTAB = 3
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHT_RELA = 4
SHT_REL = 9
SHN_UNDEF = 0
SHN_LORESERVE = 0xFF00
SHN_XINDEX = 0xFFFF  # e_shstrndx is in section 0's sh_link
PN_XNUM = 0xFFFF  # e_phnum is in section 0's sh_info
PT_LOAD = 1
STT_OBJECT = 1
STT_FUNC = 2
STT_GNU_IFUNC = 10
STB_GLOBAL = 1
STB_WEAK = 2
NT_GNU_BUILD_ID = 3
NOTE_GNU = b"GNU\0"
EM_SPARC = 2
EM_ARM = 40
EM_SPARCV9 = 43
EM_AARCH64 = 183


@dataclass(frozen=True)
class ElfLayouts:
    """The structures of one ELF class and byte order."""

    is64: bool
    little: bool
    ehdr: Struct
    shdr: Struct
    phdr: Struct
    sym: Struct
    nhdr: Struct
    rel: Struct
    rela: Struct


@functools.cache
def elf_layouts(is64: bool, little: bool) -> ElfLayouts:
    """Elf{32,64}_Ehdr, _Shdr, _Phdr, _Sym and _Nhdr in one byte order."""
    u8 = Int8ul if little else Int8ub
    u16 = Int16ul if little else Int16ub
    u32 = Int32ul if little else Int32ub
    u64 = Int64ul if little else Int64ub
    word = u64 if is64 else u32  # Elf_Addr, Elf_Off, and the Elf_Xword fields of sections
    ehdr = Struct(
        "e_ident" / Bytes(IDENT_SIZE),
        "e_type" / u16,
        "e_machine" / u16,
        "e_version" / u32,
        "e_entry" / word,
        "e_phoff" / word,
        "e_shoff" / word,
        "e_flags" / u32,
        "e_ehsize" / u16,
        "e_phentsize" / u16,
        "e_phnum" / u16,
        "e_shentsize" / u16,
        "e_shnum" / u16,
        "e_shstrndx" / u16,
    )
    shdr = Struct(
        "sh_name" / u32,
        "sh_type" / u32,
        "sh_flags" / word,
        "sh_addr" / word,
        "sh_offset" / word,
        "sh_size" / word,
        "sh_link" / u32,
        "sh_info" / u32,
        "sh_addralign" / word,
        "sh_entsize" / word,
    )
    if is64:
        phdr = Struct(
            "p_type" / u32,
            "p_flags" / u32,
            "p_offset" / u64,
            "p_vaddr" / u64,
            "p_paddr" / u64,
            "p_filesz" / u64,
            "p_memsz" / u64,
            "p_align" / u64,
        )
        sym = Struct(
            "st_name" / u32,
            "st_info" / u8,
            "st_other" / u8,
            "st_shndx" / u16,
            "st_value" / u64,
            "st_size" / u64,
        )
    else:  # Elf32 moves p_flags and the symbol's value/size (gABI)
        phdr = Struct(
            "p_type" / u32,
            "p_offset" / u32,
            "p_vaddr" / u32,
            "p_paddr" / u32,
            "p_filesz" / u32,
            "p_memsz" / u32,
            "p_flags" / u32,
            "p_align" / u32,
        )
        sym = Struct(
            "st_name" / u32,
            "st_value" / u32,
            "st_size" / u32,
            "st_info" / u8,
            "st_other" / u8,
            "st_shndx" / u16,
        )
    nhdr = Struct("n_namesz" / u32, "n_descsz" / u32, "n_type" / u32)
    # relocations (.rela.plt / .rel.plt name the PLT slots' symbols): r_info holds the
    # symbol index above bit 32 (Elf64) or bit 8 (Elf32); see ELF_R_SYM
    sword = (Int64sl if little else Int64sb) if is64 else (Int32sl if little else Int32sb)
    rel = Struct("r_offset" / word, "r_info" / word)
    rela = Struct("r_offset" / word, "r_info" / word, "r_addend" / sword)
    return ElfLayouts(is64, little, ehdr, shdr, phdr, sym, nhdr, rel, rela)
