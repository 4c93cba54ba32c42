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
