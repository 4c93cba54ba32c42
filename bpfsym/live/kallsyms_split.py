"""/proc/kallsyms without its full read: the kernel part, and the [bpf] part only as far
as the image symbols (trampolines, dispatchers) that exist need. As a function and as a
script; no imports beyond os, sys and time (it runs as ``python -I -S``).

/proc/kallsyms lists kernel symbols, then modules, then BPF symbols, and the kernel finds
[bpf] line k by walking its BPF symbol list from the head (bpf_get_kallsym,
kernel/bpf/core.c): a full read is quadratic in the number of BPF symbols, 3-9 s with 12k
of them, against 0.05 s for the kernel part. bpfsym takes program symbols from
bpf_prog_info and side-band records; only the callers of bpf_image_ksym_add() have no
other source: trampolines `bpf_trampoline_<key>`, dispatchers `bpf_dispatcher_<name>`,
struct_ops members `bpf__<struct>_<member>`. The list is in insertion order, so after
PREFIX_LINES lines (the xdp dispatcher, made at the first XDP use, is usually among them)
the reader asks what must be found (live.bpf_images.Expected: from bpf(), after the
side-band listener is up, which reports everything created later) and reads on only
until all of it was seen, to the end when told "all".

    python -I -S kallsyms_split.py PATH ASK_FD ANSWER_FD    (stdout: a file)

writes b"?d" (the dispatcher was among the lines read) or b"?x" to ASK_FD, reads the
answer from ANSWER_FD up to a NUL: lines "need NAME|NAME..." (one of them must be seen)
and "all REASON"; then writes
KERNEL \\0 IMAGE-LINES \\0 STATUS \\0OK to stdout (b"\\0ERR<errno>" when PATH cannot be
read). EOF on ANSWER_FD before an answer: exit 1 (the recorder gave up).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable  # loaded at interpreter start anyway

PREFIX_LINES = 512  # [bpf] lines always read before asking
DISPATCHER = "bpf_dispatcher_xdp"
_CHUNK = 1 << 20  # /proc/kallsyms gives about 4 KB per read call


def parse_answer(text: str) -> tuple[list[frozenset[str]], list[str]]:
    """An answer's "need NAME|NAME..." lines (one of those names must be seen) and its
    "all REASON" lines (read to the end)."""
    need: list[frozenset[str]] = []
    reasons: list[str] = []
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "need":
            need.append(frozenset(rest.split("|")))
        elif word == "all":
            reasons.append(rest)
    return need, reasons


def missing(need: list[frozenset[str]], names: set[str]) -> list[str]:
    """The needed symbols not seen (each as "A|B" where any of them would do)."""
    return ["|".join(sorted(alts)) for alts in need if alts.isdisjoint(names)]


def split(path: str, ask: Callable[[bool], str], chunk: int = _CHUNK) -> tuple[bytes, bytes, str]:
    """(kernel part, image lines, status). ask(saw_dispatcher) -> answer text (see
    parse_answer), called once after PREFIX_LINES [bpf] lines (not when there are fewer).
    Reads go `chunk` bytes at a time (/proc/kallsyms gives at most a page a read)."""
    out = bytearray()
    view = memoryview(bytearray(chunk))
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while True:
            n = os.readv(fd, [view])
            if not n:
                return bytes(out), b"", "no [bpf] lines"
            start = max(len(out) - 6, 0)
            out += view[:n]
            cut = out.find(b"\t[bpf]", start)
            if cut >= 0:
                cut = out.rfind(b"\n", 0, cut) + 1
                break
        kernel, pending = bytes(out[:cut]), bytes(out[cut:])
        del out
        images: list[bytes] = []
        names: set[str] = set()
        lines = 0
        need: list[frozenset[str]] = []
        reasons: list[str] = []
        asked = False
        t0 = time.monotonic()
        while True:
            *whole, pending = pending.split(b"\n")
            for line in whole:
                lines += 1
                if line.endswith(b"\t[bpf]") and b" bpf_prog_" not in line:
                    images.append(line + b"\n")
                    parts = line.split()
                    if len(parts) >= 3:
                        names.add(parts[2].decode("utf-8", "replace"))
            if lines >= PREFIX_LINES:
                if not asked:
                    need, reasons = parse_answer(ask(DISPATCHER in names))
                    asked = True
                if not reasons and not missing(need, names):
                    took = time.monotonic() - t0
                    status = f"stopped after {lines} [bpf] lines ({took:.3f} s)"
                    return kernel, b"".join(images), status
            n = os.readv(fd, [view])
            if not n:
                break
            pending += bytes(view[:n])
        took = time.monotonic() - t0
        why = ""
        if reasons:
            why = ": " + "; ".join(reasons)
        elif asked and missing(need, names):
            why = ": not found: " + ", ".join(missing(need, names))
        return kernel, b"".join(images), f"read all {lines} [bpf] lines ({took:.3f} s{why})"
    finally:
        os.close(fd)


def _ask_over(ask_fd: int, answer_fd: int) -> Callable[[bool], str]:
    def ask(saw_dispatcher: bool) -> str:
        os.write(ask_fd, b"?d" if saw_dispatcher else b"?x")
        got = bytearray()
        while not got.endswith(b"\0"):
            chunk = os.read(answer_fd, 65536)
            if not chunk:
                raise SystemExit(1)  # no answer: the recorder is gone or gave up
            got += chunk
        return got[:-1].decode("utf-8", "replace")

    return ask


def main(path: str, ask_fd: int, answer_fd: int) -> int:
    try:
        kernel, images, status = split(path, _ask_over(ask_fd, answer_fd))
        out = kernel + b"\0" + images + b"\0" + status.encode() + b"\0OK"
    except OSError as e:
        out = b"\0ERR%d" % (e.errno or 5)
    os.close(ask_fd)  # EOF there: the recorder stops waiting for a question
    view = memoryview(out)
    while view:
        view = view[os.write(1, view) :]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
