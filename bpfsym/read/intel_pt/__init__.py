"""Intel PT (AUX-area) traces in a perf.data, decoded the way perf report decodes them when
it cannot read the traced code, and the samples perf synthesizes from them.

perf report decodes an AUX-area trace by default (auxtrace.c itrace_synth_opts__set_default)
and lists the events it synthesizes after the file's own (intel-pt.c intel_pt_synth_events).
Without the traced binaries (``--symfs`` an empty directory, or a file read on another
machine) every attempt to walk the code fails, and what comes out is driven by the packets
alone: a ``psb`` sample at each Packet Stream Boundary the decoder syncs on and a ``cbr``
sample where the core-to-bus ratio changes. That is what this package reproduces, in the
order the data goes through it:

packet    the packet layer (intel-pt-pkt-decoder.c): ``packets``/``parse_packet``, the
          lengths, absorbed PAD bytes and names of ``perf report -D``
config    ``PtConfig``: AUXTRACE_INFO and the intel_pt events' attrs (intel-pt.c), perf
          time <-> TSC (tsc.c)
state     the decoder's interface (intel-pt-decoder.h): ``State``, sample types, errors
decoder   ``Decoder``, perf's intel-pt-decoder.c for one queue, composed of:
  reader    PacketReader: buffers, the current packet, lookahead, PSB scan
  timing    Timing: TSC/TMA/MTC/CYC/CBR time keeping and the instruction period
  flow      Flow: IP compression, PGE, NR, IF, TSX, FUP-bound events, OVF, and the
            instruction walker that never has the code (a walk fails as perf's fails
            there: an error, or silently once the binary has failed twice)
  walk      Walker: the walks once in sync (TNT/TIP/FUP/PSB+ ...)
queues    ``IntelPT``: perf's per-queue bookkeeping (intel-pt.c intel_pt_run_decoder,
          intel_pt_process_queues, intel_pt_set_pid_tid_cpu, context switches and
          ITRACE_START): given the report pass's records in delivery order it returns,
          before each record, the samples perf delivers before it, with perf's ip,
          cpumode, pid, tid, cpu and time
synth     ``SynthSample``, ``Error`` and ``event_attrs``: the samples and the events perf
          adds for them

Not reproduced, and said so (``IntelPT.skip_reason``): traces perf decodes differently
(snapshot or sampling mode, whose buffers overlap; TNT disabled, which forces perf's
"hop" mode; sched_switch tracepoints as the only switch information). Samples of the
other synthesized events (ptwrite, power events, transactions) are counted, not made
(``IntelPT.unsynthesized``): no corpus file has them to check them against.
Bad trace data is decoded as perf decodes it (as "bad packet" errors), never raised.
"""

from bpfsym.read.intel_pt.config import PtConfig
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
    PACKET_NAMES,
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
    Packet,
    packets,
    parse_packet,
)
from bpfsym.read.intel_pt.queues import CodeAt, IntelPT
from bpfsym.read.intel_pt.synth import Error, SynthSample, event_attrs

__all__ = [
    # the packet layer
    "Packet", "packets", "parse_packet", "PACKET_NAMES",
    "BAD", "PAD", "TNT", "TIP_PGD", "TIP_PGE", "TSC", "TMA", "MODE_EXEC", "MODE_TSX", "MTC",
    "TIP", "FUP", "CYC", "VMCS", "PSB", "PSBEND", "CBR", "TRACESTOP", "PIP", "OVF", "MNT",
    "PTWRITE", "PTWRITE_IP", "EXSTOP", "EXSTOP_IP", "MWAIT", "PWRE", "PWRX", "BBP", "BIP",
    "BEP", "BEP_IP", "CFE", "CFE_IP", "EVD",
    # the decoding of a file
    "PtConfig", "IntelPT", "CodeAt", "SynthSample", "Error", "event_attrs",
]  # fmt: skip
