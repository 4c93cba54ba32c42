"""DWARF expressions as CFI uses them (DW_CFA_def_cfa_expression, DW_CFA_expression,
DW_CFA_val_expression): a bounded stack machine over the sampled registers and stack."""

from __future__ import annotations

import struct
from collections.abc import Callable

from bpfsym.formats import integers
from bpfsym.symbolize.unwind_stops import (
    NO_REGISTER,
    OUTSIDE,
    TRUNCATED,
    UNSUPPORTED,
    _Stop,
)

# DWARF expressions are run for at most this many operations (DW_OP_skip/bra can loop)
MAX_EXPR_STEPS = 256

_MASK = (1 << 64) - 1


def _uleb(b: bytes, pos: int) -> tuple[int, int]:
    val = shift = 0
    while True:
        if pos >= len(b):
            raise _Stop(UNSUPPORTED, "LEB128 runs past the expression")
        c = b[pos]
        pos += 1
        val |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return val, pos
        if shift > 70:
            raise _Stop(UNSUPPORTED, "LEB128 too long")


def _sleb(b: bytes, pos: int) -> tuple[int, int]:
    start = pos
    val, pos = _uleb(b, pos)
    bits = 7 * (pos - start)
    if b[pos - 1] & 0x40:
        val -= 1 << bits
    return val, pos


_CONST = {0x08: (1, "B"), 0x09: (1, "b"), 0x0A: (2, "H"), 0x0B: (2, "h"), 0x0C: (4, "I"),
          0x0D: (4, "i"), 0x0E: (8, "Q"), 0x0F: (8, "q")}  # fmt: skip


def _signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


# where a register's value comes from, for the memo of whole unwindings (Unwinder.unwind):
# an offset into the stack copy (>= 0), or
SRC_SAMPLE = -1  # the sample's own register: a walk that uses it is not memoized

SRC_KNOWN = -2  # fixed by the memo's key (pc, sp) and the stack words it compares


class _Frame:
    """The state of one unwinding: registers, the stack copy, and what the walk used of
    them (the stack words and registers its result depends on)."""

    __slots__ = ("regs", "src", "needed", "pure", "stack", "base", "end", "u64", "little")

    def __init__(
        self, regs: list[int | None], src: list[int], stack: bytes, base: int, little: bool
    ) -> None:
        self.regs = regs
        self.src = src  # per register: SRC_* or the stack offset its value was read from
        self.needed: set[int] = set()  # offsets of the stack words the result depends on
        self.pure = True  # the result depends on no sampled register but pc and sp
        self.stack = stack
        self.base = base
        self.end = base + len(stack)
        self.u64 = integers(little).u64.unpack_from
        self.little = little

    def use(self, n: int) -> None:
        """Register n's value decides the result."""
        s = self.src[n]
        if s >= 0:
            self.needed.add(s)
        elif s == SRC_SAMPLE:
            self.pure = False

    def read(self, addr: int, size: int = 8) -> int:
        off = addr - self.base
        if 0 <= off and off + size <= len(self.stack):
            if size == 8:
                self.needed.add(off)
                return int(self.u64(self.stack, off)[0])
            self.pure = False
            return int.from_bytes(self.stack[off : off + size], "little" if self.little else "big")
        if off >= 0 and addr - self.end < (1 << 20):
            # a frame above the copy: the sample's stack size (--call-graph dwarf,SIZE) ended it
            raise _Stop(TRUNCATED, f"{len(self.stack)} bytes copied, {addr:#x} wanted")
        raise _Stop(OUTSIDE, f"{addr:#x} is outside the copy at {self.base:#x}")

    def reg(self, n: int) -> int:
        v = self.regs[n] if 0 <= n < len(self.regs) else None
        if v is None:
            raise _Stop(NO_REGISTER, f"DWARF register {n}")
        self.use(n)
        return v

    def expr(self, code: bytes, stack: list[int]) -> int:
        """Run a DWARF expression (DWARF 5 section 2.5) and give the top of its stack."""
        pos = 0
        n = len(code)
        steps = 0
        while pos < n:
            steps += 1
            if steps > MAX_EXPR_STEPS or len(stack) > 64:
                raise _Stop(UNSUPPORTED, "DWARF expression does not end")
            op = code[pos]
            pos += 1
            if 0x30 <= op <= 0x4F:  # DW_OP_lit0..31
                stack.append(op - 0x30)
            elif 0x70 <= op <= 0x8F:  # DW_OP_breg0..31
                off, pos = _sleb(code, pos)
                stack.append((self.reg(op - 0x70) + off) & _MASK)
            elif op == 0x92:  # DW_OP_bregx
                r, pos = _uleb(code, pos)
                off, pos = _sleb(code, pos)
                stack.append((self.reg(r) + off) & _MASK)
            elif op in _CONST:
                size, fmt = _CONST[op]
                if pos + size > n:
                    raise _Stop(UNSUPPORTED, "constant runs past the expression")
                e = "<" if self.little else ">"
                stack.append(struct.unpack_from(e + fmt, code, pos)[0] & _MASK)
                pos += size
            elif op == 0x10:  # DW_OP_constu
                v, pos = _uleb(code, pos)
                stack.append(v & _MASK)
            elif op == 0x11:  # DW_OP_consts
                v, pos = _sleb(code, pos)
                stack.append(v & _MASK)
            elif op == 0x23:  # DW_OP_plus_uconst
                v, pos = _uleb(code, pos)
                stack.append((self._pop(stack) + v) & _MASK)
            elif op == 0x06:  # DW_OP_deref
                stack.append(self.read(self._pop(stack)))
            elif op == 0x94:  # DW_OP_deref_size
                if pos >= n:
                    raise _Stop(UNSUPPORTED, "deref_size without a size")
                size = code[pos]
                pos += 1
                if not 1 <= size <= 8:
                    raise _Stop(UNSUPPORTED, f"deref_size {size}")
                stack.append(self.read(self._pop(stack), size))
            elif op == 0x12:  # DW_OP_dup
                stack.append(self._pick(stack, 0))
            elif op == 0x13:  # DW_OP_drop
                self._pop(stack)
            elif op == 0x14:  # DW_OP_over
                stack.append(self._pick(stack, 1))
            elif op == 0x15:  # DW_OP_pick
                if pos >= n:
                    raise _Stop(UNSUPPORTED, "pick without an index")
                stack.append(self._pick(stack, code[pos]))
                pos += 1
            elif op == 0x16:  # DW_OP_swap
                a, b = self._pop(stack), self._pop(stack)
                stack += [a, b]
            elif op == 0x17:  # DW_OP_rot
                a, b, c = self._pop(stack), self._pop(stack), self._pop(stack)
                stack += [a, c, b]
            elif op == 0x2F:  # DW_OP_skip
                if pos + 2 > n:
                    raise _Stop(UNSUPPORTED, "skip runs past the expression")
                pos += 2 + struct.unpack_from("<h" if self.little else ">h", code, pos)[0]
                if not 0 <= pos <= n:
                    raise _Stop(UNSUPPORTED, "skip out of the expression")
            elif op == 0x28:  # DW_OP_bra
                if pos + 2 > n:
                    raise _Stop(UNSUPPORTED, "bra runs past the expression")
                delta = struct.unpack_from("<h" if self.little else ">h", code, pos)[0]
                pos += 2
                if self._pop(stack):
                    pos += delta
                    if not 0 <= pos <= n:
                        raise _Stop(UNSUPPORTED, "bra out of the expression")
            elif op == 0x96:  # DW_OP_nop
                pass
            elif op in _UNARY:
                stack.append(_UNARY[op](self._pop(stack)) & _MASK)
            elif op in _BINARY:
                b, a = self._pop(stack), self._pop(stack)
                stack.append(_BINARY[op](a, b) & _MASK)
            else:
                raise _Stop(UNSUPPORTED, f"DWARF expression op {op:#x}")
        if not stack:
            raise _Stop(UNSUPPORTED, "DWARF expression leaves no value")
        return stack[-1]

    @staticmethod
    def _pop(stack: list[int]) -> int:
        if not stack:
            raise _Stop(UNSUPPORTED, "DWARF expression stack underflow")
        return stack.pop()

    @staticmethod
    def _pick(stack: list[int], i: int) -> int:
        if i >= len(stack):
            raise _Stop(UNSUPPORTED, "DWARF expression stack underflow")
        return stack[-1 - i]


def _div(a: int, b: int) -> int:
    if b == 0:
        raise _Stop(UNSUPPORTED, "division by zero in a DWARF expression")
    q = abs(_signed(a)) // abs(_signed(b))
    return q if (_signed(a) < 0) == (_signed(b) < 0) else -q


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise _Stop(UNSUPPORTED, "division by zero in a DWARF expression")
    return a % b


_UNARY: dict[int, Callable[[int], int]] = {
    0x19: lambda a: abs(_signed(a)),  # abs
    0x1F: lambda a: -a,  # neg
    0x20: lambda a: ~a,  # not
}

_BINARY: dict[int, Callable[[int, int], int]] = {
    0x1A: lambda a, b: a & b,  # and
    0x1B: _div,  # div (signed)
    0x1C: lambda a, b: a - b,  # minus
    0x1D: _mod,  # mod
    0x1E: lambda a, b: a * b,  # mul
    0x21: lambda a, b: a | b,  # or
    0x22: lambda a, b: a + b,  # plus
    0x24: lambda a, b: a << b if b < 64 else 0,  # shl
    0x25: lambda a, b: a >> b if b < 64 else 0,  # shr
    0x26: lambda a, b: _signed(a) >> min(b, 63),  # shra
    0x27: lambda a, b: a ^ b,  # xor
    0x29: lambda a, b: int(a == b),  # eq
    0x2A: lambda a, b: int(_signed(a) >= _signed(b)),  # ge
    0x2B: lambda a, b: int(_signed(a) > _signed(b)),  # gt
    0x2C: lambda a, b: int(_signed(a) <= _signed(b)),  # le
    0x2D: lambda a, b: int(_signed(a) < _signed(b)),  # lt
    0x2E: lambda a, b: int(a != b),  # ne
}
