"""The Intel PT packet layer: one packet's kind, fields and length from the trace bytes.

Follows perf's tools/perf/util/intel-pt-decoder/intel-pt-pkt-decoder.c
(intel_pt_get_packet and its per-packet readers) for what the Intel SDM vol. 3 ch. 33
"Trace packets" leaves to the decoder: the packet kinds in the order of perf's enum
intel_pt_pkt_type, the names perf prints for them, the zero (PAD) bytes a packet takes in
after it, and the block-item context that makes a BIP of a one-byte TNT's header. A dump
made here can so be compared line by line with ``perf report -D``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

U64 = (1 << 64) - 1

# packet kinds, in the order of perf's enum intel_pt_pkt_type
(
    BAD, PAD, TNT, TIP_PGD, TIP_PGE, TSC, TMA, MODE_EXEC, MODE_TSX, MTC, TIP, FUP, CYC,
    VMCS, PSB, PSBEND, CBR, TRACESTOP, PIP, OVF, MNT, PTWRITE, PTWRITE_IP, EXSTOP,
    EXSTOP_IP, MWAIT, PWRE, PWRX, BBP, BIP, BEP, BEP_IP, CFE, CFE_IP, EVD,
) = range(35)  # fmt: skip

# the names perf prints for them (perf report -D)
PACKET_NAMES = (
    "Bad Packet!", "PAD", "TNT", "TIP.PGD", "TIP.PGE", "TSC", "TMA", "MODE.Exec",
    "MODE.TSX", "MTC", "TIP", "FUP", "CYC", "VMCS", "PSB", "PSBEND", "CBR", "TraceSTOP",
    "PIP", "OVF", "MNT", "PTWRITE", "PTWRITE", "EXSTOP", "EXSTOP", "MWAIT", "PWRE",
    "PWRX", "BBP", "BIP", "BEP", "BEP", "CFE", "CFE", "EVD",
)  # fmt: skip

PSB_BYTES = b"\x02\x82" * 8
NEED_MORE = -1  # the packet runs past the end of the data
BAD_PACKET = -2

# block-item contexts: a BIP packet's header byte is a one-byte TNT's outside a block
NO_CTX, BLK_4_CTX, BLK_8_CTX = 0, 1, 2

# IP bytes of a TIP/FUP/TIP.PGE/TIP.PGD packet by its IPBytes field (count); None: reserved
_IP_LEN: tuple[int | None, ...] = (0, 2, 4, 6, 6, None, 8, None)

# packets after which a block item can no longer follow (perf's intel_pt_upd_pkt_ctx)
_ENDS_BLOCK = frozenset(
    (TNT, TIP, TIP_PGD, TIP_PGE, MODE_EXEC, MODE_TSX, PIP, OVF, VMCS, TRACESTOP, PSB,
     PSBEND, PTWRITE, PTWRITE_IP, MWAIT, BEP, BEP_IP, CFE, CFE_IP, EVD)
)  # fmt: skip


def _le(buf: bytes, start: int, n: int) -> int:
    return int.from_bytes(buf[start : start + n], "little")


def _ext(buf: bytes, i: int, n: int) -> tuple[int, int, int, int]:
    """An extended packet (first byte 0x02) at buf[i]: (kind, count, payload, length)."""
    if n - i < 2:
        return BAD, 0, 0, NEED_MORE
    b1 = buf[i + 1]
    left = n - i
    if b1 & 0x1F == 0x12:  # PTWRITE: payload of 4 or 8 bytes, IP bit 7
        kind = PTWRITE_IP if b1 & 0x80 else PTWRITE
        size = (b1 >> 5) & 3
        if size > 1:
            return BAD, 0, 0, BAD_PACKET
        length = 6 if size == 0 else 10
        if left < length:
            return BAD, 0, 0, NEED_MORE
        return kind, size, _le(buf, i + 2, length - 2), length
    fixed = _EXT_FIXED.get(b1)
    if fixed is not None:
        kind, length = fixed
        if left < length:
            return BAD, 0, 0, NEED_MORE
        if kind == TNT:  # long TNT: 47 bits below a stop bit in bytes 2..7
            bits = _le(buf, i + 2, 6)
            count = bits.bit_length() - 1 if bits else 0
            return TNT, count, (bits << (64 - count)) & U64 if count else 0, 8
        if kind == PIP:
            return PIP, 0, _le(buf, i + 2, 6), 8
        if kind == CBR or kind == PWRE:
            return kind, 0, _le(buf, i + 2, 2), 4
        if kind == VMCS or kind == PWRX:
            return kind, 0, _le(buf, i + 2, 5), 7
        if kind == TMA:  # CTC[15:0] in bytes 2-3, FastCounter in byte 5 and bit 0 of 6
            return TMA, buf[i + 5] | (buf[i + 6] & 1) << 8, buf[i + 2] | buf[i + 3] << 8, 7
        if kind == MWAIT:
            return MWAIT, 0, _le(buf, i + 2, 8), 10
        if kind == BBP:
            b2 = buf[i + 2]
            return BBP, b2 >> 7, b2 & 0x1F, 3
        if kind == CFE:
            b2 = buf[i + 2]
            return CFE_IP if b2 & 0x80 else CFE, b2 & 0x1F, buf[i + 3], 4
        if kind == EVD:
            return EVD, buf[i + 2] & 0x3F, _le(buf, i + 3, 8), 11
        return kind, 0, 0, length  # PSB is checked by the caller
    if b1 == 0xC3:  # 3-byte header: MNT
        if left < 3:
            return BAD, 0, 0, NEED_MORE
        if buf[i + 2] != 0x88:
            return BAD, 0, 0, BAD_PACKET
        if left < 11:
            return BAD, 0, 0, NEED_MORE
        return MNT, 0, _le(buf, i + 3, 8), 11
    return BAD, 0, 0, BAD_PACKET


# second byte of an extended packet -> (kind, length)
_EXT_FIXED = {
    0xA3: (TNT, 8), 0x43: (PIP, 8), 0x83: (TRACESTOP, 2), 0x03: (CBR, 4), 0xC8: (VMCS, 7),
    0xF3: (OVF, 2), 0x82: (PSB, 16), 0x23: (PSBEND, 2), 0x73: (TMA, 7), 0x62: (EXSTOP, 2),
    0xE2: (EXSTOP_IP, 2), 0xC2: (MWAIT, 10), 0x22: (PWRE, 4), 0xA2: (PWRX, 7),
    0x63: (BBP, 3), 0x33: (BEP, 2), 0xB3: (BEP_IP, 2), 0x13: (CFE, 4), 0x53: (EVD, 11),
}  # fmt: skip

_IP_KINDS = {0x0D: TIP, 0x11: TIP_PGE, 0x01: TIP_PGD, 0x1D: FUP}
_MODE_EXEC_BITS = (16, 64, 32, None)


def _packet(buf: bytes, i: int, n: int, ctx: int) -> tuple[int, int, int, int]:
    """The packet at buf[i] (data up to n): (kind, count, payload, length or NEED_MORE/BAD)."""
    if i >= n:
        return BAD, 0, 0, NEED_MORE
    b = buf[i]
    if ctx and b & 7 == 4:  # BIP inside a block (BBP .. BEP)
        length = 5 if ctx == BLK_4_CTX else 9
        if n - i < length:
            return BAD, 0, 0, NEED_MORE
        return BIP, b >> 3, _le(buf, i + 1, length - 1), length
    if not b & 1:
        if b == 0:
            return PAD, 0, 0, 1
        if b == 2:
            kind, count, payload, length = _ext(buf, i, n)
            if kind == PSB and buf[i : i + 16] != PSB_BYTES:
                return BAD, 0, 0, BAD_PACKET
            return kind, count, payload, length
        count = b.bit_length() - 2  # short TNT: up to 6 bits below a stop bit
        bits = (b >> 1) & ((1 << count) - 1)
        return TNT, count, (bits << (64 - count)) & U64 if count else 0, 1
    if b & 2:  # CYC: 5 bits, then 7 bits a byte while bit 0 says more follow
        payload = b >> 3
        length = 1
        more = b & 4
        shift = 5
        while more:
            if length > 9:
                return BAD, 0, 0, BAD_PACKET
            if i + length >= n:
                return BAD, 0, 0, NEED_MORE
            c = buf[i + length]
            length += 1
            payload |= (c >> 1) << shift
            shift += 7
            more = c & 1
        return CYC, 0, payload, length
    ip_kind = _IP_KINDS.get(b & 0x1F)
    if ip_kind is not None:
        count = b >> 5
        iplen = _IP_LEN[count]
        if iplen is None:
            return BAD, 0, 0, BAD_PACKET
        if n - i < iplen + 1:
            return BAD, 0, 0, NEED_MORE
        return ip_kind, count, _le(buf, i + 1, iplen) if iplen else 0, iplen + 1
    if b == 0x19:
        if n - i < 8:
            return BAD, 0, 0, NEED_MORE
        return TSC, 0, _le(buf, i + 1, 7), 8
    if b == 0x59:
        if n - i < 2:
            return BAD, 0, 0, NEED_MORE
        return MTC, 0, buf[i + 1], 2
    if b == 0x99:
        if n - i < 2:
            return BAD, 0, 0, NEED_MORE
        b1 = buf[i + 1]
        if b1 >> 5 == 0:
            width = _MODE_EXEC_BITS[b1 & 3]
            if width is None:
                return BAD, 0, 0, BAD_PACKET
            return MODE_EXEC, b1, width, 2
        if b1 >> 5 == 1 and b1 & 3 != 3:
            return MODE_TSX, 0, b1 & 3, 2
        return BAD, 0, 0, BAD_PACKET
    return BAD, 0, 0, BAD_PACKET


def parse_packet(buf: bytes, i: int, n: int, ctx: int) -> tuple[int, int, int, int, int]:
    """The packet at buf[i]: (kind, count, payload, length, ctx after it).

    length is NEED_MORE or BAD_PACKET when there is no whole valid packet. Like perf, a
    packet takes in the zero (PAD) bytes after it up to 8 bytes in all."""
    kind, count, payload, length = _packet(buf, i, n, ctx)
    if length > 0:
        while length < 8 and i + length < n and not buf[i + length]:
            length += 1
        if kind in _ENDS_BLOCK:
            ctx = NO_CTX
        elif kind == BBP:
            ctx = BLK_4_CTX if count else BLK_8_CTX
    return kind, count, payload, length, ctx


class Packet(NamedTuple):
    offset: int
    length: int
    kind: int
    cnt: int  # perf's packet.count: IPBytes, TNT bits, MODE.Exec byte, TMA's FC ...
    payload: int

    @property
    def name(self) -> str:
        return PACKET_NAMES[self.kind]


def packets(data: bytes) -> Iterator[Packet]:
    """Every packet of a trace buffer in order, as perf's dump reads it (perf report -D):
    a byte that starts no valid packet is a one-byte BAD packet."""
    i = 0
    n = len(data)
    ctx = NO_CTX
    while i < n:
        kind, count, payload, length, ctx = parse_packet(data, i, n, ctx)
        if length <= 0:
            yield Packet(i, 1, BAD, 0, 0)
            i += 1
            continue
        yield Packet(i, length, kind, count, payload)
        i += length
