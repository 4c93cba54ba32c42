"""What a sample is named: a Sym (name, DSO, kind, where the name came from, why not),
and a source-line cell. One Sym per symbol, however many addresses land in it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bpfsym.formats import perfdata as F

if TYPE_CHECKING:
    from bpfsym.symbolize.timeline import BpfFunc

# where a symbol came from (the report header counts these)
FROM_SIDE = "side file"

FROM_PERF = "perf.data records"

FROM_KALLSYMS_SIDE = "side-file kallsyms"

FROM_KALLSYMS_HOST = "host /proc/kallsyms"

FROM_ELF = "ELF symbols"

UNRESOLVED = "unresolved"

CONTEXT_MODES = {
    F.CONTEXT_KERNEL: F.MISC_KERNEL,
    F.CONTEXT_USER: F.MISC_USER,
    F.CONTEXT_HV: F.MISC_HYPERVISOR,
    F.CONTEXT_GUEST: F.MISC_GUEST_KERNEL,
}


class Sym:
    """A resolved (or unresolved) symbol: what the report columns show."""

    __slots__ = ("name", "dso", "kind", "origin", "bpf", "reason", "start")

    def __init__(
        self,
        name: str,
        dso: str,
        kind: str,
        origin: str,
        reason: str = "",
        bpf: BpfFunc | None = None,
        start: int = 0,
    ) -> None:
        self.name = name
        self.dso = dso
        self.kind = kind  # "k" kernel, "." user
        self.origin = origin
        self.reason = reason  # why it stayed unresolved
        self.bpf = bpf
        self.start = start

    def __reduce__(self) -> tuple:
        # by constructor arguments: pickling by slots took three times as long (report's
        # second process sends its symbols back); bpf as state, made after this Sym, as
        # its function refers back to it
        args = (self.name, self.dso, self.kind, self.origin, self.reason, None, self.start)
        return Sym, args, self.bpf

    def __setstate__(self, bpf: BpfFunc | None) -> None:
        self.bpf = bpf

    @property
    def prog(self) -> str:
        """The program's name (its main function's kallsyms name); "" outside BPF."""
        if self.bpf is None:
            return ""
        return self.bpf.prog.main_name if self.bpf.prog is not None else self.name

    @property
    def label(self) -> str:
        return f"[{self.kind}] {self.name}"

    def srcline(self, ip: int) -> str:
        """file:line of ip; for BPF code a SourceLine with the line's text from BTF."""
        if self.bpf is None:
            return "??:0"
        return self.bpf.srcline(ip)


class SourceLine(str):
    """A source-line cell: "file:line  text" as shown, the two parts kept (--json)."""

    location: str
    source: str

    def __new__(cls, location: str, source: str) -> SourceLine:
        self = super().__new__(cls, f"{location}  {source}" if source else location)
        self.location = location
        self.source = source
        return self


def source_text(text: str) -> str:
    """A BTF source line for one column: indentation and runs of blanks made one space."""
    return " ".join(text.split())
