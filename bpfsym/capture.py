"""What a capture reads from the running host besides side-band records:
the kernel part of /proc/kallsyms, the sysctls that hide BPF symbols or code,
machine identity, and one program's full info as a model.Program.
"""

from __future__ import annotations

import os
import platform
import socket

from bpfsym.hostsyms import host_boot_id
from bpfsym.live import progs
from bpfsym.model import ORIGIN_SNAPSHOT, Program
from bpfsym.proginfo import program_from_blobs

# sysctl -> (value that hides something, what it hides)
SYSCTLS = {
    "kernel.kptr_restrict": "kernel addresses in /proc/kallsyms read as 0 for non-root when >= 1, for all when 2",
    "kernel.perf_event_paranoid": "system-wide perf needs CAP_PERFMON when > 0",
    "net.core.bpf_jit_enable": "no JIT image (interpreter) when 0",
    "net.core.bpf_jit_harden": "JIT images with constant blinding when >= 1 (2: for root too)",
    "net.core.bpf_jit_kallsyms": "no bpf_prog_* kallsyms for non-root when 0",
}


def read_sysctls() -> dict[str, str]:
    out = {}
    for name in SYSCTLS:
        try:
            with open("/proc/sys/" + name.replace(".", "/")) as f:
                out[name] = f.read().strip()
        except OSError:
            out[name] = ""
    return out


def sysctl_warnings(values: dict[str, str]) -> list[str]:
    """What, on this host, hides BPF symbols or code from bpfsym (running as root)."""
    warn = []
    if values.get("kernel.kptr_restrict") == "2":
        warn.append("kernel.kptr_restrict=2: kallsyms addresses are hidden even from root")
    if values.get("net.core.bpf_jit_enable") == "0":
        warn.append("net.core.bpf_jit_enable=0: programs run interpreted, no JIT code to symbolize")
    if values.get("net.core.bpf_jit_harden") == "2":
        warn.append("net.core.bpf_jit_harden=2: JIT images are blinded, also for root")
    if (
        values.get("net.core.bpf_jit_kallsyms") == "0"
        and values.get("net.core.bpf_jit_harden", "0") != "0"
    ):
        warn.append("net.core.bpf_jit_kallsyms=0 with JIT hardening: no bpf_prog_* symbols")
    return warn


def bpf_image_symbols(path: str = "/proc/kallsyms") -> bytes:
    """The [bpf] symbols that are not programs: trampolines, dispatchers (bpf_trampoline_*,
    bpf_dispatcher_*). Reading the BPF part is slow with many programs: run it off the
    start-up path."""
    out = []
    with open(path, "rb") as f:
        for line in f:
            if line.endswith(b"\t[bpf]\n") and b" bpf_prog_" not in line:
                out.append(line)
    return b"".join(out)


def identity() -> dict[str, object]:
    u = platform.uname()
    return {
        "kernel_release": u.release,
        "arch": u.machine,
        "page_size": os.sysconf("SC_PAGE_SIZE"),
        "boot_id": host_boot_id(),
        "hostname": socket.gethostname(),
    }


def fetch_program(
    prog_id: int, origin: str = ORIGIN_SNAPSHOT, load_time: int | None = None
) -> Program:
    """One live program's full info as a Program (raises OSError when it is gone)."""
    fd = progs.fd_by_id(prog_id)
    try:
        got = progs.fetch_blobs(fd)
    finally:
        os.close(fd)
    return program_from_blobs(
        prog_id, got.blobs, origin=origin, load_time=load_time, missing=got.missing
    )
