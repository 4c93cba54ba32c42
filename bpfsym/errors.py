"""The errors bpfsym turns into one line and exit status 2 at its one boundary (cli.main).

FormatError: bad input (a file, with the offset where it goes wrong), declared with the
formats that raise it; UsageError: bad command-line input found after parsing.
"""

from __future__ import annotations

import errno

from bpfsym.formats.errors import FormatError

__all__ = ["FormatError", "UsageError", "one_line"]


class UsageError(Exception):
    """Bad command-line input discovered after parsing: one line, exit 2."""


def permission_hint(e: OSError) -> str:
    what = f"{e.filename}: " if e.filename else ""
    return (
        f"{what}{e.strerror or 'permission denied'}; "
        "needs root, or CAP_BPF + CAP_PERFMON + CAP_SYS_ADMIN (and kernel.perf_event_paranoid <= 1)"
    )


def one_line(e: BaseException) -> str | None:
    """The one line an error becomes at the boundary, None for errors that are bugs."""
    if isinstance(e, (FormatError, UsageError)):
        return str(e)
    if isinstance(e, PermissionError):
        return permission_hint(e)
    if isinstance(e, OSError):
        if e.errno in (errno.EPERM, errno.EACCES):
            return permission_hint(e)
        where = f": {e.filename}" if e.filename else ""
        return f"{e.strerror or e}{where}"
    return None
