"""Disassemble JIT images (x86-64, arm64) with capstone and name what they call and jump to.

Addresses are the kernel's: a function image is decoded at the address it was JIT-compiled
to, so relative calls resolve to the helper, kfunc, trampoline or BPF function they reached.
Targets inside the function become local labels; others are named from the capture: BPF
functions of any captured program by their kallsyms name, kernel text by the nearest kallsyms
symbol at or below the target (`name+0x1c`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass

import capstone

from bpfsym.annotate.ksyms import KernelNames
from bpfsym.model import KernelSymbol, Program

# a kernel function is never this long: a "nearest symbol" further away names nothing
MAX_SYMBOL_OFFSET = 0x10000

_ARCHES = {
    "x86_64": (capstone.CS_ARCH_X86, capstone.CS_MODE_64, 1),
    "aarch64": (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM, 4),
    "arm64": (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM, 4),
}
_X86_BRANCH = re.compile(r"^(call|jmp|j[a-z]{1,3}|loop[a-z]*|jrcxz|jecxz)$")
_ARM64_BRANCH = re.compile(r"^(b|bl|b\.[a-z]{2}|cbn?z|tbn?z)$")
_ARM64_IMM = re.compile(r"#(-?0x[0-9a-f]+|-?\d+)")


def supported(arch: str) -> bool:
    return arch in _ARCHES


@dataclass(frozen=True, slots=True)
class NativeInsn:
    """One machine instruction of a JIT image."""

    addr: int
    raw: bytes
    mnemonic: str
    op_str: str
    target: int | None = None  # address a direct branch/call (or arm64 mov+blr) goes to
    is_call: bool = False

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.op_str}".rstrip()


class SymbolTable:
    """Kernel symbols (sorted kallsyms, or their names already indexed) plus the BPF
    functions of the captured programs."""

    def __init__(
        self,
        kallsyms: Iterable[KernelSymbol] = (),
        programs: Iterable[Program] = (),
        kernel: KernelNames | None = None,
    ):
        self._kernel = kernel if kernel is not None else KernelNames(kallsyms)
        funcs = sorted({(f.addr, f.size, f.name) for p in programs for f in p.functions if f.addr})
        self._faddrs = [a for a, _, _ in funcs]
        self._funcs = funcs
        self._bpf_exact: dict[int, str] = {}
        for a, _, n in funcs:
            self._bpf_exact.setdefault(a, n)

    def address(self, name: str) -> int | None:
        """Address of a kernel symbol by name (first in kallsyms order)."""
        return self._kernel.find(name)

    def exact(self, addr: int) -> str | None:
        """The symbol starting exactly at addr (bpftool's lookup for call names): the
        kernel's, else a BPF function's."""
        name = self._kernel.first_at(addr)
        return name if name is not None else self._bpf_exact.get(addr)

    def bpf_function(self, addr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self._faddrs, addr) - 1
        if i >= 0:
            start, size, name = self._funcs[i]
            if addr < start + max(size, 1):
                return name, addr - start
        return None

    def kernel(self, addr: int) -> tuple[str, int] | None:
        hit = self._kernel.floor(addr)
        if hit is not None and addr - hit[0] < MAX_SYMBOL_OFFSET:
            return hit[1], addr - hit[0]
        return None

    def name(self, addr: int) -> str | None:
        """`name` or `name+0xoff` for any address: BPF functions first, then kernel text."""
        hit = self.bpf_function(addr) or self.kernel(addr)
        if hit is None:
            return None
        name, off = hit
        return f"{name}+{off:#x}" if off else name


def _cs(arch: str) -> capstone.Cs:
    if arch not in _ARCHES:
        raise ValueError(f"no disassembler for architecture {arch!r}")
    cs_arch, mode, _ = _ARCHES[arch]
    return capstone.Cs(cs_arch, mode)


def _parse_int(s: str) -> int | None:
    try:
        return int(s, 0)
    except ValueError:
        return None


def _x86_target(mnemonic: str, op_str: str) -> int | None:
    if _X86_BRANCH.match(mnemonic):
        return _parse_int(op_str)
    return None


class _Arm64Consts:
    """Tracks `mov/movz/movn xN, #imm` + `movk xN, #imm, lsl #s` so `blr xN` gets its target."""

    def __init__(self) -> None:
        self.regs: dict[str, int] = {}

    def step(self, mnemonic: str, op_str: str) -> int | None:
        ops = [o.strip() for o in op_str.split(",")]
        if mnemonic in ("mov", "movz") and len(ops) == 2 and ops[1].startswith("#"):
            v = _parse_int(ops[1][1:])
            if v is not None:
                self.regs[ops[0]] = v & 0xFFFFFFFFFFFFFFFF
                return None
        elif mnemonic == "movk" and len(ops) >= 2 and ops[0] in self.regs:
            v = _parse_int(ops[1][1:])
            shift = 0
            if len(ops) == 3 and ops[2].startswith("lsl #"):
                shift = _parse_int(ops[2][5:]) or 0
            if v is not None:
                old = self.regs[ops[0]]
                self.regs[ops[0]] = (old & ~(0xFFFF << shift)) | (v << shift)
                return None
        elif mnemonic in ("blr", "br") and len(ops) == 1:
            return self.regs.get(ops[0])
        if ops and ops[0] in self.regs:
            del self.regs[ops[0]]  # any other write to the register
        return None


def disassemble(image: bytes, addr: int, arch: str) -> list[NativeInsn]:
    """Every byte of image as instructions; undecodable bytes become `.byte` entries."""
    cs = _cs(arch)
    step = _ARCHES[arch][2]
    arm = _ARCHES[arch][0] == capstone.CS_ARCH_ARM64
    consts = _Arm64Consts()
    out: list[NativeInsn] = []
    pos = 0
    while pos < len(image):
        for a, size, mnemonic, op_str in cs.disasm_lite(image[pos:], addr + pos):
            raw = image[pos : pos + size]
            if arm:
                target = consts.step(mnemonic, op_str)
                if target is None and _ARM64_BRANCH.match(mnemonic):
                    imms = _ARM64_IMM.findall(op_str)
                    target = _parse_int(imms[-1]) if imms else None
                is_call = mnemonic in ("bl", "blr")
            else:
                target = _x86_target(mnemonic, op_str)
                is_call = mnemonic == "call"
            out.append(NativeInsn(a, raw, mnemonic, op_str, target, is_call))
            pos += size
        if pos < len(image):
            n = min(step, len(image) - pos)
            chunk = image[pos : pos + n]
            out.append(
                NativeInsn(addr + pos, chunk, ".byte", ", ".join(f"{b:#04x}" for b in chunk))
            )
            pos += n
    return out


def branch_targets(image: bytes, addr: int, arch: str) -> set[int]:
    """Addresses outside the image that its direct calls and jumps reach."""
    end = addr + len(image)
    return {
        i.target
        for i in disassemble(image, addr, arch)
        if i.target is not None and not addr <= i.target < end
    }


def target_names(
    insns: list[NativeInsn], addr: int, size: int, symbols: SymbolTable | None
) -> tuple[dict[int, str], dict[int, str]]:
    """(local labels by address, names of outside targets by address) for one function."""
    local = sorted(
        {i.target for i in insns if i.target is not None and addr <= i.target < addr + size}
    )
    labels = {t: f".L{n}" for n, t in enumerate(local)}
    outside: dict[int, str] = {}
    if symbols is not None:
        for i in insns:
            t = i.target
            if t is not None and t not in labels and t not in outside:
                name = symbols.name(t)
                if name is not None:
                    outside[t] = name
    return labels, outside
