"""numpy helpers shared by the bulk readers (numpy is passed in: it stays optional)."""

from __future__ import annotations

from typing import Any


def unique(np: Any, a: Any) -> tuple[Any, Any]:
    """np.unique(a, return_inverse=True) for a 1-d array, without np.unique: numpy 2's
    imports numpy.ma on first use, which costs a short report more than the sorting.
    Equal values may come in any order: neither the values nor the inverse depend on it."""
    perm = packed_argsort(np, a)
    if perm is None:
        perm = np.argsort(a)
    s = a[perm]
    inv, new = number_sorted(np, s, perm)
    return s[new], inv


def number_sorted(np: Any, s: Any, perm: Any) -> tuple[Any, Any]:
    """Number the values 0.. in order, given them sorted (s) and the permutation that
    sorted them (s = a[perm]): (each element of a's number, where in s a value starts)."""
    new = np.empty(len(s), dtype=bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    number = np.empty(len(s), dtype=np.int64)
    number[perm] = np.cumsum(new) - 1
    return number, new


def stable_argsort(np: Any, a: Any) -> Any:
    """np.argsort(a, kind="stable") of a 1-d integer array: the same permutation, found
    faster (numpy's stable sort of 64-bit integers is a merge sort): by its radix sort of
    16-bit values where the span fits in 16 bits, else where packed_argsort can; its
    stable sort otherwise."""
    if a.dtype.itemsize <= 2 or len(a) < 2:
        return np.argsort(a, kind="stable")
    lo = int(a.min())
    if int(a.max()) - lo < 1 << 16:
        return np.argsort((a - lo).astype(np.uint16), kind="stable")
    perm = packed_argsort(np, a)
    return np.argsort(a, kind="stable") if perm is None else perm


def packed_argsort(np: Any, a: Any) -> Any:
    """The stable argsort of a 1-d integer array as one sort of values, not of indexes:
    each element's (value - min) in the high bits of an int64 and its index in the low
    ones, sorted, the index masked out. numpy sorts 64-bit values several times faster
    than it argsorts them (on x86 with AVX-512: ~1.5 ms against ~11 ms for 300k; its
    stable argsort, a merge sort, ~20 ms). None when the values' span leaves no room."""
    n = len(a)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    bits = (n - 1).bit_length()
    lo, hi = int(a.min()), int(a.max())
    if (hi - lo) >> (63 - bits):
        return None
    if a.dtype.kind == "u" and a.dtype.itemsize == 8:  # the difference fits in int64
        key = (a.astype(np.uint64) - np.uint64(lo)).astype(np.int64)
    else:  # in int64 first: the difference of two int32 may not fit in int32
        key = a.astype(np.int64) - lo
    return sort_packed(np, key, bits)[1]


def sort_packed(np: Any, high: Any, bits: int) -> tuple[Any, Any]:
    """Sort high (non-negative int64 below 2**(63 - bits), 2**bits >= its length) with
    each element's index packed below it: (high sorted, the stable permutation that
    sorts it), one sort of values."""
    key = high << bits
    key |= np.arange(len(high), dtype=np.int64)
    key.sort()
    return key >> bits, key & ((1 << bits) - 1)


def runs(np: Any, a: Any, width: int) -> Any:
    """The runs of `width` consecutive elements of the 1-d contiguous array a, one item
    each (item i: a[i:i + width], as raw bytes), so that runs(...)[at] gathers whole
    runs: numpy copies each as one item, where a 2-d view of the same rows
    (sliding_window_view) is gathered element by element, 2-3 times slower for rows of
    a few words. The caller views the gather as its own dtype."""
    return np.ndarray(
        shape=(max(len(a) - width + 1, 0),),
        dtype=np.dtype((np.void, a.itemsize * width)),
        buffer=a,
        strides=(a.itemsize,),
    )


def gather_rows(np: Any, a: Any, width: int, at: Any) -> Any:
    """a[i:i + width] for each i in at, as a (len(at), width) array of a's dtype."""
    return runs(np, a, width)[at].view(a.dtype).reshape(len(at), width)


def hex_column(np: Any, buf: Any, starts: Any, width: int) -> Any:
    """The hexadecimal numbers of `width` digits (at most 16) at each of starts in buf
    (uint8), as uint64 (a kallsyms text's address column); None where any is not hex."""
    if width in (8, 16) and len(starts) and int(starts.max()) + width <= len(buf):
        return _hex_words(np, buf, starts, width)
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


_B = 0x0101010101010101  # a byte's constant in each of a u64's bytes


def _hex_words(np: Any, buf: Any, starts: Any, width: int) -> Any:
    """hex_column of 8 or 16 digits as arithmetic on u64 words, 8 digits a word (one
    gather per word, not one per digit, and no table): each byte checked to be a digit
    or a letter a-f/A-F (ranges by carries into the byte's top bit, which ASCII leaves
    clear), made its value, and the 8 values packed into 32 bits."""
    u64 = np.uint64
    words = np.ndarray((len(buf) - 7,), dtype=">u8", buffer=buf, strides=(1,))  # unaligned
    out = np.zeros(len(starts), dtype=u64)
    top = u64(0x80 * _B)
    for at in range(0, width, 8):
        x = words[starts + at].astype(u64)
        if bool((x & top).any()):
            return None  # not ASCII: the carries below would cross bytes
        digit = ((x + u64(0x50 * _B)) & ~(x + u64(0x46 * _B))) & top  # 0x30 <= c < 0x3a
        y = x | u64(0x20 * _B)  # A-F as a-f
        letter = ((y + u64(0x1F * _B)) & ~(y + u64(0x19 * _B))) & top  # 0x61 <= c < 0x67
        if bool(((digit | letter) != top).any()):
            return None
        v = (x & u64(0x0F * _B)) + (letter >> u64(7)) * u64(9)  # each byte's value
        v = (v | (v >> u64(4))) & u64(0x00FF00FF00FF00FF)
        v = (v | (v >> u64(8))) & u64(0x0000FFFF0000FFFF)
        v = (v | (v >> u64(16))) & u64(0xFFFFFFFF)
        out = (out << u64(32)) | v
    return out


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
