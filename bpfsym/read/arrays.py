"""numpy helpers shared by the bulk readers (numpy is passed in: it stays optional)."""

from __future__ import annotations

from typing import Any


def unique(np: Any, a: Any) -> tuple[Any, Any]:
    """np.unique(a, return_inverse=True) for a 1-d array, without np.unique: numpy 2's
    imports numpy.ma on first use, which costs a short report more than the sorting."""
    perm = np.argsort(a, kind="stable")
    s = a[perm]
    new = np.empty(len(s), dtype=bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    inv = np.empty(len(s), dtype=np.int64)
    inv[perm] = np.cumsum(new) - 1
    return s[new], inv


def hex_column(np: Any, buf: Any, starts: Any, width: int) -> Any:
    """The hexadecimal numbers of `width` digits (at most 16) at each of starts in buf
    (uint8), as uint64 (a kallsyms text's address column); None where any is not hex."""
    digit = np.full(256, 255, dtype=np.uint8)
    for i, ch in enumerate(b"0123456789abcdef"):
        digit[ch] = i
    for i, ch in enumerate(b"ABCDEF"):
        digit[ch] = 10 + i
    # every number's digits at once, as a (numbers, 16) matrix padded with leading zeros;
    # two digits make a byte, eight bytes a big-endian u64
    d = np.zeros((len(starts), 16), dtype=np.uint8)
    if len(starts):
        rows = np.lib.stride_tricks.sliding_window_view(buf, width)  # row i: buf[i:i+width]
        d[:, 16 - width :] = digit[rows[starts]]
    if bool((d == 255).any()):
        return None
    pairs = (d[:, 0::2] << np.uint8(4)) | d[:, 1::2]
    return np.ascontiguousarray(pairs).view(">u8").ravel().astype(np.uint64)


def kallsyms_lines(np: Any, raw: bytes) -> tuple[Any, Any, Any, int, Any] | None:
    """The columns of a kallsyms text (raw: ASCII ending in a newline): (its bytes as
    uint8, each line's start and end, the address width, the addresses); None unless every
    line is `<hex address of one width> <one byte> <at least one byte>` (the type byte
    between two spaces)."""
    buf = np.frombuffer(raw, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    width = raw.find(b" ")
    if width <= 0 or width > 16 or bool((ends - starts < width + 4).any()):
        return None
    if bool((buf[starts + width] != 32).any() or (buf[starts + width + 2] != 32).any()):
        return None
    addr = hex_column(np, buf, starts, width)
    if addr is None:
        return None
    return buf, starts, ends, width, addr
