"""BTF, the BPF Type Format: header, types with each kind's trailing data, strings.

From include/uapi/linux/btf.h (Linux 6.18). A blob is written in the byte
order of the machine that made it and its magic says which, so every layout
comes from a factory per endianness. parse() reads a whole blob; the string
section alone is reachable through parse_header() + string_at() without
touching the types.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass, field

from construct import (
    Array,
    BitsInteger,
    BitStruct,
    ByteSwapped,
    Construct,
    ConstructError,
    Container,
    Error,
    Flag,
    Int8ub,
    Int16ub,
    Int16ul,
    Int32sb,
    Int32sl,
    Int32ub,
    Int32ul,
    Padding,
    Pass,
    Struct,
    Switch,
    this,
)

from .errors import FormatError

BTF_MAGIC = 0xEB9F
BTF_VERSION = 1

KIND_UNKN = 0
KIND_INT = 1
KIND_PTR = 2
KIND_ARRAY = 3
KIND_STRUCT = 4
KIND_UNION = 5
KIND_ENUM = 6
KIND_FWD = 7
KIND_TYPEDEF = 8
KIND_VOLATILE = 9
KIND_CONST = 10
KIND_RESTRICT = 11
KIND_FUNC = 12
KIND_FUNC_PROTO = 13
KIND_VAR = 14
KIND_DATASEC = 15
KIND_FLOAT = 16
KIND_DECL_TAG = 17
KIND_TYPE_TAG = 18
KIND_ENUM64 = 19

# as bpftool btf dump prints them
KIND_NAMES = [
    "UNKNOWN", "INT", "PTR", "ARRAY", "STRUCT", "UNION", "ENUM", "FWD", "TYPEDEF", "VOLATILE",
    "CONST", "RESTRICT", "FUNC", "FUNC_PROTO", "VAR", "DATASEC", "FLOAT", "DECL_TAG", "TYPE_TAG",
    "ENUM64",
]  # fmt: skip

# BTF_INT_ENCODING bits
INT_SIGNED = 1 << 0
INT_CHAR = 1 << 1
INT_BOOL = 1 << 2

_LE_MAGIC = b"\x9f\xeb"
_BE_MAGIC = b"\xeb\x9f"


def _bits(little: bool, bit_struct: Construct) -> Construct:
    # A u32 holding bitfields: BitStruct reads most significant bit first, which is
    # the wire order only for big-endian; little-endian words are byte-swapped first.
    return ByteSwapped(bit_struct) if little else bit_struct


@functools.cache
def btf_header(little: bool) -> Struct:
    u32 = Int32ul if little else Int32ub
    return Struct(
        "magic" / (Int16ul if little else Int16ub),
        "version" / Int8ub,
        "flags" / Int8ub,
        "hdr_len" / u32,
        # offsets are relative to the end of the header (hdr_len)
        "type_off" / u32,
        "type_len" / u32,
        "str_off" / u32,
        "str_len" / u32,
    )


@functools.cache
def btf_info(little: bool) -> Construct:
    # btf_type.info: vlen bits 0-15, kind bits 24-28, kind_flag bit 31
    return _bits(
        little,
        BitStruct(
            "kind_flag" / Flag,
            Padding(2),
            "kind" / BitsInteger(5),
            Padding(8),
            "vlen" / BitsInteger(16),
        ),
    )


@functools.cache
def btf_int(little: bool) -> Construct:
    # the u32 after an INT: BTF_INT_ENCODING bits 24-27, BTF_INT_OFFSET 16-23, BTF_INT_BITS 0-7
    return _bits(
        little,
        BitStruct(
            Padding(4),
            "encoding" / BitsInteger(4),
            "offset" / BitsInteger(8),
            Padding(8),
            "bits" / BitsInteger(8),
        ),
    )


@functools.cache
def _records(little: bool) -> dict[str, Struct]:
    u32 = Int32ul if little else Int32ub
    s32 = Int32sl if little else Int32sb
    return {
        "enum": Struct("name_off" / u32, "val" / s32),
        "array": Struct("type" / u32, "index_type" / u32, "nelems" / u32),
        # with kind_flag set, offset is bitfield_size << 24 | bit_offset
        "member": Struct("name_off" / u32, "type" / u32, "offset" / u32),
        "param": Struct("name_off" / u32, "type" / u32),
        "var": Struct("linkage" / u32),
        "var_secinfo": Struct("type" / u32, "offset" / u32, "size" / u32),
        "decl_tag": Struct("component_idx" / s32),
        "enum64": Struct("name_off" / u32, "val_lo32" / u32, "val_hi32" / u32),
    }


def btf_enum(little: bool) -> Struct:
    return _records(little)["enum"]


def btf_array(little: bool) -> Struct:
    return _records(little)["array"]


def btf_member(little: bool) -> Struct:
    return _records(little)["member"]


def btf_param(little: bool) -> Struct:
    return _records(little)["param"]


def btf_var(little: bool) -> Struct:
    return _records(little)["var"]


def btf_var_secinfo(little: bool) -> Struct:
    return _records(little)["var_secinfo"]


def btf_decl_tag(little: bool) -> Struct:
    return _records(little)["decl_tag"]


def btf_enum64(little: bool) -> Struct:
    return _records(little)["enum64"]


@functools.cache
def btf_type(little: bool) -> Struct:
    """struct btf_type and the data that follows it for its kind, as "data"."""
    u32 = Int32ul if little else Int32ub
    r = _records(little)
    vlen = this.info.vlen
    return Struct(
        "name_off" / u32,
        "info" / btf_info(little),
        # union { size; type; }: size for INT, ENUM, STRUCT, UNION, DATASEC, ENUM64;
        # a type id for the others
        "size_type" / u32,
        "data"
        / Switch(
            this.info.kind,
            {
                KIND_INT: btf_int(little),
                KIND_PTR: Pass,
                KIND_ARRAY: r["array"],
                KIND_STRUCT: Array(vlen, r["member"]),
                KIND_UNION: Array(vlen, r["member"]),
                KIND_ENUM: Array(vlen, r["enum"]),
                KIND_FWD: Pass,
                KIND_TYPEDEF: Pass,
                KIND_VOLATILE: Pass,
                KIND_CONST: Pass,
                KIND_RESTRICT: Pass,
                KIND_FUNC: Pass,
                KIND_FUNC_PROTO: Array(vlen, r["param"]),
                KIND_VAR: r["var"],
                KIND_DATASEC: Array(vlen, r["var_secinfo"]),
                KIND_FLOAT: Pass,
                KIND_DECL_TAG: r["decl_tag"],
                KIND_TYPE_TAG: Pass,
                KIND_ENUM64: Array(vlen, r["enum64"]),
            },
            default=Error,
        ),
    )


@functools.cache
def btf_type_head(little: bool) -> Struct:
    """struct btf_type without its kind's data, and with info as its whole u32 word (for
    struct_of): name_off, info (the bits btf_info names), size_type. Same bytes as the head
    of btf_type(little)."""
    u32 = Int32ul if little else Int32ub
    return Struct("name_off" / u32, "info" / u32, "size_type" / u32)


@functools.cache
def _compiled_type(little: bool) -> Construct:
    return btf_type(little).compile()


_TYPE_HEAD = 12  # sizeof(struct btf_type)
# (fixed bytes, bytes per vlen) after struct btf_type, from the declarations above
_TRAILER: dict[int, tuple[int, int]] = {
    KIND_INT: (btf_int(True).sizeof(), 0),
    KIND_PTR: (0, 0),
    KIND_ARRAY: (btf_array(True).sizeof(), 0),
    KIND_STRUCT: (0, btf_member(True).sizeof()),
    KIND_UNION: (0, btf_member(True).sizeof()),
    KIND_ENUM: (0, btf_enum(True).sizeof()),
    KIND_FWD: (0, 0),
    KIND_TYPEDEF: (0, 0),
    KIND_VOLATILE: (0, 0),
    KIND_CONST: (0, 0),
    KIND_RESTRICT: (0, 0),
    KIND_FUNC: (0, 0),
    KIND_FUNC_PROTO: (0, btf_param(True).sizeof()),
    KIND_VAR: (btf_var(True).sizeof(), 0),
    KIND_DATASEC: (0, btf_var_secinfo(True).sizeof()),
    KIND_FLOAT: (0, 0),
    KIND_DECL_TAG: (btf_decl_tag(True).sizeof(), 0),
    KIND_TYPE_TAG: (0, 0),
    KIND_ENUM64: (0, btf_enum64(True).sizeof()),
}


def type_size(kind: int, vlen: int) -> int | None:
    """Bytes of a btf_type of this kind and vlen with its trailing data; None: unknown kind."""
    t = _TRAILER.get(kind)
    return None if t is None else _TYPE_HEAD + t[0] + t[1] * vlen


def is_little(blob: bytes, path: str = "<btf>") -> bool:
    """The blob's byte order, from its magic."""
    magic = bytes(blob[:2])
    if magic == _LE_MAGIC:
        return True
    if magic == _BE_MAGIC:
        return False
    raise FormatError(path, 0, f"bad BTF magic {magic.hex() or '(empty)'}")


@dataclass(repr=False, eq=False)
class BtfLayout:
    """A validated header: where the type and string sections lie in the blob."""

    header: Container
    little: bool
    type_start: int
    type_end: int
    str_start: int
    str_end: int


def parse_header(blob: bytes, path: str = "<btf>") -> BtfLayout:
    """Check the header and that both sections lie inside the blob."""
    little = is_little(blob, path)
    hdr = btf_header(little)
    if len(blob) < hdr.sizeof():
        raise FormatError(path, len(blob), f"BTF truncated in header ({len(blob)} bytes)")
    h = hdr.parse(blob)
    if h.version != BTF_VERSION:
        raise FormatError(path, 2, f"unknown BTF version {h.version}")
    if h.hdr_len < hdr.sizeof() or h.hdr_len > len(blob):
        raise FormatError(path, 4, f"bad BTF hdr_len {h.hdr_len}")
    # the kernel (btf_check_sec_info) requires a larger header's extra bytes to be zero
    if any(blob[hdr.sizeof() : h.hdr_len]):
        raise FormatError(path, hdr.sizeof(), "non-zero bytes in unknown BTF header tail")
    base = h.hdr_len
    ts, te = base + h.type_off, base + h.type_off + h.type_len
    ss, se = base + h.str_off, base + h.str_off + h.str_len
    if h.type_off % 4:
        raise FormatError(path, 8, f"BTF type_off {h.type_off} not 4-byte aligned")
    if te > len(blob):
        raise FormatError(path, 12, f"BTF type section ends at {te}, past the blob ({len(blob)})")
    if se > len(blob):
        raise FormatError(path, 20, f"BTF string section ends at {se}, past the blob ({len(blob)})")
    if h.type_len and h.str_len and ts < se and ss < te:
        raise FormatError(path, 16, "BTF type and string sections overlap")
    if h.str_len and blob[se - 1] != 0:
        raise FormatError(path, se - 1, "BTF string section not NUL-terminated")
    return BtfLayout(h, little, ts, te, ss, se)


def string_at(strings: bytes, off: int, path: str = "<btf>", base: int = 0) -> str:
    """The NUL-terminated string at off of a string section starting at blob offset base."""
    if not 0 <= off < len(strings):
        raise FormatError(path, base, f"BTF string offset {off} outside section ({len(strings)})")
    end = strings.find(b"\0", off)
    if end < 0:
        raise FormatError(path, base + off, "unterminated BTF string")
    return strings[off:end].decode("utf-8", "replace")


@dataclass(repr=False, eq=False)
class Btf:
    """A parsed blob: types[i] has type id i + 1 (id 0 is void)."""

    header: Container
    little: bool
    types: list[Container] = field(default_factory=list)
    strings: bytes = b""
    path: str = "<btf>"
    str_start: int = 0

    def string(self, off: int) -> str:
        return string_at(self.strings, off, self.path, self.str_start)

    def type(self, type_id: int) -> Container:
        if not 1 <= type_id <= len(self.types):
            raise FormatError(self.path, 0, f"BTF type id {type_id} out of range")
        return self.types[type_id - 1]

    def name(self, type_id: int) -> str:
        return self.string(self.type(type_id).name_off)


def parse(blob: bytes, path: str = "<btf>") -> Btf:
    """Parse a whole BTF blob; bad input raises FormatError naming the offset."""
    lay = parse_header(blob, path)
    compiled = _compiled_type(lay.little)
    stream = io.BytesIO(blob)
    types: list[Container] = []
    pos, end = lay.type_start, lay.type_end
    while pos < end:
        if end - pos < _TYPE_HEAD:
            raise FormatError(path, pos, f"BTF type {len(types) + 1} truncated")
        info = int.from_bytes(blob[pos + 4 : pos + 8], "little" if lay.little else "big")
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        size = type_size(kind, vlen)
        if size is None or kind == KIND_UNKN:
            raise FormatError(path, pos + 4, f"BTF type {len(types) + 1}: unknown kind {kind}")
        if pos + size > end:
            raise FormatError(path, pos, f"BTF type {len(types) + 1} runs past the type section")
        stream.seek(pos)
        try:
            types.append(compiled.parse_stream(stream))
        except ConstructError as e:  # pragma: no cover - sizes were checked above
            raise FormatError(path, pos, f"BTF type {len(types) + 1}: {e}") from None
        pos += size
    return Btf(
        lay.header, lay.little, types, bytes(blob[lay.str_start : lay.str_end]), path, lay.str_start
    )


def build(types: list[Container] | list[dict], strings: bytes, little: bool = True) -> bytes:
    """A blob with a 24-byte header, the types, then the strings."""
    tb = b"".join(btf_type(little).build(t) for t in types)
    hdr = btf_header(little)
    head = hdr.build(
        dict(
            magic=BTF_MAGIC,
            version=BTF_VERSION,
            flags=0,
            hdr_len=hdr.sizeof(),
            type_off=0,
            type_len=len(tb),
            str_off=len(tb),
            str_len=len(strings),
        )
    )
    return head + tb + strings
