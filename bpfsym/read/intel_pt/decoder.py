"""The Intel PT decoder of one queue: getting in sync, and the step-by-step decode.

Follows perf's tools/perf/util/intel-pt-decoder/intel-pt-decoder.c intel_pt_decode (one
decoded state per call, by the decoder's packet state), and its synchronisation:
intel_pt_sync (scan for a PSB, then intel_pt_walk_psb), intel_pt_sync_ip and
intel_pt_walk_to_ip (packets up to one that gives a full IP, after an error or an
overflow). The decoder is composed of the parts of perf's one struct intel_pt_decoder:
PacketReader (the data), Timing (the timestamp), Flow (the control-flow state and the
walker that has no code) and Walker (the walks once in sync).
"""

from __future__ import annotations

from collections.abc import Callable

from bpfsym.read.intel_pt.flow import Flow
from bpfsym.read.intel_pt.packet import (
    BAD,
    BBP,
    BEP,
    BEP_IP,
    BIP,
    CFE,
    CFE_IP,
    EVD,
    EXSTOP,
    EXSTOP_IP,
    FUP,
    MODE_EXEC,
    MODE_TSX,
    MWAIT,
    OVF,
    PIP,
    PSB,
    PSBEND,
    PTWRITE,
    PTWRITE_IP,
    PWRE,
    PWRX,
    TIP,
    TIP_PGD,
    TIP_PGE,
    TNT,
    TRACESTOP,
)
from bpfsym.read.intel_pt.reader import PacketReader
from bpfsym.read.intel_pt.state import (
    EAGAIN,
    ENOENT,
    ENOLINK,
    ENOSYS,
    EOVERFLOW,
    ERR_CODES,
    ERR_RESYNC,
    ERR_UNKNOWN,
    FUP_NO_TIP,
    IN_SYNC,
    IN_TX,
    NO_IP,
    NO_PSB,
    OK,
    S_FUP,
    S_TIP,
    S_TIP_PGD,
    S_TNT,
    T_BRANCH,
    T_CBR_CHG,
    T_PSB_EVT,
    T_TRACE_BEGIN,
    T_TRACE_END,
    TNT_CONT,
    Buffer,
    DecoderParams,
    State,
)
from bpfsym.read.intel_pt.timing import TIMING_KINDS, Timing
from bpfsym.read.intel_pt.walk import Walker

# states whose decode updates the sample time (intel_pt_sample_time)
_SAMPLE_TIME_STATES = frozenset((NO_PSB, NO_IP, ERR_RESYNC, IN_SYNC, TNT_CONT))

# packets that cannot be in the PSB+ being synced on (intel_pt_walk_psb)
_UNEXPECTED_SYNCING = frozenset(
    (TIP_PGD, TIP_PGE, TIP, PTWRITE, PTWRITE_IP, EXSTOP, EXSTOP_IP, MWAIT, PWRE, PWRX,
     BBP, BIP, BEP, BEP_IP, CFE, CFE_IP, EVD)
)  # fmt: skip


class Decoder:
    """perf's packet-driven decoder for one queue, with a code walker that has no code.

    buffers() gives the queue's next buffer (None at the end); walk_fails(ip) says how a
    walk starting at ip fails: True an error perf reports, False the silent retry perf
    makes once the binary there has failed before."""

    def __init__(
        self, params: DecoderParams, buffers: Callable[[], Buffer | None],
        walk_fails: Callable[[int], bool],
    ) -> None:  # fmt: skip
        self.reader = PacketReader(buffers, self._restart, self._bad_packet)
        self.timing = Timing(params, self.reader)
        self.flow = Flow(params, self.reader, self.timing, walk_fails)
        self.walker = Walker(self.reader, self.timing, self.flow)
        self.state = self.flow.state

    def _restart(self, reference: int) -> None:
        self.flow.restart()
        self.timing.restart(reference)

    def _bad_packet(self) -> None:
        self.flow.tx_flags = 0
        self.timing.have_tma = False

    # -- getting in sync --

    def _walk_psb(self) -> int:
        """The packets of a PSB+ to get in sync (intel_pt_walk_psb)."""
        rd, tm, fl = self.reader, self.timing, self.flow
        fl.in_psb = True
        try:
            while True:
                err = rd.next_packet()
                if err:
                    return err
                k = rd.kind
                if k == TIP_PGD:
                    tm.continuous_period = False
                if k in _UNEXPECTED_SYNCING:
                    return ENOENT
                if k == FUP:
                    fl.pge = True
                    if fl.have_ip():
                        fl.set_ip()
                        fl.psb_ip = fl.ip
                    continue
                if k in TIMING_KINDS:
                    tm.take(k)
                    continue
                if k == PIP:
                    fl.set_pip()
                elif k == MODE_EXEC:
                    fl.mode_exec_status()
                elif k == MODE_TSX:
                    fl.tx_flags = rd.payload & IN_TX
                elif k == TRACESTOP or k == TNT:
                    if k == TRACESTOP:
                        fl.pge = False
                        tm.continuous_period = False
                        fl.tx_flags = 0
                    tm.have_tma = False
                    fl.pkt_state = IN_SYNC if fl.ip else ERR_RESYNC
                    return ENOENT
                elif k == BAD:
                    fl.pkt_state = NO_PSB
                    return ENOSYS
                elif k == OVF:
                    return fl.ovf()
                elif k == PSBEND:
                    return OK
        finally:
            fl.in_psb = False

    def _walk_to_ip(self) -> int:
        """Packets up to one that gives a full IP (intel_pt_walk_to_ip)."""
        rd, tm, fl = self.reader, self.timing, self.flow
        s = fl.state
        next_packet = rd.next_packet
        while True:
            err = next_packet()
            if err:
                return err
            k = rd.kind
            if k == TIP_PGD:
                tm.continuous_period = False
                fl.pge = False
                if fl.have_ip():
                    fl.set_ip()
                if not fl.ip:
                    continue
                s.type |= T_TRACE_END
                return OK
            if k == TIP_PGE or k == TIP:
                fl.pge = True
                if fl.have_ip():
                    fl.set_ip()
                if not fl.ip:
                    continue
                if k == TIP_PGE:
                    s.type |= T_TRACE_BEGIN
                return OK
            if k == FUP:
                if fl.have_ip():
                    fl.set_ip()
                if fl.ip:
                    return OK
                continue
            if k in TIMING_KINDS:
                tm.take(k)
                continue
            if k == PIP:
                fl.set_pip()
            elif k == MODE_EXEC:
                fl.mode_exec_status()
            elif k == MODE_TSX:
                fl.tx_flags = rd.payload & IN_TX
            elif k == OVF:
                return fl.ovf()
            elif k == BAD:
                fl.pkt_state = NO_PSB
                return ENOSYS
            elif k == TRACESTOP:
                fl.pge = False
                tm.continuous_period = False
                fl.tx_flags = 0
                tm.have_tma = False
            elif k == PSB:
                s.psb_offset = rd.pos
                fl.psb_ip = 0
                fl.last_ip = 0
                fl.have_last_ip = True
                err = self._walk_psb()
                if err:
                    return err
                s.type = T_PSB_EVT
                s.from_ip = fl.psb_ip
                s.to_ip = 0
                return OK

    def _sync_ip(self) -> int:
        fl = self.flow
        fl.clear_fup_event()
        fl.overflow = False
        s = fl.state
        if not fl.branch_enable:
            fl.pkt_state = IN_SYNC
            s.type = 0
            return OK
        err = self._walk_to_ip()
        if err or (s.type & T_PSB_EVT and not fl.ip):
            return err
        fl.pkt_state = IN_SYNC
        s.from_ip = 0
        s.to_ip = fl.ip
        return OK

    def _sync(self) -> int:
        fl = self.flow
        fl.pge = False
        self.timing.continuous_period = False
        fl.have_last_ip = False
        fl.last_ip = 0
        fl.psb_ip = 0
        fl.ip = 0
        err = self.reader.scan_for_psb()
        if err:
            return err
        fl.have_last_ip = True
        fl.pkt_state = IN_SYNC
        err = self._walk_psb()
        if err:
            return err
        s = fl.state
        s.type = T_PSB_EVT
        s.from_ip = fl.psb_ip
        s.to_ip = 0
        return OK

    # -- the decode --

    def decode(self) -> State:
        """The next state (intel_pt_decode); state.err set on an error."""
        tm, fl, walker = self.timing, self.flow, self.walker
        s = self.state
        while True:
            s.type = T_BRANCH
            s.flags = 0
            ps = fl.pkt_state
            if ps == NO_PSB:
                err = self._sync()
            elif ps == NO_IP or ps == ERR_RESYNC:
                if ps == NO_IP:
                    fl.have_last_ip = False
                    fl.last_ip = 0
                    fl.ip = 0
                err = self._sync_ip()
            elif ps == IN_SYNC:
                err = walker.walk_trace()
            elif ps == S_TNT or ps == TNT_CONT or ps == S_TIP or ps == S_TIP_PGD:
                err = fl.walk(0)
            elif ps == S_FUP:
                err = walker.walk_fup()
                if err == EAGAIN:
                    err = walker.walk_fup_tip()
            elif ps == FUP_NO_TIP:
                err = walker.walk_fup()
                if err == EAGAIN:
                    err = walker.walk_trace()
            else:  # FUP_IN_PSB
                err = walker.fup_in_psb()
            if err != ENOLINK:
                break
        if err:
            s.err = ERR_CODES.get(err, ERR_UNKNOWN)
            if err != EOVERFLOW:
                s.from_ip = fl.ip
            tm.sample_timestamp = tm.timestamp
            fl.set_nr()
        else:
            s.err = 0
            if tm.cbr != tm.cbr_seen:
                tm.cbr_seen = tm.cbr
                if not s.type:
                    s.from_ip = fl.ip
                    s.to_ip = 0
                s.type |= T_CBR_CHG
                s.cbr_payload = tm.cbr_payload
                s.cbr = tm.cbr
            if fl.pkt_state in _SAMPLE_TIME_STATES:
                tm.sample_timestamp = tm.timestamp
        if s.type & T_PSB_EVT and tm.tsc_timestamp:
            tm.sample_timestamp = tm.tsc_timestamp  # a PSB event has its TSC's time
        s.from_nr = fl.nr
        s.to_nr = fl.next_nr
        fl.nr = fl.next_nr
        s.timestamp = tm.sample_timestamp
        # perf adds 2 TSC ticks per instruction walked since the timestamp: none here
        s.est_timestamp = tm.sample_timestamp
        return s
