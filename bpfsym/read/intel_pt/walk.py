"""The Intel PT decoder's walks once in sync: the packets up to the next decoded step.

Follows perf's tools/perf/util/intel-pt-decoder/intel-pt-decoder.c intel_pt_walk_trace and
the walks it hands over to: intel_pt_walk_fup and intel_pt_walk_fup_tip (a FUP and the TIP
that may follow it), intel_pt_walk_psbend (a PSB+ met in sync), intel_pt_psb_with_fup (a
PSB+ whose FUP is taken first) and the FUP_IN_PSB step of intel_pt_decode. TNT, TIP and
TIP.PGD hand over to the instruction walker (Flow.walk), which has no code to walk.
"""

from __future__ import annotations

from bpfsym.read.intel_pt.flow import Flow
from bpfsym.read.intel_pt.packet import (
    BAD,
    BBP,
    BEP,
    BEP_IP,
    BIP,
    CBR,
    CFE,
    CFE_IP,
    CYC,
    EVD,
    EXSTOP,
    EXSTOP_IP,
    FUP,
    MNT,
    MODE_EXEC,
    MODE_TSX,
    MTC,
    MWAIT,
    OVF,
    PAD,
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
    TMA,
    TNT,
    TRACESTOP,
    TSC,
    VMCS,
)
from bpfsym.read.intel_pt.reader import PacketReader
from bpfsym.read.intel_pt.state import (
    ABORT_TX,
    ASYNC,
    EAGAIN,
    ENOENT,
    ENOSYS,
    ERR_RESYNC,
    FUP_IN_PSB,
    FUP_NO_TIP,
    IFLAG,
    IN_SYNC,
    IN_TX,
    NO_PSB,
    OK,
    S_FUP,
    S_TIP,
    S_TIP_PGD,
    S_TNT,
    T_BLK_ITEMS,
    T_EX_STOP,
    T_PSB_EVT,
    T_PTW,
    T_PWR_ENTRY,
    T_PWR_EXIT,
    T_TRACE_BEGIN,
    T_TRACE_END,
)
from bpfsym.read.intel_pt.timing import TIMING_KINDS, Timing

MAX_EVDS = 64  # intel-pt-decoder.h INTEL_PT_MAX_EVDS

# packets that end a PSB+ walked in sync before its PSBEND (intel_pt_walk_psbend)
_UNEXPECTED_IN_PSB = frozenset(
    (TIP_PGD, TIP_PGE, TIP, TNT, TRACESTOP, BAD, PSB, PTWRITE, PTWRITE_IP, EXSTOP,
     EXSTOP_IP, MWAIT, PWRE, PWRX, BBP, BIP, BEP, BEP_IP, CFE, CFE_IP, EVD)
)  # fmt: skip
# what intel_pt_psb_with_fup_cb steps over, and the events it counts after PSBEND
_PSB_PLAIN = frozenset((PAD, MNT, TSC, TMA, MODE_EXEC, MODE_TSX, MTC, CYC, VMCS, CBR, PIP))
_PSB_EVENTS = frozenset(
    (PTWRITE, PTWRITE_IP, EXSTOP, EXSTOP_IP, MWAIT, PWRE, PWRX, BBP, BIP, BEP, BEP_IP,
     CFE, CFE_IP, EVD)
)  # fmt: skip
_STATE_TYPE = {PTWRITE: T_PTW, EXSTOP: T_EX_STOP, PWRX: T_PWR_EXIT, BEP: T_BLK_ITEMS}


class Walker:
    """The in-sync walks of one queue's decoder over the reader's packets."""

    def __init__(self, reader: PacketReader, timing: Timing, flow: Flow) -> None:
        self.reader = reader
        self.timing = timing
        self.flow = flow

    def walk_fup(self) -> int:
        fl = self.flow
        err = fl.walk(fl.last_ip)
        if err == EAGAIN:
            no_tip = fl.pkt_state != S_FUP
            fl.pkt_state = IN_SYNC
            if fl.fup_event(no_tip) and no_tip:
                return OK
            return EAGAIN
        fl.set_fup_tx_flags = False
        return err

    def walk_fup_tip(self) -> int:
        rd, tm, fl = self.reader, self.timing, self.flow
        s = fl.state
        if fl.tx_flags & ABORT_TX:
            fl.tx_flags = 0
            s.flags = (s.flags & ~IN_TX) | ABORT_TX
        else:
            s.flags |= ASYNC
        while True:
            err = rd.next_packet()
            if err:
                return err
            k = rd.kind
            if k == CBR:
                tm.cbr_packet()
            elif k == OVF:
                return fl.ovf()
            elif k == TIP_PGD or k == TIP:
                s.from_ip = fl.ip
                if rd.count == 0:
                    s.to_ip = 0
                else:
                    fl.set_ip()
                    s.to_ip = fl.ip
                if k == TIP_PGD:
                    fl.pge = False
                    tm.continuous_period = False
                    s.type |= T_TRACE_END
                    fl.update_nr()
                else:
                    fl.update_nr()
                    fl.sample_iflag_chg()
                return OK
            elif k == TIP_PGE:
                fl.pge = True
                s.from_ip = 0
                if rd.count == 0:
                    s.to_ip = 0
                else:
                    fl.set_ip()
                    s.to_ip = fl.ip
                s.type |= T_TRACE_BEGIN
                fl.set_nr()
                return OK
            elif k == PIP:
                fl.pip_payload = rd.payload
            elif k == MTC:
                tm.mtc()
            elif k == CYC:
                tm.cyc()
            elif k == MODE_EXEC:
                fl.next_iflag = bool(rd.count & IFLAG)
            elif k in (VMCS, MNT, PAD):
                pass
            else:  # "Missing TIP after FUP": read this packet again in sync
                fl.pkt_state = ERR_RESYNC
                rd.step = 0
                return ENOENT

    def _walk_psbend(self) -> int:
        """The packets of a PSB+ when in sync, to PSBEND (intel_pt_walk_psbend)."""
        rd, tm, fl = self.reader, self.timing, self.flow
        fl.in_psb = True
        try:
            while True:
                err = rd.next_packet()
                if err:
                    return err
                k = rd.kind
                if k == PSBEND:
                    return OK
                if k in _UNEXPECTED_IN_PSB:
                    tm.have_tma = False
                    return EAGAIN
                if k == OVF:
                    return fl.ovf()
                if k in TIMING_KINDS:
                    tm.take(k)
                    continue
                if k == MODE_EXEC:
                    fl.mode_exec_status()
                elif k == PIP:
                    fl.set_pip()
                elif k == FUP:
                    fl.pge = True
                    if rd.count:
                        fl.set_last_ip()
                        fl.psb_ip = fl.last_ip
                elif k == MODE_TSX:
                    fl.tx_flags = rd.payload & IN_TX
        finally:
            fl.in_psb = False

    def _psb(self) -> int:
        fl = self.flow
        fl.last_ip = 0
        fl.psb_ip = 0
        fl.have_last_ip = True
        err = self._walk_psbend()
        if err:
            return err
        s = fl.state
        s.type = T_PSB_EVT
        s.from_ip = fl.psb_ip
        s.to_ip = 0
        return OK

    def fup_in_psb(self) -> int:
        fl = self.flow
        if fl.ip != fl.last_ip:
            err = self.walk_fup()
            if err != EAGAIN:
                return err
        fl.pkt_state = IN_SYNC
        if self._psb():
            fl.pkt_state = ERR_RESYNC
            return ENOENT
        return OK

    def _psb_with_fup(self) -> int | None:
        """A PSB+ with a FUP (and no TIP.PGE after it): its FUP first (intel_pt_psb_with_fup)."""
        rd, fl = self.reader, self.flow
        if not fl.branch_enable:
            return None
        found: list[tuple[int, int]] = []
        after = [0]

        def cb(kind: int, count: int, payload: int, last: int) -> bool:
            if kind in _PSB_PLAIN:
                if after[0]:
                    after[0] -= 1
                    return not after[0]
                return False
            if kind == FUP:
                if after[0] or found or count == 0:
                    return True
                found.append((count, payload))
                return False
            if kind == PSBEND:
                if not found:
                    return True
                after[0] = 6  # keep going to see a TIP.PGE
                return False
            if kind == TIP_PGE:
                if after[0]:
                    found.clear()  # a FUP in PSB+ followed by TIP.PGE is ignored
                return True
            if kind in _PSB_EVENTS and after[0]:
                after[0] -= 1
                return not after[0]
            return True

        rd.lookahead(cb)
        if not found:
            return None
        rd.kind = FUP
        rd.count, rd.payload = found[0]
        fl.set_last_ip()
        fl.pkt_state = FUP_IN_PSB
        return self.fup_in_psb()

    def walk_trace(self) -> int:
        """The packets up to the next step once in sync (intel_pt_walk_trace)."""
        rd, tm, fl = self.reader, self.timing, self.flow
        no_tip = False
        fetch = True
        s = fl.state
        while True:
            if fetch:
                err = rd.next_packet()
                if err:
                    return err
            fetch = True
            k = rd.kind
            if k == TNT:
                if not rd.count:
                    continue
                fl.tnt_count = rd.count
                fl.pkt_state = S_TNT
                return fl.walk(0)
            if k == TIP_PGD:
                if rd.count:
                    fl.set_last_ip()
                fl.pkt_state = S_TIP_PGD
                return fl.walk(0)
            if k == TIP_PGE:
                fl.pge = True
                fl.overflow = False
                fl.set_nr()
                if rd.count == 0:
                    continue
                fl.sample_iflag_chg()
                fl.set_ip()
                s.from_ip = 0
                s.to_ip = fl.ip
                s.type |= T_TRACE_BEGIN
                return OK
            if k == OVF:
                return fl.ovf()
            if k == TIP:
                if rd.count:
                    fl.set_last_ip()
                fl.pkt_state = S_TIP
                return fl.walk(0)
            if k == FUP:
                if rd.count == 0:
                    no_tip = False
                    continue
                fl.set_last_ip()
                if not fl.branch_enable or not fl.pge:
                    fl.ip = fl.last_ip
                    if fl.fup_event(no_tip):
                        return OK
                    no_tip = False
                    continue
                if fl.set_fup_mwait:
                    no_tip = True
                fl.pkt_state = FUP_NO_TIP if no_tip else S_FUP
                err = self.walk_fup()
                if err != EAGAIN:
                    return err
                if no_tip:
                    no_tip = False
                    continue
                return self.walk_fup_tip()
            if k == TRACESTOP:
                fl.pge = False
                tm.continuous_period = False
                fl.tx_flags = 0
                tm.have_tma = False
                continue
            if k == PSB:
                s.psb_offset = rd.pos
                fl.psb_ip = 0
                with_fup = self._psb_with_fup()
                if with_fup is not None:
                    return with_fup
                err = self._psb()
                if err == EAGAIN:
                    fetch = False
                    continue
                return err
            if k == PIP:
                fl.pip_payload = rd.payload
                continue
            if k == CBR:
                tm.cbr_packet()
                if tm.cbr != tm.cbr_seen:
                    s.type = 0
                    return OK
                continue
            if k in TIMING_KINDS:
                tm.take(k)
                continue
            if k == MODE_EXEC:
                fl.next_iflag = bool(rd.count & IFLAG)
                err = rd.next_packet()
                if err:
                    return err
                if rd.kind == FUP:
                    fl.set_fup_mode_exec = True
                    no_tip = True
                fetch = False
                continue
            if k == MODE_TSX:
                if not fl.pge or fl.in_psb:
                    fl.tx_flags = rd.payload & IN_TX
                    continue
                flags = rd.payload & (IN_TX | ABORT_TX)
                err = rd.next_packet()
                if err:
                    return err
                if rd.kind == FUP:
                    fl.fup_tx_flags = flags
                    fl.set_fup_tx_flags = True
                    if not flags & ABORT_TX:
                        no_tip = True
                else:  # "Missing FUP after MODE.TSX": perf takes IN_TX of this packet
                    fl.tx_flags = rd.payload & IN_TX
                fetch = False
                continue
            if k == BAD:
                fl.pkt_state = NO_PSB
                return ENOSYS
            if k in (PSBEND, VMCS, MNT, PAD, BBP, BIP):
                continue
            if k in (PTWRITE_IP, EXSTOP_IP, BEP_IP, CFE_IP):
                err = rd.next_packet()
                if err:
                    return err
                if rd.kind == FUP:
                    if k == PTWRITE_IP:
                        fl.set_fup_ptw = True
                    elif k == EXSTOP_IP:
                        fl.set_fup_exstop = True
                    elif k == BEP_IP:
                        fl.set_fup_bep = True
                    else:
                        fl.set_fup_cfe_ip = True
                    no_tip = True
                fetch = False
                continue
            if k in _STATE_TYPE:  # PTWRITE, EXSTOP, PWRX, BEP
                s.type = _STATE_TYPE[k]
                s.from_ip = fl.ip
                s.to_ip = 0
                return OK
            if k == MWAIT:
                fl.set_fup_mwait = True
                continue
            if k == PWRE:
                if fl.set_fup_mwait:
                    fl.set_fup_pwre = True
                    continue
                s.type = T_PWR_ENTRY
                s.from_ip = fl.ip
                s.to_ip = 0
                return OK
            if k == CFE:
                fl.set_fup_cfe = True
                if not fl.pge:
                    fl.fup_event(True)
                    return OK
                continue
            if k == EVD:
                if fl.evd_cnt >= MAX_EVDS:
                    return ENOSYS
                fl.evd_cnt += 1
                continue
            fl.pkt_state = NO_PSB
            return ENOSYS
