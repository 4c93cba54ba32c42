"""Messages from the pinner process to the recorder, over a Unix stream socket.

A message is a header, then entries; the file descriptors it carries ride in
SCM_RIGHTS with its first byte. Each entry is a small header and one raw perf
side-band record (its own header.size long) or, for control entries, text.
"""

from __future__ import annotations

from construct import Int16sl, Int16ul, Int32ul, Struct

message_header = Struct("length" / Int32ul, "nfds" / Int32ul)  # length: bytes after this header
entry_header = Struct(
    "cpu" / Int16ul,  # CONTROL: the entry is a control text, not a perf record
    "fd_slot" / Int16sl,  # index into the message's fds, -1: none
    "length" / Int32ul,
)
CONTROL = 0xFFFF
MAX_FDS = 250  # below SCM_MAX_FD (253)
