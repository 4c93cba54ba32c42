"""The one error every parser raises for bad input: names the file and the offset."""

from __future__ import annotations


class FormatError(Exception):
    """Bad input in a file we read: the CLI prints it as one line and exits 2."""

    def __init__(self, path: str, offset: int, what: str) -> None:
        super().__init__(f"{path}: offset {offset}: {what}")
        self.path = path
        self.offset = offset
        self.what = what
