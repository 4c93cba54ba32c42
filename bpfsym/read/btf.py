"""Name a program's functions and source lines from its BTF.

bpf_func_info names a function by a BTF FUNC type id; bpf_line_info points
into the BTF string section for the file name and the source line text. This
module turns the raw records of bpf_prog_info into model.FuncInfo and
model.LineEntry. Built for thousands of programs: the string section is
sliced once, and types are only walked (by size, not parsed) when a
function name is asked for.
"""

from __future__ import annotations

import struct

from bpfsym.errors import FormatError
from bpfsym.formats import bpf, btf, integers, struct_of
from bpfsym.model import FuncInfo, LineEntry

# struct.Struct views of bpf_func_info / bpf_line_info, derived from formats.bpf
_FUNC_REC = struct_of(bpf.func_info)[0]
_LINE_REC = struct_of(bpf.line_info)[0]


class BtfIndex:
    """String lookup and a lazy type-id -> offset table over one BTF blob."""

    def __init__(self, blob: bytes, path: str = "<btf>") -> None:
        self.blob = blob
        self.path = path
        self.layout = btf.parse_header(blob, path)
        self.strings = bytes(blob[self.layout.str_start : self.layout.str_end])
        self._offsets: list[int] | None = None
        self._u32 = integers(self.layout.little).u32

    def string(self, off: int) -> str:
        return btf.string_at(self.strings, off, self.path, self.layout.str_start)

    def type_offsets(self) -> list[int]:
        """Blob offset of each type; [i] is type id i + 1."""
        if self._offsets is None:
            offs: list[int] = []
            pos, end = self.layout.type_start, self.layout.type_end
            unpack = self._u32.unpack_from
            while pos < end:
                if end - pos < 12:
                    raise FormatError(self.path, pos, f"BTF type {len(offs) + 1} truncated")
                info = unpack(self.blob, pos + 4)[0]
                kind = (info >> 24) & 0x1F
                size = btf.type_size(kind, info & 0xFFFF)
                if size is None or kind == btf.KIND_UNKN:
                    raise FormatError(
                        self.path, pos + 4, f"BTF type {len(offs) + 1}: unknown kind {kind}"
                    )
                if pos + size > end:
                    raise FormatError(
                        self.path, pos, f"BTF type {len(offs) + 1} runs past the type section"
                    )
                offs.append(pos)
                pos += size
            self._offsets = offs
        return self._offsets

    def type_kind_name(self, type_id: int) -> tuple[int, str]:
        """(kind, name) of a type id; id 0 is void: (0, "")."""
        if type_id == 0:
            return btf.KIND_UNKN, ""
        offs = self.type_offsets()
        if not 1 <= type_id <= len(offs):
            raise FormatError(self.path, 0, f"BTF type id {type_id} out of range ({len(offs)})")
        pos = offs[type_id - 1]
        name_off = self._u32.unpack_from(self.blob, pos)[0]
        info = self._u32.unpack_from(self.blob, pos + 4)[0]
        return (info >> 24) & 0x1F, self.string(name_off)


def type_name(blob: bytes | BtfIndex | None, type_id: int) -> str:
    """Name of a BTF type ("" for anonymous types, void or missing BTF)."""
    if blob is None:
        return ""
    index = blob if isinstance(blob, BtfIndex) else BtfIndex(blob)
    return index.type_kind_name(type_id)[1]


def _records(data: bytes, rec_size: int, rec: struct.Struct, what: str, path: str):
    # rec_size comes from the kernel and may grow: read today's fields, step by rec_size
    if not data:
        return
    if rec_size < rec.size:
        raise FormatError(path, 0, f"{what} record size {rec_size} < {rec.size}")
    if len(data) % rec_size:
        raise FormatError(
            path, len(data) - len(data) % rec_size, f"{what} not a whole number of records"
        )
    for off in range(0, len(data), rec_size):
        yield rec.unpack_from(data, off)


def resolve_funcs(
    btf_blob: bytes | BtfIndex | None,
    func_info: bytes,
    rec_size: int,
    path: str = "<bpf_prog_info>",
) -> list[FuncInfo]:
    """bpf_func_info records -> FuncInfo, named by their BTF FUNC type ("" without BTF)."""
    index = BtfIndex(btf_blob) if isinstance(btf_blob, bytes) else btf_blob
    out = []
    for insn_off, type_id, *_ in _records(func_info, rec_size, _FUNC_REC, "func_info", path):
        name = ""
        if index is not None:
            kind, name = index.type_kind_name(type_id)
            if kind != btf.KIND_FUNC:
                raise FormatError(
                    index.path, 0, f"func_info type {type_id} is {btf.KIND_NAMES[kind]}, not FUNC"
                )
        out.append(FuncInfo(insn_off, type_id, name))
    return out


def resolve_lines(
    btf_blob: bytes | BtfIndex | None,
    line_info: bytes,
    rec_size: int,
    jited_line_info: list[int] | None = None,
    path: str = "<bpf_prog_info>",
) -> list[LineEntry]:
    """bpf_line_info records -> LineEntry with file and source text ("" without BTF).

    jited_line_info[i] is the native address of record i; missing entries give None.
    """
    index = BtfIndex(btf_blob) if isinstance(btf_blob, bytes) else btf_blob
    jited = jited_line_info or []
    cache: dict[int, str] = {}
    out = []
    recs = _records(line_info, rec_size, _LINE_REC, "line_info", path)
    for i, (insn_off, file_off, line_off, line_col, *_) in enumerate(recs):
        file = text = ""
        if index is not None:
            if file_off not in cache:
                cache[file_off] = index.string(file_off)
            file = cache[file_off]
            text = index.string(line_off)
        out.append(
            LineEntry(
                insn_off,
                file,
                text,
                bpf.line_number(line_col),
                bpf.line_column(line_col),
                jited[i] if i < len(jited) else None,
            )
        )
    return out


def jited_addrs(data: bytes, little: bool = True) -> list[int]:
    """The u64 array bpf_prog_info.jited_line_info points to."""
    n = len(data) // 8
    return list(integers(little).array("Q", n).unpack(data[: n * 8]))
