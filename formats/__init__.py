"""Every binary layout bpfsym reads or writes, declared once with construct.

No I/O and no kernel access here. Installed as ``bpfsym.formats``.
Hot paths use struct_of(): a struct.Struct derived from a declaration, so the
layout is still written down once.
"""

from __future__ import annotations

import functools
import struct

from construct import (
    Adapter,
    Aligned,
    Bytes,
    FixedSized,
    FormatField,
    Padded,
    Renamed,
    StringEncoded,
    Struct,
)

from .errors import FormatError

__all__ = ["FormatError", "Integers", "fixed_head", "integers", "struct_of"]


def struct_of(decl: Struct | Aligned) -> tuple[struct.Struct, tuple[str, ...]]:
    """The struct.Struct equivalent of a construct Struct of fixed-size fields.

    Integers (also under Enum/FlagsEnum) map to their format; Bytes(n) and fixed strings to "ns" (raw bytes, the
    caller decodes); Padding to "nx"; Aligned adds its trailing pad. Names are those
    of the fields that produce values, in order."""
    pad_to = 0
    if isinstance(decl, Aligned):
        pad_to = decl.modulus
        decl = decl.subcon
    order = ""
    fmt = []
    names = []
    for sc in decl.subcons:
        inner = sc.subcon if isinstance(sc, Renamed) else sc
        if isinstance(inner, Adapter) and isinstance(inner.subcon, FormatField):
            inner = inner.subcon  # Enum, FlagsEnum: the integer underneath
        if isinstance(inner, FormatField):
            if struct.calcsize(inner.fmtstr) > 1:  # a byte's own order says nothing
                order = order or inner.fmtstr[0]
            fmt.append(inner.fmtstr[1:])
        elif isinstance(inner, Bytes) and isinstance(inner.length, int):
            fmt.append(f"{inner.length}s")
        elif isinstance(inner, StringEncoded) and isinstance(inner.subcon, (Padded, FixedSized)):
            fmt.append(f"{inner.subcon.length}s")  # PaddedString
        elif isinstance(inner, Padded) and not isinstance(sc, Renamed):
            fmt.append(f"{inner.length}x")
            continue
        else:
            raise TypeError(f"not a fixed-size field: {sc!r}")
        names.append(sc.name)
    out = struct.Struct((order or "<") + "".join(fmt))
    if pad_to and out.size % pad_to:
        out = struct.Struct(out.format + f"{pad_to - out.size % pad_to}x")
    return out, tuple(names)


def fixed_head(decl: Struct, upto: str) -> tuple[struct.Struct, tuple[str, ...]]:
    """The struct.Struct of a declaration's fixed-size fields before the field `upto`
    (a record's variable tail, read by the caller)."""
    names = [sc.name for sc in decl.subcons]
    return struct_of(Struct(*decl.subcons[: names.index(upto)]))


class Integers:
    """struct views of plain integers and integer arrays in one byte order: the words and
    arrays of the ABIs (u64 ids, counts, addresses), where no record layout applies."""

    def __init__(self, little: bool) -> None:
        self.order = "<" if little else ">"
        self.u16 = struct.Struct(self.order + "H")
        self.u32 = struct.Struct(self.order + "I")
        self.u64 = struct.Struct(self.order + "Q")

    def array(self, code: str, n: int) -> struct.Struct:
        """n integers of struct code `code` ("Q", "I", ...)."""
        return _array(self.order, code, n)


@functools.cache
def integers(little: bool) -> Integers:
    return Integers(little)


@functools.lru_cache(maxsize=256)
def _array(order: str, code: str, n: int) -> struct.Struct:
    return struct.Struct(f"{order}{n}{code}")
