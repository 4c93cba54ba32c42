"""perf record's start and stop made cheap on a host with many BPF programs
(docs/record-startup.md): perf in a private mount namespace whose /proc/kallsyms is a
regular file, and its side-band thread woken once the workload is done.

perf 6.1 opens /proc/kallsyms 7 times per record, 3 of them read to the end (machine
set-up, the synthesis of trampolines and dispatchers in bpf-event.c, the build-id pass);
each full read costs ~3 s with 12k [bpf] symbols (kallsyms_split.py says why). In the
namespace the file holds the kernel part and the image lines (trampolines, dispatchers),
which is all perf takes from there: it synthesizes programs from bpf() (bpf-event.c,
perf_event__synthesize_bpf_events), and programs loaded later from its side-band thread.
The recorded command re-enters the recorder's own mount namespace (nsenter) before it
runs, so it reads the real /proc/kallsyms.

perf's side-band thread polls with a 1000 ms timeout and perf's exit joins it
(tools/perf/util/sideband_evlist.c): `perf record -a -- true` takes ~1 s for that alone.
Any side-band record ends the poll: PerfWaker loads and closes a 2-instruction socket
filter named bpfsym_wake every 20 ms once the workload has exited, until perf exits.
"""

from __future__ import annotations

import os
import select
import shlex
import shutil
import subprocess
import tempfile
import threading
import time

from bpfsym.formats import bpf as fb
from bpfsym.formats import bpfinsn as fi
from bpfsym.live import progs
from bpfsym.live.sys import Buffer, bpf

TOOLS = ("unshare", "nsenter", "mount", "sh")  # util-linux, and a shell
WAKE_NAME = "bpfsym_wake"


def namespace_tools() -> tuple[dict[str, str], list[str]]:
    """(tool -> path, the names not found)."""
    found = {t: shutil.which(t) for t in TOOLS}
    return {k: v for k, v in found.items() if v}, [k for k, v in found.items() if not v]


class NamespaceProbe:
    """`unshare --mount true`, started early: whether a private mount namespace can be
    made here (not in a container without CAP_SYS_ADMIN, for one)."""

    def __init__(self, unshare: str) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._error = ""
        try:
            self._proc = subprocess.Popen(
                [unshare, "--mount", "--propagation", "private", "--", "true"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
        except OSError as e:
            self._error = f"{unshare}: {e.strerror}"

    def error(self) -> str:
        """ "" when it worked, else unshare's own words."""
        if self._proc is not None:
            _out, err = self._proc.communicate()
            if self._proc.returncode != 0:
                text = err.decode("utf-8", "replace").strip().splitlines()
                self._error = text[-1] if text else f"exit status {self._proc.returncode}"
            self._proc = None
        return self._error


def private_kallsyms(data: bytes) -> str:
    """A root-only regular file for perf's /proc/kallsyms: removed once it is mounted (and
    by remove_file() in any case)."""
    d = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    fd, path = tempfile.mkstemp(prefix="bpfsym-kallsyms-", dir=d)  # 0600, O_EXCL
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return path


def remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _script(mount: str) -> str:
    """Runs in the new namespace: $0 the file, "$@" perf's command line. A failed bind
    mount leaves perf with the host's /proc/kallsyms: slower, nothing lost, said in one
    line."""
    return (
        f'{shlex.quote(mount)} --bind "$0" /proc/kallsyms 2>/dev/null || echo "bpfsym'
        " record: could not bind a private /proc/kallsyms for perf: it reads the host's"
        ' (slow with many BPF programs)" >&2; rm -f "$0"; exec "$@"'
    )


def perf_argv(
    perf_cmd: list[str], command: list[str], kallsyms_file: str, tools: dict[str, str]
) -> list[str]:
    """perf_cmd (perf record ...) in a new private mount namespace whose /proc/kallsyms
    is kallsyms_file; the workload after '--' enters this process's mount namespace and
    working directory first (`nsenter ... -- COMMAND`, which execs COMMAND in place: the
    same pid, perf's child as before)."""
    back = [tools["nsenter"], f"--mount=/proc/{os.getpid()}/ns/mnt", f"--wd={os.getcwd()}", "--"]
    return [
        tools["unshare"], "--mount", "--propagation", "private", "--",
        tools["sh"], "-c", _script(tools["mount"]), kallsyms_file,
        *perf_cmd, "--", *back, *command,
    ]  # fmt: skip


class WakeProgram:
    """`r0 = 0; exit` as a socket filter named bpfsym_wake: each load and close makes one
    PROG_LOAD and one PROG_UNLOAD side-band record (with their KSYMBOLs) on this CPU."""

    def __init__(self) -> None:
        insns = fb.bpf_insn.build(
            {"code": fi.BPF_ALU64 | fi.BPF_MOV | fi.BPF_K, "regs": 0, "off": 0, "imm": 0}
        ) + fb.bpf_insn.build({"code": fi.BPF_JMP | fi.BPF_EXIT, "regs": 0, "off": 0, "imm": 0})
        self._insns = Buffer(len(insns))
        self._insns.write(insns)
        self._license = Buffer(4)
        self._license.write(b"GPL\0")
        self._attr = fb.prog_load_attr.build(
            {"prog_type": fb.PROG_TYPES.index("socket_filter"), "insn_cnt": 2,
             "insns": self._insns.addr, "license": self._license.addr, "log_level": 0,
             "log_size": 0, "log_buf": 0, "kern_version": 0, "prog_flags": 0,
             "prog_name": WAKE_NAME}
        )  # fmt: skip

    def load_and_close(self) -> int | None:
        """The program's id, None when the load failed."""
        try:
            fd = bpf(fb.BPF_PROG_LOAD, self._attr)
        except OSError:
            return None
        try:
            return int(progs.basic_info(fd).id)
        except OSError:
            return None
        finally:
            os.close(fd)


class PerfWaker(threading.Thread):
    """Once perf's workload has exited, wake perf's side-band thread every `every`
    seconds until stop is set (after perf exits). ids: the programs it loaded."""

    def __init__(self, perf_pid: int, perf_path: str, every: float = 0.02) -> None:
        super().__init__(daemon=True, name="bpfsym-perf-waker")
        self.perf_pid = perf_pid
        self.perf_path = os.path.realpath(perf_path)
        self.every = every
        self.ids: list[int] = []
        self.stop = threading.Event()
        self._program = WakeProgram()

    def _is_perf(self) -> bool:
        me = f"/proc/{self.perf_pid}"
        try:
            if os.readlink(f"{me}/exe") == self.perf_path:
                return True
            with open(f"{me}/comm") as f:
                return f.read().startswith("perf")
        except OSError:
            return False

    def _workload(self) -> int | None:
        """perf's child, once the pid runs perf (in the namespace it is unshare, then sh,
        whose child is mount: not the workload)."""
        while not self.stop.is_set():
            try:
                with open(f"/proc/{self.perf_pid}/task/{self.perf_pid}/children") as f:
                    kids = f.read().split()
            except OSError:
                return None  # perf is gone
            if kids and self._is_perf():
                return int(kids[0])
            time.sleep(0.002)
        return None

    def run(self) -> None:
        pid = self._workload()
        if pid is None:
            return
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = -1  # it has exited already
        if pidfd >= 0:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            while not self.stop.is_set() and not poller.poll(100):
                pass
            os.close(pidfd)
        while not self.stop.wait(self.every):
            got = self._program.load_and_close()
            if got is not None:
                self.ids.append(got)
