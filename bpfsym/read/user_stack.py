"""PERF_SAMPLE_REGS_USER and PERF_SAMPLE_STACK_USER of `--call-graph dwarf` samples,
read from raw PERF_RECORD_SAMPLE records (include/uapi/linux/perf_event.h gives the field
order; the fields before them are skipped by their sizes)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bpfsym.formats import integers
from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.formats.perf import SAMPLE_PREFIX_ORDER


class UserStackError(ValueError):
    """A sample shorter than its user registers and stack say."""


# enum perf_sample_regs_abi (include/uapi/linux/perf_event.h)
REGS_ABI_NONE = 0

REGS_ABI_32 = 1

REGS_ABI_64 = 2


@dataclass
class UserStack:
    """PERF_SAMPLE_REGS_USER and PERF_SAMPLE_STACK_USER of one sample."""

    abi: int  # REGS_ABI_*: NONE when the task had no user state (kernel thread)
    regs: dict[int, int]  # perf register number -> value
    stack: bytes  # the dyn_size bytes the kernel copied, from regs[SP] up
    size: int  # bytes reserved in the record (attr.sample_stack_user, rounded)


class UserSampleLayout:
    """Where REGS_USER and STACK_USER sit in an event's samples.

    Made from the event's attr fields; ``extract`` reads one raw record. The fields
    before them (READ, CALLCHAIN, RAW, BRANCH_STACK) are skipped by their sizes, in
    the order of include/uapi/linux/perf_event.h (PERF_RECORD_SAMPLE).
    """

    def __init__(
        self,
        sample_type: int,
        read_format: int = 0,
        branch_sample_type: int = 0,
        regs_user: int = 0,
        little: bool = True,
    ) -> None:
        self.sample_type = sample_type
        self.read_format = read_format
        self.branch_sample_type = branch_sample_type
        self.mask = regs_user
        self.little = little
        ints = integers(little)
        self.u64 = ints.u64
        self.u32 = ints.u32
        self.prefix = 8 * sum(1 for b in SAMPLE_PREFIX_ORDER if sample_type & b)
        self.regnums = tuple(i for i in range(64) if regs_user >> i & 1)
        self.regs_struct = ints.array("Q", len(self.regnums))
        rf = read_format
        self.read_times = (rf & F.FORMAT_TOTAL_TIME_ENABLED != 0) + (
            rf & F.FORMAT_TOTAL_TIME_RUNNING != 0
        )
        self.read_per_value = 1 + (rf & F.FORMAT_ID != 0) + (rf & F.FORMAT_LOST != 0)
        self.wanted = bool(sample_type & K.SAMPLE_REGS_USER and sample_type & K.SAMPLE_STACK_USER)
        # the usual layout (no RAW, BRANCH_STACK or READ group before them): abi, the
        # registers and the stack's size in one unpack, after a callchain of any length
        self.simple = not (
            sample_type & (K.SAMPLE_RAW | K.SAMPLE_BRANCH_STACK)
            or sample_type & K.SAMPLE_READ
            and read_format & F.FORMAT_GROUP
        )
        self.read_fixed = (
            8 * (self.read_times + self.read_per_value) if sample_type & K.SAMPLE_READ else 0
        )
        self.head = ints.array("Q", len(self.regnums) + 2)  # abi, regs, stack size

    @classmethod
    def of(cls, ev: Any, little: bool) -> UserSampleLayout:
        """From a bpfsym.perfdata.EventAttr (its sample_type, read_format and attr)."""
        a = ev.attr
        return cls(
            int(ev.sample_type),
            int(ev.read_format),
            int(a.branch_sample_type),
            int(a.sample_regs_user),
            little,
        )

    def extract(self, buf: Any, start: int, size: int) -> UserStack | None:
        """The user registers and stack of the sample at buf[start:start+size] (header
        included), or None when the event samples neither. Raises UnwindError when the
        record is shorter than its fields say."""
        if not self.wanted:
            return None
        st = self.sample_type
        end = start + size
        pos = start + 8 + self.prefix
        u64 = self.u64.unpack_from
        if self.simple:  # the fast path of the common layout; the general one below
            at = pos + self.read_fixed
            head = self.head
            try:
                if st & K.SAMPLE_CALLCHAIN:
                    at += 8 + 8 * u64(buf, at)[0]
                if at + head.size + 8 <= end:
                    vals = head.unpack_from(buf, at)
                    abi = vals[0]
                    if abi != REGS_ABI_NONE:  # (else no registers: the layout differs)
                        reserved = vals[-1]
                        at += head.size
                        stack = b""
                        if reserved:
                            if at + reserved + 8 > end:
                                raise UserStackError(
                                    f"user stack of {reserved} bytes runs past the sample"
                                )
                            dyn = u64(buf, at + reserved)[0]
                            stack = bytes(buf[at : at + min(dyn, reserved)])
                        words = dict(zip(self.regnums, vals[1:-1], strict=True))
                        return UserStack(abi, words, stack, reserved)
            except (struct.error, OverflowError):
                pass  # the general path says what is wrong
        short = "sample of %d bytes ends inside its fields"
        try:
            if st & K.SAMPLE_READ:
                if self.read_format & F.FORMAT_GROUP:
                    nr = u64(buf, pos)[0]
                    pos += 8 * (1 + self.read_times + self.read_per_value * nr)
                else:
                    pos += 8 * (self.read_times + self.read_per_value)
            if st & K.SAMPLE_CALLCHAIN:
                pos += 8 + 8 * u64(buf, pos)[0]
            if st & K.SAMPLE_RAW:
                pos += 4 + self.u32.unpack_from(buf, pos)[0]
            if st & K.SAMPLE_BRANCH_STACK:
                nr = u64(buf, pos)[0]
                pos += 8 + (8 if self.branch_sample_type & F.BRANCH_HW_INDEX else 0) + 24 * nr
                if self.branch_sample_type & F.BRANCH_COUNTERS:
                    pos += 8 * nr
            if pos + 8 > end:
                raise UserStackError(short % size)
            abi = u64(buf, pos)[0]
            pos += 8
            regs: dict[int, int] = {}
            if abi != REGS_ABI_NONE:
                n = self.regs_struct.size
                if pos + n + 8 > end:
                    raise UserStackError(short % size)
                regs = dict(zip(self.regnums, self.regs_struct.unpack_from(buf, pos), strict=True))
                pos += n
            if pos + 8 > end:
                raise UserStackError(short % size)
            reserved = u64(buf, pos)[0]
            pos += 8
            stack = b""
            if reserved:
                if pos + reserved + 8 > end:
                    raise UserStackError(f"user stack of {reserved} bytes runs past the sample")
                dyn = u64(buf, pos + reserved)[0]
                stack = bytes(buf[pos : pos + min(dyn, reserved)])
        except (struct.error, OverflowError):  # an offset past the buffer (or past any
            # index: a count near 2**64): sizes that make no sense
            raise UserStackError(short % size) from None
        return UserStack(abi, regs, stack, reserved)


def regs_from_words(words: Sequence[int], mask: int) -> dict[int, int]:
    """perf register number -> value, for the words of a sample's regs in mask order."""
    nums = [i for i in range(64) if mask >> i & 1]
    if len(nums) != len(words):
        raise UserStackError(f"{len(words)} register words for a mask of {len(nums)} registers")
    return dict(zip(nums, words, strict=True))


def has_user_stacks(attrs: Sequence[Any], little: bool) -> bool:
    """Whether an event of a file samples user registers and stack (--call-graph dwarf):
    asked of every report -g, here with the layout, not with the unwinder that reads them."""
    return any(UserSampleLayout.of(a, little).wanted for a in attrs)
