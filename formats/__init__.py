"""Every binary layout bpfsym reads or writes, declared once with construct.

No I/O and no kernel access here. Installed as ``bpfsym.formats``.
Hot paths use struct_of(): a struct.Struct derived from a declaration, so the
layout is still written down once.
"""

from __future__ import annotations

import importlib
import struct
import sys
import types
from typing import Any


class _LazyPdb(types.ModuleType):
    """Stands in for pdb until something uses it: construct imports pdb for its Debugger,
    which bpfsym never uses, and pdb costs 15 ms of every start-up."""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get("pdb") is self:
            del sys.modules["pdb"]
        return getattr(importlib.import_module("pdb"), name)


def _lazy_pdb() -> None:
    if "pdb" not in sys.modules:
        stub = _LazyPdb("pdb")
        stub.__spec__ = None  # so `import pdb` does not look inside
        sys.modules["pdb"] = stub


_lazy_pdb()

from construct import (  # noqa: E402 - after _lazy_pdb
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

from .errors import FormatError  # noqa: E402

__all__ = ["FormatError", "fixed_head", "struct_of"]


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
