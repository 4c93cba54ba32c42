"""The records of a report's pass other than samples, handled one way for both passes:
side-band records (MMAP, COMM, FORK, KSYMBOL, BPF_EVENT, ...) decoded while their buffer
is valid and applied to the pass's Symbolizer in delivery order, losses counted, and the
kernel symbols chosen before the first sample is delivered.

Like perf's machine__process_event (tools/perf/util/machine.c), one place knows what
each record type does to the symbol state; report.ordered and report.bulk only decide
when a record goes out.
"""

from __future__ import annotations

import struct
from typing import Any

from bpfsym.errors import FormatError
from bpfsym.formats import fixed_head
from bpfsym.formats import perf as K
from bpfsym.formats import perfdata as F
from bpfsym.formats import struct_of as formats_struct_of
from bpfsym.live.host import HostKallsyms
from bpfsym.read.perfdata import PerfData
from bpfsym.symbolize.kernel import KERNEL_DSO, kernel_symbols, moved_by_relocation
from bpfsym.symbolize.symbolizer import Symbolizer

SIDEBAND = (
    K.RECORD_MMAP,
    K.RECORD_MMAP2,
    K.RECORD_COMM,
    K.RECORD_FORK,
    K.RECORD_EXIT,
    K.RECORD_KSYMBOL,
    K.RECORD_BPF_EVENT,
)

LOSSES = (K.RECORD_LOST, K.RECORD_LOST_SAMPLES)


class Sideband:
    """One pass's Symbolizer and what feeds it.

    Kernel symbols are chosen at the first delivery (prepare): a pipe-mode header
    arrives in the data, and the host's /proc/kallsyms being read beside (HostKallsyms)
    gets the time to finish. The first of two reading processes chooses them before its
    first window when no side-band record can change them (relocation_free).
    """

    def __init__(
        self,
        pd: PerfData,
        cap: Any,
        kallsyms: str | None,
        np: Any,
        host: HostKallsyms | None,
        symfs: str = "",
    ) -> None:
        self.pd = pd
        self.cap = cap
        self.kallsyms = kallsyms
        self.np = np
        self.host = host
        self.symfs = symfs
        self.sym = Symbolizer(None, "", cap, elf_root=symfs)
        self.sym.elf.np = np
        self.ready = False  # kernel symbols chosen
        self.handoff: Any = None  # the other reading process's (report.split), if any
        self.header_set = False  # the header's BPF_PROG_INFO, BTF and build ids handed over
        # the kernel map's ref-reloc symbol and its address when recorded ("_text", pgoff)
        self.kernel_reloc: tuple[str, int] | None = None
        fast = K.layouts(pd.little).fast
        self.ksym_head = fast.ksymbol  # addr, len, ksym_type, flags
        self.bpf_head = fast.bpf_event  # type, flags, id, tag
        L = pd.L
        self.fork_body = fixed_head(L.fork, "time")[0]  # pid, ppid, tid, ptid
        self.lost_body = fast.lost  # id, lost
        self.lost_samples_body = formats_struct_of(L.lost_samples)[0]  # lost
        self.comm_head = fixed_head(L.comm, "comm")[0]  # pid, tid
        self.mmap_head = fixed_head(L.mmap, "filename")[0]  # pid, tid, addr, len, pgoff
        self.mmap2_head = fixed_head(L.mmap2, "filename")[0]  # ... dev_or_build_id, prot, flags
        self.mmap2_bid = formats_struct_of(L.mmap2_build_id)[0]  # size, build_id

    def set_header(self) -> None:
        """Hand the header over (a file's before its first side-band record; a pipe's at
        the first delivery, once its HEADER_* records are in)."""
        h = self.pd.header
        self.sym.set_header(h.bpf_progs, h.btfs, h.build_ids, self.pd.little)
        self.header_set = True

    def relocation_free(self) -> bool:
        """Whether the kernel symbols prepare() chooses do not depend on side-band records
        (symbolize.kernel.moved_by_relocation)."""
        return not moved_by_relocation(self.cap, self.kallsyms, self.symfs)

    def prepare(self) -> None:
        """Choose the kernel symbols: before the first sample is delivered (with two
        reading processes, the second takes the first one's: report.split.KernelHandoff)."""
        sym = self.sym
        hand = self.handoff
        key = None if self.relocation_free() else self.kernel_reloc
        got = hand.take(self.np, key) if hand is not None else None
        if got is None:
            got = kernel_symbols(
                self.pd, self.cap, self.kallsyms, self.np, self.host, self.kernel_reloc,
                self.symfs,
            )  # fmt: skip
            if hand is not None:
                hand.give(*got, key)
        sym.kernel, sym.kernel_note = got
        if not self.header_set:
            self.set_header()
        self.ready = True

    def lost(self, rtype: int, buf: Any, start: int, size: int) -> int:
        """The samples a LOST (u64 id, lost) or LOST_SAMPLES (u64 lost) record counts."""
        if rtype == K.RECORD_LOST:
            body = self.lost_body
            return body.unpack_from(buf, start + 8)[1] if size >= 8 + body.size else 0
        body = self.lost_samples_body
        return body.unpack_from(buf, start + 8)[0] if size >= 8 + body.size else 0

    def decode(
        self, rtype: int, misc: int, buf: Any, start: int, size: int, off: int
    ) -> tuple[int | None, tuple]:
        """Decode a side-band record now (buf is only valid during the pass): (time, args).

        The time is the sample_id trailer's (perf_event_attr.sample_id_all), None when
        the file has none."""
        pd = self.pd
        if rtype == K.RECORD_KSYMBOL:
            if size < 8 + 16 + 1:
                raise FormatError(pd.path, off, "KSYMBOL record too small")
            addr, length, ktype, flags = self.ksym_head.unpack_from(buf, start + 8)
            raw = bytes(buf[start + 24 : start + size])
            nend = raw.find(b"\0")
            if nend < 0:
                raise FormatError(pd.path, off, "KSYMBOL name not terminated")
            name = raw[:nend].decode("utf-8", "replace")
            tr = pd.trailer(buf, start, size, rtype, 16 + K.ksymbol_name_size(nend))
            t = tr.get("time") if tr else None
            return t, (addr, length, ktype, flags, name, t)
        if rtype == K.RECORD_BPF_EVENT:
            if size < 8 + 16:
                raise FormatError(pd.path, off, "BPF_EVENT record too small")
            etype, _flags, prog_id, tag = self.bpf_head.unpack_from(buf, start + 8)
            tr = pd.trailer(buf, start, size, rtype, 16)
            t = tr.get("time") if tr else None
            return t, (etype, prog_id, tag, t)
        if rtype == K.RECORD_FORK or rtype == K.RECORD_EXIT:
            if size < 8 + 24:
                raise FormatError(pd.path, off, "FORK/EXIT record too small")
            tr = pd.trailer(buf, start, size, rtype, 24)
            return (tr.get("time") if tr else None), self.fork_body.unpack_from(buf, start + 8)
        tr = pd.trailer(buf, start, size, rtype, 0)
        t = tr.get("time") if tr else None
        body = start + 8
        try:
            if rtype == K.RECORD_COMM:
                head = self.comm_head
                if size - 8 < head.size:
                    raise ValueError("record too small")
                pid, tid = head.unpack_from(buf, body)
                comm = _cstring(buf, body + head.size, start + size)
                return t, (pid, tid, comm, bool(misc & F.MISC_COMM_EXEC))
            bid = ""
            if rtype == K.RECORD_MMAP2:
                head = self.mmap2_head
                if size - 8 < head.size:
                    raise ValueError("record too small")
                pid, _tid, addr, length, pgoff, dev, _prot, _flags = head.unpack_from(buf, body)
                if misc & F.MISC_MMAP_BUILD_ID:
                    n, raw = self.mmap2_bid.unpack_from(dev)
                    bid = raw[: min(n, 20)].hex()
            else:
                head = self.mmap_head
                if size - 8 < head.size:
                    raise ValueError("record too small")
                pid, _tid, addr, length, pgoff = head.unpack_from(buf, body)
            filename = _cstring(buf, body + head.size, start + size)
            if misc & 7 == F.MISC_KERNEL and filename.startswith(KERNEL_DSO):
                # perf names the kernel map [kernel.kallsyms]<ref-reloc symbol>, pgoff its address
                if self.kernel_reloc is None and len(filename) > len(KERNEL_DSO):
                    self.kernel_reloc = (filename[len(KERNEL_DSO) :], pgoff)
        except (struct.error, ValueError) as e:  # short records, no NUL, bad UTF-8
            what = str(e).splitlines()[0][:80]
            raise FormatError(pd.path, off, f"bad record type {rtype}: {what}") from None
        return t, (pid, addr, length, pgoff, filename, bid, misc & 7)

    def apply(self, rtype: int, args: tuple, misc: int) -> None:
        """Deliver a decoded side-band record to the Symbolizer."""
        sym = self.sym
        if rtype == K.RECORD_MMAP2 or rtype == K.RECORD_MMAP:
            pid, addr, length, pgoff, filename, bid, mode = args
            if mode == F.MISC_KERNEL:  # the kernel and its modules (perf's kernel maps)
                sym.kernel_mmap(addr, length, filename)
            else:
                sym.mmap(pid, addr, length, pgoff, filename, bid)
        elif rtype == K.RECORD_COMM:
            sym.comm(*args)
        elif rtype == K.RECORD_FORK:
            sym.fork(*args)
        elif rtype == K.RECORD_KSYMBOL:
            sym.ksymbol(*args)
        elif rtype == K.RECORD_BPF_EVENT:
            sym.bpf_event(*args)


def _cstring(buf: Any, start: int, end: int) -> str:
    """The NUL-terminated string at buf[start:end] (ValueError when unterminated). Comms
    and file names are bytes to the kernel and perf: any byte is kept (surrogateescape),
    and printed back as it came."""
    nul = buf.find(b"\0", start, end)
    if nul < 0:
        raise ValueError("string not terminated")
    return bytes(buf[start:nul]).decode("utf-8", "surrogateescape")
