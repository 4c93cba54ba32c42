"""Where the traced code is, as the Intel PT decoder follows it packet by packet.

Follows the parts of perf's tools/perf/util/intel-pt-decoder/intel-pt-decoder.c that keep
and change the decoder's control-flow state, whatever walk it is in: the last IP and IP
compression (intel_pt_calc_ip, intel_pt_set_last_ip, intel_pt_set_ip, intel_pt_have_ip),
packet generation enabled (PGE), the non-root bit of PIP (intel_pt_set_nr,
intel_pt_update_nr), MODE.Exec's interrupt flag (intel_pt_mode_exec_status,
intel_pt_sample_iflag), MODE.TSX's transaction flags, the events waiting to be bound to a
FUP (intel_pt_fup_event, intel_pt_clear_fup_event), OVF (intel_pt_overflow), and the
instruction walker, which never has the code: a walk at an address fails as perf's
intel_pt_walk_insn fails there without it (intel_pt_sample_fup_insn too).
"""

from __future__ import annotations

from collections.abc import Callable

from bpfsym.read.intel_pt.reader import PacketReader
from bpfsym.read.intel_pt.state import (
    ABORT_TX,
    EAGAIN,
    EILSEQ,
    ENOLINK,
    EOVERFLOW,
    FUP_IP,
    IFLAG,
    IN_SYNC,
    NO_IP,
    NO_PSB,
    T_BLK_ITEMS,
    T_BRANCH,
    T_EVT,
    T_EX_STOP,
    T_IFLAG_CHG,
    T_MWAIT,
    T_PTW,
    T_PWR_ENTRY,
    T_TRACE_BEGIN,
    T_TRANSACTION,
    DecoderParams,
    State,
)
from bpfsym.read.intel_pt.timing import Timing


def calc_ip(count: int, payload: int, last_ip: int) -> int:
    """The IP of a TIP/FUP packet given the last one (IP compression)."""
    if count == 1:
        return (last_ip & 0xFFFFFFFFFFFF0000) | payload
    if count == 2:
        return (last_ip & 0xFFFFFFFF00000000) | payload
    if count == 3:
        return payload | 0xFFFF000000000000 if payload & 0x800000000000 else payload
    if count == 4:
        return (last_ip & 0xFFFF000000000000) | payload
    if count == 6:
        return payload
    return 0


class Flow:
    """The decoder's control-flow state (pkt_state, ip, pge, nr, iflag, tx_flags and the
    FUP-bound events) and the state it hands out (state), changed by the packet the
    reader stands on.

    walk_fails(ip) says how a walk starting at ip fails: True an error perf reports,
    False the silent retry perf makes once the binary there has failed before."""

    def __init__(
        self, params: DecoderParams, reader: PacketReader, timing: Timing,
        walk_fails: Callable[[int], bool],
    ) -> None:  # fmt: skip
        self.reader = reader
        self.timing = timing
        self.walk_fails = walk_fails
        self.branch_enable = params.branch_enable
        self.state = State()
        self.pkt_state = NO_PSB
        self.ip = 0
        self.last_ip = 0
        self.have_last_ip = False
        self.psb_ip = 0
        self.pge = False
        self.in_psb = False
        self.pip_payload = 0
        self.nr = False
        self.next_nr = False
        self.iflag = False
        self.next_iflag = False
        self.tx_flags = 0
        self.overflow = False
        self.fup_tx_flags = 0
        self.set_fup_tx_flags = False
        self.set_fup_ptw = False
        self.set_fup_mwait = False
        self.set_fup_pwre = False
        self.set_fup_exstop = False
        self.set_fup_bep = False
        self.set_fup_cfe_ip = False
        self.set_fup_cfe = False
        self.set_fup_mode_exec = False
        self.evd_cnt = 0
        self.tnt_count = 0

    def restart(self) -> None:
        """A buffer that does not continue the last: no IP, no sync (intel_pt_get_data)."""
        self.ip = 0
        self.pkt_state = NO_PSB

    # -- IPs, flags --

    def set_last_ip(self) -> None:
        self.last_ip = calc_ip(self.reader.count, self.reader.payload, self.last_ip)
        self.have_last_ip = True

    def set_ip(self) -> None:
        self.set_last_ip()
        self.ip = self.last_ip

    def have_ip(self) -> bool:
        c = self.reader.count
        return bool(c) and (self.have_last_ip or c == 3 or c == 6)

    def set_pip(self) -> None:
        self.pip_payload = self.reader.payload
        self.nr = bool(self.pip_payload & 1)
        self.next_nr = self.nr

    def set_nr(self) -> None:
        self.nr = bool(self.pip_payload & 1)
        self.next_nr = self.nr

    def update_nr(self) -> None:
        self.next_nr = bool(self.pip_payload & 1)

    def mode_exec_status(self) -> None:
        iflag = bool(self.reader.count & IFLAG)
        self.iflag = self.next_iflag = iflag

    def sample_iflag(self) -> None:
        self.state.type |= T_IFLAG_CHG
        self.iflag = self.next_iflag

    def sample_iflag_chg(self) -> None:
        if self.iflag != self.next_iflag:
            self.sample_iflag()

    def clear_fup_event(self) -> None:
        self.set_fup_tx_flags = self.set_fup_ptw = self.set_fup_mwait = False
        self.set_fup_pwre = self.set_fup_exstop = self.set_fup_bep = False
        self.set_fup_cfe_ip = self.set_fup_cfe = self.set_fup_mode_exec = False
        self.evd_cnt = 0
        self.iflag = self.next_iflag

    # -- events --

    def ovf(self) -> int:
        """An OVF packet (intel_pt_overflow)."""
        self.tx_flags = 0
        self.set_nr()
        self.pkt_state = IN_SYNC
        self.state.from_ip = self.ip
        self.ip = 0
        self.pge = False
        self.clear_fup_event()
        self.overflow = True
        return EOVERFLOW

    def fup_event(self, no_tip: bool) -> bool:
        """The events bound to this FUP into the state (intel_pt_fup_event): True when
        there are any."""
        s = self.state
        saved = s.type
        ret = False
        s.type &= ~T_BRANCH
        if self.set_fup_cfe_ip or self.set_fup_cfe:
            ip = self.set_fup_cfe_ip
            self.set_fup_cfe_ip = self.set_fup_cfe = False
            s.type |= T_EVT
            if not ip and self.pge:
                s.type |= T_BRANCH
            self.evd_cnt = 0
            if ip or self.pge:
                s.flags |= FUP_IP
            ret = True
        sample_fup_insn = False
        if self.set_fup_mode_exec:
            self.set_fup_mode_exec = False
            self.sample_iflag()
            sample_fup_insn = no_tip
            ret = True
        if self.set_fup_tx_flags:
            self.set_fup_tx_flags = False
            self.tx_flags = self.fup_tx_flags
            s.type |= T_TRANSACTION
            if self.fup_tx_flags & ABORT_TX:
                s.type |= T_BRANCH
            s.flags = self.fup_tx_flags
            ret = True
        if self.set_fup_ptw:
            self.set_fup_ptw = False
            s.type |= T_PTW
            s.flags |= FUP_IP
            ret = True
        if self.set_fup_mwait:
            self.set_fup_mwait = False
            s.type |= T_MWAIT
            ret = True
        if self.set_fup_pwre:
            self.set_fup_pwre = False
            s.type |= T_PWR_ENTRY
            ret = True
        if self.set_fup_exstop:
            self.set_fup_exstop = False
            s.type |= T_EX_STOP
            s.flags |= FUP_IP
            ret = True
        if self.set_fup_bep:
            self.set_fup_bep = False
            s.type |= T_BLK_ITEMS
            ret = True
        if self.overflow:
            self.overflow = False
            if not ret and not self.pge:
                self.pge = True
                s.type |= T_BRANCH | T_TRACE_BEGIN
                s.from_ip = 0
                s.to_ip = self.ip
                return True
        if ret:
            s.from_ip = self.ip
            s.to_ip = 0
            if sample_fup_insn:
                self._sample_fup_insn()
        else:
            s.type = saved
        return ret

    # -- the walker that has no code --

    def walk(self, to_ip: int) -> int:
        """intel_pt_walk_insn with nothing to read: at to_ip already, or a failure."""
        if self.timing.period_ticks:
            self.timing.next_period()
        if to_ip and self.ip == to_ip:
            return EAGAIN
        self.pkt_state = NO_IP
        return EILSEQ if self.walk_fails(self.ip) else ENOLINK

    def _sample_fup_insn(self) -> None:
        """intel_pt_sample_fup_insn: one instruction walked for an instruction sample. It
        fails without the code (the error is ignored), but the binary's failure counts."""
        if not self.branch_enable or not self.pge or self.ip != self.last_ip:
            return
        if not self.timing.period_ticks or self.timing.next_period() != 1:
            return
        self.walk_fails(self.ip)
