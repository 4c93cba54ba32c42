"""Annotate's sample counts in a second process, beside the rest of an annotation.

The child is forked before the side file is read, and imports nothing of the reader
before that: while this process reads the side file, the child loads numpy and the
perf.data reader, then counts (annotate.heat) once it has the programs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import signal

from bpfsym.model import Capture
from bpfsym.read.bulk import file_size, load_numpy, usable_cpus

Heat = dict[int, dict[int, int]]  # prog id -> native address -> samples (as annotate.heat)

BESIDE_MIN_BYTES = 8 << 20  # smaller files: a second process costs what it saves


class Beside:
    """bpf_sample_counts(path, capture) in a forked child started before the side file is
    read: the child loads numpy and the reader while this process reads the side file,
    then gets the programs (ids, lifetimes, functions: what placing a sample needs)
    through a pipe (send), counts, and sends the counts back pickled. Only for big files
    on two CPUs; where the child fails or was not started, result() counts here, which
    then also raises what is wrong with the file, as without the child."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pid: int | None = None
        self.fd = self.tell = -1
        if not (hasattr(os, "fork") and file_size(path) >= BESIDE_MIN_BYTES and usable_cpus() >= 2):
            return
        r_progs, w_progs = os.pipe()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: counts, or says nothing
            os.close(w_progs)
            os.close(r)
            try:
                if load_numpy() is not None:  # (before the reader: numpy is the most)
                    from bpfsym.annotate.heat import program_sample_counts

                    with os.fdopen(r_progs, "rb") as f:
                        sent = f.read()  # to the end: the parent sends once and closes
                    if sent:
                        got = pickle.dumps(program_sample_counts(path, pickle.loads(sent)), -1)
                        with os.fdopen(w, "wb") as out:
                            out.write(got)
            except BaseException:  # noqa: BLE001, S110 - the parent counts itself
                pass
            finally:
                os._exit(0)
        os.close(r_progs)
        os.close(w)
        with contextlib.suppress(OSError, AttributeError):  # the programs in one write, no wait
            fcntl.fcntl(w_progs, fcntl.F_SETPIPE_SZ, 1 << 20)
        self.pid, self.fd, self.tell = pid, r, w_progs

    def send(self, capture: Capture) -> None:
        """The capture's programs to the child, which then counts."""
        if self.tell < 0:
            return
        light = [p.outline() for p in capture.programs]
        try:
            with os.fdopen(self.tell, "wb") as f:
                f.write(pickle.dumps(light, -1))
        except OSError:  # the child is gone: result() counts here
            pass
        self.tell = -1

    def result(self, capture: Capture) -> Heat:
        got = b""
        if self.pid is not None:
            self.send(capture)  # (if the caller has not)
            with os.fdopen(self.fd, "rb") as f:
                got = f.read()  # to the end: the child has written all it will
            os.waitpid(self.pid, 0)
            self.pid = None
        if got:
            try:
                counts: Heat = pickle.loads(got)
                return counts
            except Exception:  # noqa: BLE001, S110 - cut short: count here
                pass
        from bpfsym.annotate.heat import bpf_sample_counts

        return bpf_sample_counts(self.path, capture)

    def close(self) -> None:
        """End the child (an error came first)."""
        if self.tell >= 0:
            os.close(self.tell)
            self.tell = -1
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            os.close(self.fd)
            self.pid = None
