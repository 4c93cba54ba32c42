"""Prototype (docs/record-startup.md): start and stop `record` without reading the BPF
part of /proc/kallsyms, for bpfsym and for perf.

/proc/kallsyms lists BPF symbols last, and the kernel finds line k of that part by
walking its BPF symbol list from the head (bpf_get_kallsym, kernel/bpf/core.c): a full
read is quadratic in the number of BPF symbols (3.2 s here with 12k, perf does three
per record). Program symbols come from bpf_prog_info and side-band records; only three
kinds of [bpf] symbols have no other source (bpf_image_ksym_add's callers): trampolines
`bpf_trampoline_<key>` (kernel/bpf/trampoline.c, key = target object id << 32 | BTF id,
what bpf_link_info.tracing reports), dispatchers `bpf_dispatcher_<name>`
(kernel/bpf/dispatcher.c: only xdp, built on the first XDP program registered with it,
never removed) and struct_ops members `bpf__<struct>_<member>` (bpf_struct_ops.c).

1. SplitReader reads the kernel part in a process of its own; once told to go (the
   pinner is listening), it enumerates what image symbols must exist (tracing links,
   struct_ops maps, XDP programs) and reads the [bpf] part only until all of them and
   at least PREFIX_LINES lines were seen. Anything it cannot account for (struct_ops,
   LSM cgroup shims) makes it read to the end: never less than today.
2. perf_in_namespace() runs perf in a private mount namespace in which /proc/kallsyms
   is a regular file of the kernel part plus those image lines, and the recorded
   command re-entered into bpfsym's own mount namespace (nsenter) before it runs: the
   command sees the real /proc/kallsyms. perf still synthesizes programs from bpf()
   (bpf-event.c), and trampolines/dispatchers from the [bpf] lines of the file.
3. PerfWaker: perf's side-band thread polls with a 1000 ms timeout and perf's exit
   joins it (sideband_evlist.c); once perf's workload has exited, loading and closing
   a 2-insn program every 20 ms wakes it.

    python -I -S perfns.py split PATH   (the reader process; stdout a file)
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import struct
import sys
import threading
import time

PREFIX_LINES = 512  # [bpf] lines always read: the xdp dispatcher is usually among the first
_NR_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "ppc64le": 361, "s390x": 351}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

# bpf commands and types (include/uapi/linux/bpf.h)
BPF_PROG_LOAD = 5
BPF_PROG_GET_NEXT_ID, BPF_MAP_GET_NEXT_ID = 11, 12
BPF_PROG_GET_FD_BY_ID, BPF_MAP_GET_FD_BY_ID = 13, 14
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_LINK_GET_FD_BY_ID, BPF_LINK_GET_NEXT_ID = 30, 31
BPF_PROG_TYPE_SOCKET_FILTER, BPF_PROG_TYPE_XDP, BPF_PROG_TYPE_EXT = 1, 6, 28
BPF_MAP_TYPE_STRUCT_OPS = 26
BPF_LINK_TYPE_TRACING, BPF_LINK_TYPE_CGROUP, BPF_LINK_TYPE_STRUCT_OPS = 2, 3, 9
BPF_LSM_CGROUP = 43
# attach types whose tracing links have a trampoline image: fentry, fexit, fmod_ret, lsm
TRAMPOLINE_ATTACH = {24, 25, 26, 27}


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, len(attr))
    ret = _libc.syscall(_NR_BPF.get(os.uname().machine, 321), cmd, buf, len(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(ret)


def _next_ids(cmd: int) -> list[int]:
    out: list[int] = []
    cur = 0
    while True:
        attr = ctypes.create_string_buffer(struct.pack("=III", cur, 0, 0), 12)
        if _libc.syscall(_NR_BPF.get(os.uname().machine, 321), cmd, attr, 12) < 0:
            return out
        cur = struct.unpack_from("=I", attr.raw, 4)[0]
        out.append(cur)


def _info(fd: int, size: int) -> bytes:
    buf = ctypes.create_string_buffer(size)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("=IIQ", fd, size, ctypes.addressof(buf)))
    return buf.raw


def _obj_info(get_fd: int, obj_id: int, size: int) -> bytes | None:
    try:
        fd = _bpf(get_fd, struct.pack("=III", obj_id, 0, 0))
    except OSError:
        return None  # gone meanwhile
    try:
        return _info(fd, size)
    finally:
        os.close(fd)


class Expected:
    """The image symbols that must be in /proc/kallsyms now, as far as bpf() can tell."""

    def __init__(self) -> None:
        self.trampolines: set[str] = set()
        self.unknown: list[str] = []  # reasons to read the whole [bpf] part
        self.xdp = False  # an XDP program exists: bpf_dispatcher_xdp likely does

    @classmethod
    def now(cls, check_xdp: bool) -> Expected:
        e = cls()
        for link_id in _next_ids(BPF_LINK_GET_NEXT_ID):
            # bpf_link_info: type, id, prog_id, then (8-aligned) the union at 16
            info = _obj_info(BPF_LINK_GET_FD_BY_ID, link_id, 64)
            if info is None:
                continue
            ltype = struct.unpack_from("=I", info, 0)[0]
            if ltype == BPF_LINK_TYPE_TRACING:
                attach, obj_id, btf_id = struct.unpack_from("=III", info, 16)
                if attach in TRAMPOLINE_ATTACH:
                    e.trampolines.add(f"bpf_trampoline_{(obj_id << 32) | btf_id}")
                elif attach != 0:  # 0: freplace (text poke, no image)
                    e.unknown.append(f"tracing link {link_id} of attach type {attach}")
            elif ltype == BPF_LINK_TYPE_CGROUP:
                if struct.unpack_from("=I", info, 24)[0] == BPF_LSM_CGROUP:
                    e.unknown.append(f"LSM cgroup link {link_id} (shim trampoline)")
            elif ltype == BPF_LINK_TYPE_STRUCT_OPS:
                e.unknown.append(f"struct_ops link {link_id}")
        for map_id in _next_ids(BPF_MAP_GET_NEXT_ID):
            info = _obj_info(BPF_MAP_GET_FD_BY_ID, map_id, 80)
            if info is not None and struct.unpack_from("=I", info, 0)[0] == BPF_MAP_TYPE_STRUCT_OPS:
                e.unknown.append(f"struct_ops map {map_id}")
        if check_xdp:
            for prog_id in _next_ids(BPF_PROG_GET_NEXT_ID):
                info = _obj_info(BPF_PROG_GET_FD_BY_ID, prog_id, 8)
                if info is not None and struct.unpack_from("=I", info, 0)[0] == BPF_PROG_TYPE_XDP:
                    e.xdp = True
                    break
        return e

    def satisfied(self, names: set[str]) -> bool:
        return (
            not self.unknown
            and self.trampolines <= names
            and (not self.xdp or "bpf_dispatcher_xdp" in names)
        )


def split(path: str, go: int | None = None) -> tuple[bytes, bytes, str]:
    """(kernel part, image lines, how far the [bpf] part was read). go: a pipe fd to wait
    on (one byte) before the [bpf] part, once the listener for new symbols is up."""
    out = bytearray()
    chunk = bytearray(1 << 20)
    view = memoryview(chunk)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while n := os.readv(fd, [view]):
            start = max(len(out) - 6, 0)
            out += view[:n]
            cut = out.find(b"\t[bpf]", start)
            if cut >= 0:
                cut = out.rfind(b"\n", 0, cut) + 1
                break
        else:
            return bytes(out), b"", "no [bpf] lines"
        kernel, rest = bytes(out[:cut]), bytes(out[cut:])
        if go is not None:
            os.read(go, 1)
        images: list[bytes] = []
        names: set[str] = set()
        lines = 0
        expected: Expected | None = None
        pending = rest
        t0 = time.monotonic()
        while True:
            *whole, pending = pending.split(b"\n")
            for line in whole:
                lines += 1
                if line.endswith(b"\t[bpf]") and b" bpf_prog_" not in line:
                    images.append(line + b"\n")
                    names.add(line.split()[2].decode("utf-8", "replace"))
            if lines >= PREFIX_LINES:
                if expected is None:
                    expected = Expected.now(check_xdp="bpf_dispatcher_xdp" not in names)
                if expected.satisfied(names):
                    took = time.monotonic() - t0
                    return (
                        kernel,
                        b"".join(images),
                        f"stopped after {lines} [bpf] lines ({took:.3f} s)",
                    )
            n = os.readv(fd, [view])
            if not n:
                break
            pending += bytes(view[:n])
        took = time.monotonic() - t0
        why = ""
        if expected is not None and not expected.satisfied(names):
            why = ": " + ("; ".join(expected.unknown) or "an expected symbol is missing")
        return kernel, b"".join(images), f"read all {lines} [bpf] lines ({took:.3f} s{why})"
    finally:
        os.close(fd)


class SplitReader:
    """split() in a process of its own (a thread would wait for the GIL after every 4 KB
    read: docs/kernel-notes.md), into a memfd; go() lets it into the [bpf] part."""

    def __init__(self, path: str = "/proc/kallsyms") -> None:
        import subprocess

        self._file = os.memfd_create("bpfsym-kallsyms", os.MFD_CLOEXEC)
        go_r, self._go = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), "split", path, str(go_r)],
            stdin=subprocess.DEVNULL, stdout=self._file, pass_fds=(go_r,),
        )  # fmt: skip
        os.close(go_r)

    def go(self) -> None:
        os.write(self._go, b"g")
        os.close(self._go)

    def result(self) -> tuple[bytes, bytes, str]:
        self._proc.wait()
        size = os.fstat(self._file).st_size
        got = os.pread(self._file, size, 0)
        os.close(self._file)
        if self._proc.returncode != 0 or not got.endswith(b"\0OK"):
            raise OSError(5, "the kallsyms reader failed")
        kernel, images, status, _ok = got.split(b"\0", 3)
        return kernel, images, status.decode()


def _split_main(path: str, go: int) -> int:
    kernel, images, status = split(path, go)
    data = memoryview(kernel + b"\0" + images + b"\0" + status.encode() + b"\0OK")
    while data:
        data = data[os.write(1, data) :]
    return 0


# ---- perf in a private mount namespace ----


def namespace_tools() -> dict[str, str] | None:
    """util-linux's unshare, nsenter and mount, or None (then perf runs as it is)."""
    found = {t: shutil.which(t) for t in ("unshare", "nsenter", "mount", "sh")}
    if any(v is None for v in found.values()):
        return None
    return {k: v for k, v in found.items() if v}


def private_kallsyms(kernel: bytes, images: bytes) -> str:
    """A root-only regular file for perf's /proc/kallsyms (removed once bind-mounted)."""
    d = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    path = f"{d}/bpfsym-kallsyms-{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        data = memoryview(kernel + images)
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    return path


def perf_in_namespace(
    perf_cmd: list[str], command: list[str], kallsyms_file: str, tools: dict[str, str]
) -> list[str]:
    """argv: perf_cmd (perf record ...) in a new mount namespace whose /proc/kallsyms is
    kallsyms_file; the command after '--' enters this process's mount namespace first."""
    # a failed bind mount leaves perf with the real file: slower, nothing lost
    script = f'{tools["mount"]} --bind "$0" /proc/kallsyms; rm -f "$0"; exec "$@"'
    back = [tools["nsenter"], f"--mount=/proc/{os.getpid()}/ns/mnt", f"--wd={os.getcwd()}", "--"]
    return [
        tools["unshare"], "--mount", "--propagation", "private", "--",
        tools["sh"], "-c", script, kallsyms_file, *perf_cmd, "--", *back, *command,
    ]  # fmt: skip


# ---- waking perf's side-band thread at the end ----

_WAKE_INSNS = struct.pack("=BBhi", 0xB7, 0, 0, 0) + struct.pack("=BBhi", 0x95, 0, 0, 0)
_LICENSE = ctypes.create_string_buffer(b"GPL")
_INSNS = ctypes.create_string_buffer(_WAKE_INSNS, len(_WAKE_INSNS))


def wake_once() -> None:
    """Load and close a 2-insn socket filter named bpfsym_wake: one PROG_LOAD and one
    PROG_UNLOAD side-band record (with its KSYMBOLs) on this CPU."""
    attr = struct.pack(
        "=IIQQIIQII16s",
        BPF_PROG_TYPE_SOCKET_FILTER, 2, ctypes.addressof(_INSNS), ctypes.addressof(_LICENSE),
        0, 0, 0, 0, 0, b"bpfsym_wake",
    )  # fmt: skip
    try:
        os.close(_bpf(BPF_PROG_LOAD, attr.ljust(128, b"\0")))
    except OSError:
        pass


class PerfWaker(threading.Thread):
    """Once perf's workload (its child) has exited, wake perf's side-band thread every
    `every` seconds until perf exits. wakes: how many programs that took."""

    def __init__(self, perf_pid: int, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.perf_pid = perf_pid
        self.every = every
        self.wakes = 0
        self.stop = threading.Event()

    def _workload(self) -> int | None:
        """perf's child, once the pid runs perf (in the namespace it is first unshare,
        then sh, whose child is mount: not the workload)."""
        me = f"/proc/{self.perf_pid}"
        while not self.stop.is_set():
            try:
                with open(f"{me}/comm") as f:
                    is_perf = f.read().strip() == "perf"
                with open(f"{me}/task/{self.perf_pid}/children") as f:
                    kids = f.read().split()
            except OSError:
                return None
            if is_perf and kids:
                return int(kids[0])
            time.sleep(0.002)
        return None

    def run(self) -> None:
        pid = self._workload()
        if pid is not None:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                pidfd = -1
            if pidfd >= 0:
                p = select.poll()
                p.register(pidfd, select.POLLIN)
                while not self.stop.is_set() and not p.poll(100):
                    pass
                os.close(pidfd)
        while not self.stop.wait(self.every):
            wake_once()
            self.wakes += 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "split":
        sys.exit(_split_main(sys.argv[2], int(sys.argv[3])))
    sys.exit("usage: perfns.py split PATH GO_FD")
