"""Why a user stack stopped unwinding: the reasons the report counts, and the errors."""

from __future__ import annotations

# perf report's max_stack default: kernel.perf_event_max_stack (PERF_MAX_STACK_DEPTH, 127);
# unwind-libunwind-local.c counts the leaf among them
MAX_FRAMES = 127

# why unwinding stopped early: the report counts samples by these (the detail says more)
NO_REGS = "no user registers in the sample"

ABI_32 = "32-bit user registers (not unwound)"

NO_STACK = "no user stack copy in the sample"

NO_MAP = "address outside every memory map"

NO_BINARY = "binary missing"

NO_CFI = "no CFI for the address"

BAD_CFI = "CFI unreadable"

TRUNCATED = "stack copy truncated"

OUTSIDE = "read outside the stack copy"

NO_REGISTER = "register not recoverable"

NO_PROGRESS = "unwinding does not progress"

FRAME_LIMIT = "frame limit"

UNSUPPORTED = "unsupported CFI rule"


class UnwindError(Exception):
    """A caller's mistake (unknown architecture, malformed sample); bad stack data never
    raises: it ends the unwinding with a reason."""


class _Stop(Exception):
    """Ends one unwinding: reason (a constant above) and detail."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail
