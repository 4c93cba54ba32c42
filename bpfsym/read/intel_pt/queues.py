"""The Intel PT decoding of one perf.data: perf's per-queue bookkeeping around the decoder.

Follows perf's tools/perf/util/intel-pt.c: the queues of AUXTRACE buffers (per CPU with
per-cpu mmaps; auxtrace.c auxtrace_queues), intel_pt_setup_queue (each queue decoded to its
first timestamp), intel_pt_process_queues and intel_pt_run_decoder (queues decoded in
timestamp order up to each record's time), intel_pt_set_pid_tid_cpu with the context
switches and ITRACE_START (intel_pt_context_switch, machine__set_current_tid),
intel_pt_walk_next_insn's failure without the code (and dso.c's data status: once a
binary has failed twice its walks fail silently), intel_pt_sample and intel_pt_flush. What perf does not decode
here is said (IntelPT.skip_reason), what it would synthesize and this does not is counted
(IntelPT.unsynthesized).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable
from typing import IO, Any

from bpfsym.errors import FormatError
from bpfsym.read.intel_pt import synth
from bpfsym.read.intel_pt.config import CFG_TNT_DIS, PtConfig
from bpfsym.read.intel_pt.decoder import Decoder
from bpfsym.read.intel_pt.packet import U64
from bpfsym.read.intel_pt.state import (
    ERR_NODATA,
    T_PSB_EVT,
    UNSYNTHESIZED,
    Buffer,
    DecoderParams,
    State,
)
from bpfsym.read.intel_pt.synth import (
    KERNEL_START,
    MISC_KERNEL,
    MISC_USER,
    Error,
    SynthSample,
)

ITRACE_PERIOD_NS = 100_000  # perf report's default --itrace: instructions every 100 us

# where the code at an address lives: (cpumode, pid, ip) -> the binary's identity, None: no map
CodeAt = Callable[[int, int, int], Hashable | None]


class _Queue:
    """One AUX-area buffer queue (per CPU with per-cpu mmaps) and its decoder."""

    def __init__(self, nr: int, cpu: int, tid: int) -> None:
        self.nr = nr
        self.queue_cpu = cpu
        self.queue_tid = tid
        self.buffers: list[Any] = []
        self.next = 0  # index of the next buffer to decode
        self.decoder: Decoder | None = None
        self.state: State | None = None
        self.on_heap = False
        self.have_sample = False
        self.timestamp = 0
        self.pid = -1
        self.tid = -1
        self.cpu = cpu
        self.cbr_seen = 0xFFFFFFFF


class IntelPT:
    """The Intel PT decoding of one perf.data, driven by the report pass's records.

    Feed it buffers (add_buffer), the records perf's decoding listens to (switch,
    itrace_start) and, before each record delivered, process(time): it returns the samples
    perf delivers before that record. flush() at the end returns the rest.
    """

    EVENTS = synth.EVENTS  # the events it synthesizes, in perf's order
    CBR, PSB_EVENT = synth.CBR, synth.PSB_EVENT
    SYNTH_CONFIGS = synth.SYNTH_CONFIGS

    def __init__(self, config: PtConfig, code_at: CodeAt | None = None) -> None:
        self.config = config
        self.code_at = code_at
        self.queues: dict[int, _Queue] = {}
        self.heap: list[tuple[int, int]] = []
        self.new_data = False
        self.current_tid: dict[int, int] = {}  # cpu -> tid (machine__set_current_tid)
        self.threads: dict[int, list[int]] = {}  # tid -> [pid, cpu]
        self.dso_status: dict[Hashable, bool] = {}  # failed once: seen again since?
        self.errors: list[Error] = []
        self.unsynthesized: dict[str, int] = {}
        self._file: IO[bytes] | None = None
        self.params = DecoderParams(
            branch_enable=config.branch_enable,
            max_non_turbo_ratio=config.max_non_turbo_ratio,
            mtc_period=config.mtc_period,
            tsc_ctc_n=config.tsc_ctc_n,
            tsc_ctc_d=config.tsc_ctc_d,
            period_ticks=config.ns_to_ticks(ITRACE_PERIOD_NS) if config.time_mult else 0,
        )
        self.skip_reason = self._skip_reason()

    def _skip_reason(self) -> str | None:
        c = self.config
        if not c.configs:
            return "no intel_pt event in the file"
        if c.snapshot_mode or c.sampling_mode:
            return "snapshot or sampling mode (overlapping buffers) is not decoded"
        if any(cfg & CFG_TNT_DIS for cfg in c.configs):
            return "TNT packets disabled (perf's 'quick' mode) is not decoded"
        if c.have_sched_switch == 1:
            return "context switches from sched:sched_switch tracepoints are not decoded"
        return None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- input --

    def add_buffer(
        self, idx: int, cpu: int, tid: int, reference: int, data: bytes | None = None,
        path: str | None = None, offset: int = 0, size: int = 0,
    ) -> None:  # fmt: skip
        """Queue one AUXTRACE record's trace: its bytes, or where they are in the file."""
        q = self.queues.get(idx)
        if q is None:
            q = self.queues[idx] = _Queue(idx, _s32(cpu), _s32(tid))
        q.buffers.append((data, path, offset, size, reference))
        self.new_data = True

    def _read(self, path: str, offset: int, size: int) -> bytes:
        if self._file is None:
            try:
                self._file = open(path, "rb")  # noqa: SIM115
            except OSError as e:
                raise FormatError(path, offset, f"AUX trace unreadable: {e}") from None
        self._file.seek(offset)
        data = self._file.read(size)
        if len(data) < size:
            raise FormatError(path, offset, "AUX trace runs past the end of the file")
        return data

    def _buffers(self, q: _Queue) -> Callable[[], Buffer | None]:
        def next_buffer() -> Buffer | None:
            while q.next < len(q.buffers):
                data, path, offset, size, ref = q.buffers[q.next]
                q.buffers[q.next] = None  # decoded buffers are not kept
                q.next += 1
                if data is None and path is not None:
                    data = self._read(path, offset, size)
                if data:
                    return Buffer(data, ref)
            return None

        return next_buffer

    def thread(self, pid: int, tid: int) -> None:
        """A task seen in a record (COMM, FORK): perf's machine knows its pid."""
        self._thread(pid, tid)

    def _thread(self, pid: int, tid: int, cpu: int | None = None) -> None:
        t = self.threads.get(tid)
        if t is None:
            t = self.threads[tid] = [pid, -1]
        elif t[0] == -1:
            t[0] = pid
        if cpu is not None:
            t[1] = cpu

    def _set_current_tid(self, cpu: int, pid: int, tid: int) -> None:
        if cpu < 0:
            return
        self.current_tid[cpu] = tid
        self._thread(pid, tid, cpu)

    def switch(self, wide: bool, out: bool, cpu: int, pid: int, tid: int, np_pid: int,
               np_tid: int) -> None:  # fmt: skip
        """A PERF_RECORD_SWITCH(_CPU_WIDE): intel-pt.c intel_pt_context_switch."""
        if self.config.have_sched_switch == 3:
            if not out:  # intel_pt_context_switch_in
                if self.current_tid.get(cpu, -1) != tid:
                    self._set_current_tid(cpu, pid, tid)
                return
            if not wide:
                return  # perf: "Expecting CPU-wide context switch event"
            self._set_current_tid(cpu, np_pid, np_tid)
            return
        if out:
            return
        self._set_current_tid(cpu, pid, tid)

    def binaries_failed(self, keys: Iterable[Hashable]) -> None:
        """Binaries perf tried to read before the decoder walks them: their first failed
        walk is the only one it reports (vdso.c machine__thread_dso_type reads every
        '/'-named binary of a task's maps when its [vdso] is mapped)."""
        for key in keys:
            self.dso_status.setdefault(key, False)

    def itrace_start(self, cpu: int, pid: int, tid: int) -> None:
        if self.config.per_cpu_mmaps:
            self._set_current_tid(cpu, pid, tid)

    # -- decoding --

    def _walk_fails(self, q: _Queue) -> Callable[[int], bool]:
        """How a walk at ip fails for q: an error (True), or perf's silent retry (False)
        once the binary there has failed twice (intel_pt_walk_next_insn: a DSO whose data
        failed, "seen" by the decoder before, gives -ENOENT)."""

        def fails(ip: int) -> bool:
            cpumode = MISC_KERNEL if ip >= KERNEL_START else MISC_USER
            if cpumode != MISC_KERNEL and q.tid == -1:
                return True  # "no thread"
            key = self.code_at(cpumode, q.pid, ip) if self.code_at is not None else None
            if key is None:
                return True  # no map there
            seen = self.dso_status.get(key)
            if seen is None:
                self.dso_status[key] = False  # its data failed now
                return True
            if not seen:
                self.dso_status[key] = True
                return True
            return False

        return fails

    def _setup_queues(self) -> None:
        """intel_pt_setup_queue: each queue with new data decoded to its first timestamp."""
        self.new_data = False
        for q in self.queues.values():
            if q.decoder is None:
                q.cpu = q.queue_cpu
                q.tid = q.queue_tid
                q.decoder = Decoder(self.params, self._buffers(q), self._walk_fails(q))
            if q.on_heap or self.config.timeless:
                continue
            while True:
                state = q.decoder.decode()
                if state.err:
                    if state.err == ERR_NODATA:
                        break
                    continue
                if state.timestamp:
                    break
            if state.err:
                continue
            q.timestamp = state.timestamp
            q.state = state
            q.have_sample = True
            heapq.heappush(self.heap, (q.timestamp, q.nr))
            q.on_heap = True

    def _set_pid_tid_cpu(self, q: _Queue) -> None:
        if q.queue_tid == -1 or self.config.have_sched_switch:
            q.tid = self.current_tid.get(q.cpu, -1)
            if q.tid == -1:
                q.pid = -1
        t = self.threads.get(q.tid) if q.tid != -1 else None
        if t is not None:
            q.pid = t[0]
            if q.queue_cpu == -1:
                q.cpu = t[1]

    def _sample(self, q: _Queue, out: list[SynthSample]) -> None:
        """The samples of q's held state (intel_pt_sample: psb, then cbr)."""
        if not q.have_sample:
            return
        q.have_sample = False
        st = q.state
        assert st is not None
        time = 0 if self.config.timeless else self.config.tsc_to_perf_time(q.timestamp)
        if st.type & T_PSB_EVT:
            out.append(synth.sample(st, self.PSB_EVENT, q.pid, q.tid, q.cpu, time))
        if st.cbr != q.cbr_seen:
            q.cbr_seen = st.cbr
            out.append(synth.sample(st, self.CBR, q.pid, q.tid, q.cpu, time))
        for bit, name in UNSYNTHESIZED.items():
            if st.type & bit:
                self.unsynthesized[name] = self.unsynthesized.get(name, 0) + 1

    def _run(self, q: _Queue, limit: int, out: list[SynthSample]) -> bool:
        """intel_pt_run_decoder: decode q to a state at or past limit (held); False when
        q ran out of data."""
        assert q.decoder is not None
        while True:
            self._sample(q, out)
            st = q.decoder.decode()
            if st.err:
                if st.err == ERR_NODATA:
                    return False
                q.timestamp = st.est_timestamp
                t = 0 if self.config.timeless else self.config.tsc_to_perf_time(q.timestamp)
                self.errors.append(Error(st.err, st.from_ip, q.pid, q.tid, q.cpu, t))
                continue
            q.state = st
            q.have_sample = True
            if (
                not self.config.timeless
                and (st.from_ip >= KERNEL_START or not st.from_ip)
                and st.to_ip
                and st.to_ip < KERNEL_START
            ):
                q.timestamp = st.est_timestamp  # estimated TSC on return to user space
            elif st.timestamp > q.timestamp:
                q.timestamp = st.timestamp
            if not self.config.timeless and q.timestamp >= limit:
                return True

    def _process_queues(self, limit: int, out: list[SynthSample]) -> None:
        heap = self.heap
        while heap and heap[0][0] < limit:
            _, nr = heapq.heappop(heap)
            q = self.queues[nr]
            ts = min(heap[0][0] + 1, limit) if heap else limit
            self._set_pid_tid_cpu(q)
            if self._run(q, ts, out):
                heapq.heappush(heap, (q.timestamp, nr))
            else:
                q.on_heap = False

    def process(self, time: int) -> list[SynthSample]:
        """The samples perf delivers before a record of this perf time (0: none)."""
        out: list[SynthSample] = []
        if self.skip_reason is not None or not time or time == U64:
            return out
        if self.new_data:
            self._setup_queues()
        if not self.config.timeless:
            self._process_queues(self.config.perf_time_to_tsc(time), out)
        return out

    def flush(self) -> list[SynthSample]:
        """The samples left at the end of the data (intel_pt_flush)."""
        out: list[SynthSample] = []
        if self.skip_reason is not None:
            return out
        if self.new_data:
            self._setup_queues()
        if self.config.timeless:
            for q in self.queues.values():
                self._set_pid_tid_cpu(q)
                if q.decoder is not None:
                    self._run(q, U64, out)
        else:
            self._process_queues(1 << 64, out)
        return out


def _s32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v
