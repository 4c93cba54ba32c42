"""What the Intel PT decoder hands out and takes in, and the vocabulary its parts share.

Follows perf's tools/perf/util/intel-pt-decoder/intel-pt-decoder.h: struct intel_pt_state
(``State``, one decoded step given to the queue), enum intel_pt_sample_type (``T_*``), the
INTEL_PT_* state flags, the INTEL_PT_ERR_* codes perf reports, and the parameters of
intel_pt_decoder_new (``DecoderParams``), plus what intel-pt-decoder.c keeps internal: its
enum intel_pt_pkt_state and the errno values its walks return to one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# decoder states (perf's enum intel_pt_pkt_state)
(NO_PSB, NO_IP, ERR_RESYNC, IN_SYNC, TNT_CONT, S_TNT, S_TIP, S_TIP_PGD, S_FUP, FUP_NO_TIP,
 FUP_IN_PSB) = range(11)  # fmt: skip

# sample types of a decoder state (enum intel_pt_sample_type)
T_BRANCH, T_INSTRUCTION, T_TRANSACTION, T_PTW = 1, 2, 4, 8
T_MWAIT, T_PWR_ENTRY, T_EX_STOP, T_PWR_EXIT = 16, 32, 64, 128
T_CBR_CHG, T_TRACE_BEGIN, T_TRACE_END, T_BLK_ITEMS = 256, 512, 1024, 2048
T_PSB_EVT, T_EVT, T_IFLAG_CHG = 4096, 8192, 16384
# the state types of events the queues count (IntelPT.unsynthesized) but do not synthesize
UNSYNTHESIZED = {
    T_TRANSACTION: "transactions", T_PTW: "ptwrite", T_MWAIT: "mwait", T_PWR_ENTRY: "pwre",
    T_EX_STOP: "exstop", T_PWR_EXIT: "pwrx", T_EVT: "evt",
}  # fmt: skip

IN_TX, ABORT_TX, ASYNC, FUP_IP = 1, 2, 4, 8
IFLAG = 4  # MODE.Exec's IF bit

# internal results (errno values perf's decoder uses)
OK = 0
EAGAIN = -11
ENOLINK = -67
EILSEQ = -84  # the instruction could not be got
ENOENT = -2  # the trace does not match
EOVERFLOW = -75
EBADMSG = -74
ENODATA = -61
ENOSYS = -38

# INTEL_PT_ERR_* codes (perf script prints them as "code N")
ERR_CODES = {ENOSYS: 2, EBADMSG: 3, ENODATA: 4, EILSEQ: 5, ENOENT: 6, EOVERFLOW: 7}
ERR_NODATA = 4
ERR_UNKNOWN = 9


class State:
    """One decoder state handed to the queue (perf's struct intel_pt_state)."""

    __slots__ = (
        "type", "flags", "err", "from_ip", "to_ip", "from_nr", "to_nr", "timestamp",
        "est_timestamp", "cbr", "cbr_payload", "psb_offset",
    )  # fmt: skip

    def __init__(self) -> None:
        self.type = 0
        self.flags = 0
        self.err = 0
        self.from_ip = 0
        self.to_ip = 0
        self.from_nr = False
        self.to_nr = False
        self.timestamp = 0
        self.est_timestamp = 0
        self.cbr = 0
        self.cbr_payload = 0
        self.psb_offset = 0


class Buffer(NamedTuple):
    data: bytes
    reference: int  # the AUXTRACE record's reference: the TSC when perf record read it


@dataclass
class DecoderParams:
    branch_enable: bool = True
    max_non_turbo_ratio: int = 0
    mtc_period: int = 0
    tsc_ctc_n: int = 0
    tsc_ctc_d: int = 0
    period_ticks: int = 0  # instruction sampling period in TSC ticks (0: none)
