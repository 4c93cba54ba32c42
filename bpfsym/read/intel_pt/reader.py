"""The Intel PT decoder's view of the trace data: one queue's buffers read packet by packet.

Follows perf's tools/perf/util/intel-pt-decoder/intel-pt-decoder.c: intel_pt_get_data (the
next buffer; only the first does not continue the last, there being no snapshots),
intel_pt_get_next_packet (PAD skipped; a bad packet, or one cut by the end of a buffer as
64-bit perf cuts it, is one byte), intel_pt_pkt_lookahead, intel_pt_scan_for_psb and
intel_pt_get_split_psb (a PSB split between two buffers made whole).
"""

from __future__ import annotations

from collections.abc import Callable

from bpfsym.read.intel_pt.packet import BAD, NO_CTX, PAD, PSB_BYTES, parse_packet
from bpfsym.read.intel_pt.state import EBADMSG, ENODATA, ENOLINK, OK, Buffer


class PacketReader:
    """The packet the decoder stands on (kind, count, payload; pos, its offset in the
    queue's data) and the ones after it.

    restart(reference) is called at the first buffer, bad_packet() at a byte that starts
    no valid packet: what they reset is the decoder's, not the reader's."""

    def __init__(
        self, buffers: Callable[[], Buffer | None], restart: Callable[[int], None],
        bad_packet: Callable[[], None],
    ) -> None:  # fmt: skip
        self.next_buffer = buffers
        self.restart = restart
        self.bad_packet = bad_packet
        # the data: buf[at:end] is what is left of the current buffer
        self.buf = b""
        self.at = 0
        self.end = 0
        self.pending: tuple[bytes, int, int] | None = None  # next_buf of a split PSB
        self.started = False
        self.reference = 0  # the current buffer's (Buffer.reference)
        self.pos = 0
        self.step = 0  # the current packet's length: where the next one starts
        self.ctx = NO_CTX
        self.kind = PAD
        self.count = 0
        self.payload = 0
        self.last_packet_type = PAD

    def get_data(self) -> int:
        """The next buffer (intel_pt_get_data): ENOLINK when it does not continue the last."""
        self.step = 0
        if self.pending is not None:
            self.buf, self.at, self.end = self.pending
            self.pending = None
            return OK
        b = self.next_buffer()
        if b is None or not b.data:
            return ENODATA
        self.buf, self.at, self.end = b.data, 0, len(b.data)
        self.reference = b.reference
        if not self.started:  # only the first buffer is not consecutive (no snapshots)
            self.started = True
            self.restart(b.reference)
            return ENOLINK
        return OK

    def next_packet(self) -> int:
        """Move to the next packet that is not PAD (intel_pt_get_next_packet)."""
        self.last_packet_type = self.kind
        while True:
            self.pos += self.step
            self.at += self.step
            if self.at >= self.end:
                err = self.get_data()
                if err:
                    return err
            kind, count, payload, length, self.ctx = parse_packet(
                self.buf, self.at, self.end, self.ctx
            )
            if length <= 0:  # also a packet cut by the end of a buffer (64-bit perf)
                self.bad_packet()
                self.kind, self.count, self.payload = BAD, 0, 0
                self.step = 1
                return EBADMSG  # the state stays (non-strict perf)
            self.kind, self.count, self.payload = kind, count, payload
            self.step = length
            if kind != PAD:
                return OK

    def lookahead(self, cb: Callable[[int, int, int, int], bool]) -> None:
        """Show cb (kind, count, payload, last kind) the packets after this one in the
        current buffer until it returns True (intel_pt_pkt_lookahead)."""
        buf, i, n, ctx = self.buf, self.at + self.step, self.end, self.ctx
        last = self.last_packet_type
        while i < n:
            kind, count, payload, length, ctx = parse_packet(buf, i, n, ctx)
            if length <= 0:
                return
            i += length
            if kind == PAD:
                continue
            if cb(kind, count, payload, last):
                return
            last = kind

    def scan_for_psb(self) -> int:
        """Skip to the next PSB, across buffers (intel_pt_scan_for_psb)."""
        while True:
            if self.at >= self.end:
                err = self.get_data()
                if err:
                    return err
            j = self.buf.find(PSB_BYTES, self.at, self.end)
            if j < 0:
                part = self._part_psb()
                if part:
                    err = self._split_psb(part)
                    if err:
                        return err
                else:
                    self.pos += self.end - self.at
                    self.at = self.end
                continue
            self.step = j - self.at
            return self.next_packet()

    def _part_psb(self) -> int:
        """How many bytes at the end of the buffer start a PSB."""
        left = self.end - self.at
        for k in range(len(PSB_BYTES) - 1, 0, -1):
            if k <= left and self.buf[self.end - k : self.end] == PSB_BYTES[:k]:
                return k
        return 0

    def _split_psb(self, part: int) -> int:
        """A PSB split between two buffers, made whole (intel_pt_get_split_psb)."""
        self.pos += self.end - self.at
        self.at = self.end
        err = self.get_data()
        if err:
            return err
        rest = len(PSB_BYTES) - part
        if self.end - self.at < rest or self.buf[self.at : self.at + rest] != PSB_BYTES[part:]:
            return OK
        self.pos -= part
        self.pending = (self.buf, self.at + rest, self.end)
        self.buf, self.at, self.end = PSB_BYTES, 0, len(PSB_BYTES)
        return OK
