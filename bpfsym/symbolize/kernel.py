"""Which kernel symbols name kernel samples, and why there are none: --kallsyms, the side
file's snapshot, or the host's /proc/kallsyms when it provably belongs to the recording."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bpfsym.errors import FormatError
from bpfsym.formats import perfdata as F
from bpfsym.live.host import HostKallsyms, host_boot_id, kernel_build_id
from bpfsym.live.kernel_kallsyms import kernel_kallsyms
from bpfsym.read.kallsyms import (
    KernelSymbols,
    SortedKallsyms,
    bad_kallsyms,
    parse_kallsyms,
    relocate_kallsyms,
    symbol_address,
)
from bpfsym.read.perfdata import PerfData
from bpfsym.symbolize.symbols import FROM_KALLSYMS_HOST, FROM_KALLSYMS_SIDE


def kernel_symbols(
    pd: PerfData,
    cap: Any,
    kallsyms: str | None,
    np: Any = None,
    host: HostKallsyms | None = None,
    reloc: tuple[str, int] | None = None,
    symfs: str = "",
) -> tuple[KernelSymbols | None, str]:
    """Pick the kernel symbol source; the second item says why (for the header or misses).
    With a symfs nothing of the host is used (perf: symbol.c dso__load_kernel_sym).
    reloc counts only where moved_by_relocation() says so."""
    if kallsyms:
        try:
            raw = kernel_kallsyms(kallsyms)  # bytes: the numpy reading needs no str
            return KernelSymbols.from_text(raw, f"kallsyms file {kallsyms}", np=np), ""
        except OSError as e:
            raise FormatError(kallsyms, 0, f"cannot read: {e.strerror}") from None
    if cap is not None and cap.kallsyms:
        return KernelSymbols(cap.kallsyms, FROM_KALLSYMS_SIDE), ""
    if cap is not None and cap.kallsyms_texts:
        # the kernel part as /proc/kallsyms gave it (its [bpf] lines are not kernel symbols)
        kept = [i for i, t in enumerate(cap.kallsyms_texts) if not _bpf_part(t)]
        text = "".join(cap.kallsyms_texts[i] for i in kept)
        first = kept[0] if kept else 0
        return _kallsyms_text(
            text, FROM_KALLSYMS_SIDE, "", np, lambda e: bad_kallsyms(cap, first, e)
        ), ""
    if symfs:
        return None, f"no kallsyms: --symfs {symfs} given, the host's are not used"
    if cap is not None:
        if cap.header.boot_id and cap.header.boot_id == host_boot_id():
            return _host("boot id matches the side file", np, host)
        return None, "no kallsyms: the side file has none and was recorded in another boot"
    return _host_for_perf_data(pd, np, host, reloc)


def moved_by_relocation(cap: Any, kallsyms: str | None, symfs: str) -> bool:
    """Whether kernel_symbols' choice depends on its reloc (the kernel map's ref-reloc
    symbol, which side-band records give): only the host's kallsyms for a perf.data alone
    are moved by it; a kallsyms file, a side file or a symfs decide before any record."""
    return not kallsyms and cap is None and not symfs


def _bpf_part(text: str) -> bool:
    """Whether a side file's KALLSYMS text is its [bpf] part (trampolines, dispatchers).
    The recorder writes the kernel part and the [bpf] lines in records of their own, so
    the first line tells (a search of the kernel part's 5 MB for "\t[bpf]" took 6 ms)."""
    end = text.find("\n")
    return (text if end < 0 else text[:end]).endswith("\t[bpf]")


KERNEL_DSO = "[kernel.kallsyms]"


def _host_for_perf_data(
    pd: PerfData, np: Any, host: HostKallsyms | None, reloc: tuple[str, int] | None
) -> tuple[KernelSymbols | None, str]:
    """The host's kallsyms for a perf.data alone, as perf takes them: only when the running
    kernel is the recorded one (same build id; an equal osrelease proves nothing), moved by
    the difference of the recorded ref-reloc symbol's address (KASLR)."""
    recorded = next((b.build_id for b in pd.header.build_ids if b.filename == KERNEL_DSO), "")
    if not recorded:
        why = "perf.data records no kernel build id"
        if pd.pipe:
            why += " (pipe mode: perf record writes none)"
        elif pd.compressed_records or F.HEADER_COMPRESSED in pd.header.features:
            why += " (perf record -z writes none)"
        return None, f"no kallsyms: {why}; name a kallsyms file with --kallsyms"
    running = (host.build_id() if host is not None else None) or kernel_build_id()
    if running != recorded:
        return None, (
            f"no kallsyms: recorded on kernel build id {recorded[:16]}, this host runs "
            f"{running[:16] or 'an unknown one'}; name a kallsyms file with --kallsyms"
        )
    note = f"build id {recorded[:16]} matches"
    return _host(note, np, host, reloc)


def _host(
    note: str,
    np: Any = None,
    host: HostKallsyms | None = None,
    reloc: tuple[str, int] | None = None,
) -> tuple[KernelSymbols | None, str]:
    try:
        raw = host.raw() if host is not None else kernel_kallsyms()
    except OSError as e:
        return None, f"no kallsyms: /proc/kallsyms unreadable ({e.strerror})"
    text: str | bytes = raw
    if reloc is not None:
        text = raw.decode("utf-8", "replace")
        here = symbol_address(text, reloc[0])
        if here is not None and here != reloc[1]:
            delta = here - reloc[1]
            text = relocate_kallsyms(text, delta)
            note += f", relocated by {delta:+#x} ({reloc[0]})"
    ks = _kallsyms_text(text, FROM_KALLSYMS_HOST, f"{FROM_KALLSYMS_HOST} ({note})", np)
    if not len(ks):
        return None, "no kallsyms: /proc/kallsyms addresses are hidden (kernel.kptr_restrict)"
    return ks, ""


def _kallsyms_text(
    text: str | bytes,
    origin: str,
    note: str,
    np: Any,
    bad: Callable[[Exception], Exception] | None = None,
) -> KernelSymbols:
    """Kernel symbols of a kallsyms text as /proc/kallsyms gives it: read in full with
    numpy, else looked up where it lies (the kernel's own lines are sorted). A line
    that does not parse raises bad(error) (default: a FormatError naming origin)."""
    if np is None:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return SortedKallsyms(text, origin, note, bad)
    ks = KernelSymbols.from_text(text, origin, note, np)
    if ks._line is None:  # not plain kallsyms: the line reader skipped what did not parse
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        try:
            parse_kallsyms(text)
        except ValueError as e:
            raise (
                bad(e) if bad else FormatError(origin, 0, f"not a kallsyms line ({e})")
            ) from None
    return ks
