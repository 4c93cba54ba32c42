"""What a capture records besides side-band records: warnings for the sysctls that hide
BPF symbols or code, and one program's full info as a model.Program."""

from __future__ import annotations

import os

from bpfsym.live import progs
from bpfsym.model import ORIGIN_SNAPSHOT, Program
from bpfsym.read.proginfo import program_from_blobs


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
