"""The bulk pass's sums: a delivery's samples, each with its symbol, comm and call chain
as small integer ids (Interned), added to the rows and stacks of their events in the
keys the record-by-record pass makes (query.KeyLayout), one dict update per distinct key.
"""

from __future__ import annotations

from typing import Any

from bpfsym.read.arrays import stable_argsort
from bpfsym.read.bulk import NotBulk
from bpfsym.read.perfdata import PerfData
from bpfsym.report.aggregates import Aggregates, add_to
from bpfsym.report.groups import BIG, dense
from bpfsym.report.query import ReportQuery
from bpfsym.report.window import Samples
from bpfsym.symbolize.symbolizer import Symbolizer
from bpfsym.symbolize.symbols import Sym


class Interned:
    """Symbols, comms and call chains numbered in the order they are first met."""

    def __init__(self, sym: Symbolizer) -> None:
        self.sym = sym
        self.sym_ids: dict[int, int] = {}  # by id(Sym): one Sym per symbol
        self.syms: list[Sym] = []
        self.comm_ids: dict[str, int] = {}
        self.comm_names: list[str] = []
        self.chain_ids: dict[tuple[Sym, ...], int] = {}
        self.chains: list[tuple[Sym, ...]] = []

    def sym_id(self, s: Sym) -> int:
        i = self.sym_ids.get(id(s))
        if i is None:
            i = self.sym_ids[id(s)] = len(self.syms)
            self.syms.append(s)
        return i

    def comm_id(self, tid: int) -> int:
        """The id of tid's comm now (":<tid>" when none was seen, as perf shows it)."""
        c = self.sym.comms.get(tid)
        if c is None:
            c = f":{tid}"
        i = self.comm_ids.get(c)
        if i is None:
            i = self.comm_ids[c] = len(self.comm_names)
            self.comm_names.append(c)
        return i

    def chain_id(self, chain: tuple[Sym, ...]) -> int:
        i = self.chain_ids.get(chain)
        if i is None:
            i = self.chain_ids[chain] = len(self.chains)
            self.chains.append(chain)
        return i


class Accumulator:
    """Adds delivered samples to an Aggregates."""

    def __init__(
        self, np: Any, pd: PerfData, query: ReportQuery, agg: Aggregates, ids: Interned
    ) -> None:
        self.np = np
        self.attrs = pd.attrs
        self.layout = query.layout
        self.bpf_only = query.bpf_only
        self.agg = agg
        self.ids = ids

    def new_events(self, samples: Samples) -> None:
        """EventStats for events first seen here (the report lists events in attr order:
        analysis._analysis)."""
        np = self.np
        ev = samples["ev"]
        events = self.agg.events
        if events:  # usually every one is known after the first delivery: one look
            known = np.zeros(len(self.attrs), dtype=bool)
            known[list(events)] = True
            if bool(known[ev].all()):
                return
        for e in np.flatnonzero(np.bincount(ev, minlength=len(self.attrs))).tolist():
            self.agg.event(self.attrs[e])

    def _bpf(self, sym_of: Any) -> Any:
        """The samples in BPF code (--bpf-only)."""
        np = self.np
        is_bpf = np.array([s.bpf is not None for s in self.ids.syms], dtype=bool)
        return np.flatnonzero(is_bpf[sym_of])

    def _kept(self, sym_of: Any, hidden: Any) -> Any:
        """The samples that make rows (None: all): in BPF code with --bpf-only, not
        hidden by --comms/--pid/--tid (hidden: per sample, or None)."""
        if hidden is None:
            return self._bpf(sym_of) if self.bpf_only else None
        show = ~hidden
        if self.bpf_only:
            is_bpf = self.np.array([s.bpf is not None for s in self.ids.syms], dtype=bool)
            show &= is_bpf[sym_of]
        return self.np.flatnonzero(show)

    def _head_columns(self, samples: Samples, comm_of: Any) -> list[tuple[Any, int]]:
        """(column, its number of values) of the key parts before the symbol: event,
        comm, tid, cpu."""
        np = self.np
        cols: list[tuple[Any, int]] = [(samples["ev"], len(self.attrs))]
        if comm_of is not None:
            cols.append((comm_of, len(self.ids.comm_names)))
        if self.layout.tid:
            cols.append(dense(np, samples["tid"].astype(np.int64)))
        if self.layout.cpu:
            cols.append(dense(np, samples["cpu"] + 1))
        return cols

    def rows(
        self,
        samples: Samples,
        sym_of: Any,
        addr_of: Any,
        naddr: int,
        comm_of: Any,
        hidden: Any = None,
    ) -> None:
        """Add the samples to the rows of their events (sym_of, addr_of, comm_of: each
        sample's symbol id, address group, comm id or None; hidden: counted, no row)."""
        np = self.np
        layout = self.layout
        ev = samples["ev"]
        period = samples["period"]
        nev = len(self.attrs)
        n_ev = np.bincount(ev, minlength=nev).tolist()
        events = self.agg.events
        for e in np.flatnonzero(n_ev).tolist():
            st = events[e]
            st.samples += n_ev[e]
            st.period += int(period[ev == e].sum()) if nev > 1 else int(period.sum())
        self.agg.total += len(ev)
        keep = self._kept(sym_of, hidden)
        cols = self._head_columns(samples, comm_of)
        cols.append((sym_of, len(self.ids.syms)))
        if layout.ip:
            cols.append((addr_of, naddr))
        key = np.zeros(len(ev), dtype=np.int64)
        room = 1
        for col, radix in cols:
            room *= max(radix, 1)
            if room >= 1 << 62:
                raise NotBulk("too many rows")
            key = key * max(radix, 1) + col
        at = np.arange(len(ev), dtype=np.int64)
        if keep is not None:
            key, period, at = key[keep], period[keep], keep
        if not len(key):
            return
        nrows, counts, sums, first = group_totals(np, key, period, at)
        ev_l = ev[first].tolist()
        # the keys of the record-by-record pass: (cpu?, comm, tid, sym, ip?)
        parts: list[list[Any]] = []
        if layout.cpu:
            parts.append(samples["cpu"][first].tolist())
        if comm_of is not None:
            names = self.ids.comm_names
            parts.append([names[c] for c in comm_of[first].tolist()])
            parts.append(samples["tid"][first].tolist() if layout.tid else [0] * nrows)
        syms = self.ids.syms
        parts.append([syms[i] for i in sym_of[first].tolist()])
        if layout.ip:
            parts.append(samples["ip"][first].tolist())
        one = events[ev_l[0]].rows if nev == 1 else None
        for q, (k, p, c) in enumerate(zip(zip(*parts, strict=True), sums, counts, strict=True)):
            add_to(one if one is not None else events[ev_l[q]].rows, k, p, c)

    def stacks(
        self, samples: Samples, sym_of: Any, chain_of: Any, comm_of: Any, hidden: Any = None
    ) -> None:
        """Add the samples' call chains (chain_of: each sample's chain id) to the stacks
        of their events."""
        np = self.np
        layout = self.layout
        ev = samples["ev"]
        period = samples["period"]
        at = self._kept(sym_of, hidden)
        if at is None:
            at = np.arange(len(ev), dtype=np.int64)
        if not len(at):
            return
        nchains = len(self.ids.chains)
        key = np.zeros(len(ev), dtype=np.int64)
        room = 1
        for col, radix in self._head_columns(samples, comm_of):
            room *= max(radix, 1)
            key = key * max(radix, 1) + col
        if room * max(nchains, 1) >= 1 << 62:
            raise NotBulk("too many stacks")
        key = (key * nchains + chain_of)[at]
        nstacks, counts, sums, first = group_totals(np, key, period[at], at)
        ev_l = ev[first].tolist()
        chain_l = chain_of[first].tolist()
        comm_l = comm_of[first].tolist() if comm_of is not None else None
        tid_l = samples["tid"][first].tolist()
        cpu_l = samples["cpu"][first].tolist()
        names = self.ids.comm_names
        chains = self.ids.chains
        events = self.agg.events
        want_tid, want_cpu = layout.tid, layout.cpu
        for q in range(nstacks):
            # the key's head, as KeyLayout.stack_head has it: (cpu?, comm, tid)
            head: tuple = (
                (names[comm_l[q]], tid_l[q] if want_tid else 0) if comm_l is not None else ()
            )
            if want_cpu:
                head = (cpu_l[q], *head)
            add_to(events[ev_l[q]].stacks, (head, chains[chain_l[q]]), sums[q], counts[q])


def group_totals(np: Any, key: Any, period: Any, at: Any) -> tuple[int, list[int], list[int], Any]:
    """Rows by key: (number of rows, samples per row, period per row, first sample index)."""
    inv, nrows = dense(np, key)
    counts = np.bincount(inv, minlength=nrows).tolist()
    if int(period.sum()) < 1 << 53:  # float sums of integers stay exact
        sums = [int(x) for x in np.bincount(inv, weights=period.astype(np.float64)).tolist()]
    else:
        perm = stable_argsort(np, inv)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        sums = np.add.reduceat(period[perm], starts).tolist()
    first = np.full(nrows, BIG, dtype=np.int64)
    np.minimum.at(first, inv, at)
    return nrows, counts, sums, first
