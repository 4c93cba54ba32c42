"""User-space symbols for the bulk pass, many addresses at once: each group's address
looked up in the memory maps its (pid, map changes) state had, then in the ELF symbols
of the file mapped there, one file at a time (Symbolizer.user_file_syms).

It gives what Symbolizer.resolve_user gives one address at a time: the same Sym
objects, and the same "[unknown]" ones when no map covers the address.
"""

from __future__ import annotations

from typing import Any

from bpfsym.read.arrays import stable_argsort, unique
from bpfsym.read.bulk import NotBulk
from bpfsym.report.accumulate import Interned
from bpfsym.symbolize.symbolizer import Symbolizer
from bpfsym.symbolize.symbols import Sym


def user_group_syms(
    np: Any,
    sym: Symbolizer,
    ids: Interned,
    group_sym: Any,
    groups: Any,
    state: Any,
    ips: Any,
    maps: list[tuple],
) -> None:
    """Set group_sym[groups] to the symbol ids of user-space groups at addresses ips,
    each looked up in the memory maps of its state (maps[state])."""
    codes, syms = user_syms(np, sym, state, ips, maps)
    sym_ids = np.array([ids.sym_id(s) for s in syms], dtype=np.int64)
    group_sym[groups] = sym_ids[codes]


def user_syms(
    np: Any, sym: Symbolizer, state: Any, ips: Any, maps: list[tuple]
) -> tuple[Any, list[Sym]]:
    """The symbols of user-space addresses ips, each looked up in the memory maps of its
    state (maps[state]): an index per address into the list of symbols returned."""
    # every state's maps as one sorted table of (state, start) -> map entry
    entry_ids: dict[int, int] = {}
    entries: list[Any] = []
    table_entry: list[int] = []
    table_state: list[int] = []
    for s, state_maps in enumerate(maps):
        for m in state_maps:
            e = entry_ids.get(id(m))
            if e is None:
                e = entry_ids[id(m)] = len(entries)
                entries.append(m)
            table_entry.append(e)
        table_state.extend([s] * len(state_maps))
    files: dict[tuple[str, str], int] = {}
    entry_file = np.array(
        [files.setdefault((m.filename, m.build_id), len(files)) for m in entries], dtype=np.int64
    )
    entry_start = np.array([m.start for m in entries], dtype=np.uint64)
    entry_end = np.array([m.end for m in entries], dtype=np.uint64)
    entry_pgoff = np.array([m.pgoff for m in entries], dtype=np.uint64)
    map_entry = np.array(table_entry, dtype=np.int64)
    map_state = np.array(table_state, dtype=np.int64)
    map_start = entry_start[map_entry]
    state = state.astype(np.int64)
    top = max(int(ips.max()), int(map_start.max()) if len(map_start) else 0)
    state_bits = max(len(maps) - 1, 1).bit_length()
    if state_bits + top.bit_length() <= 63:
        addr_bits, map_addr, group_addr = top.bit_length(), map_start, ips
    else:  # addresses by rank among them all (order is all the lookup needs)
        _, rank = unique(np, np.concatenate([map_start, ips]))
        addr_bits = max(int(rank.max()), 1).bit_length()
        map_addr, group_addr = rank[: len(map_start)], rank[len(map_start) :]
        if state_bits + addr_bits > 63:
            raise NotBulk("too many memory maps")
    shift = np.uint64(addr_bits)
    map_key = (map_state.astype(np.uint64) << shift) | map_addr.astype(np.uint64)
    group_key = (state.astype(np.uint64) << shift) | group_addr.astype(np.uint64)
    below = np.searchsorted(map_key, group_key, side="right").astype(np.int64) - 1
    row = np.maximum(below, 0)  # the table row of the map starting at or below each
    if len(map_entry):
        entry = map_entry[row]
        inside = (below >= 0) & (map_state[row] == state) & (ips < entry_end[entry])
    else:  # no maps at all: nothing inside
        entry = np.zeros(len(ips), dtype=np.int64)
        inside = below < -1
    codes = np.zeros(len(ips), dtype=np.int64)
    syms: list[Sym] = []
    outside = np.flatnonzero(~inside)
    if len(outside):
        nmaps = np.bincount(map_state, minlength=len(maps))
        empty = (nmaps[state[outside]] == 0).tolist()
        for i, ip, none in zip(outside.tolist(), ips[outside].tolist(), empty, strict=True):
            why = "no memory map for the process" if none else "address outside every memory map"
            codes[i] = len(syms)
            syms.append(sym.unresolved("[unknown]", ".", ip, why))
    mapped = np.flatnonzero(inside)
    if not len(mapped):
        return codes, syms
    entry = entry[mapped]
    rel = ips[mapped] - entry_start[entry] + entry_pgoff[entry]  # the file offset mapped there
    file = entry_file[entry]
    order = stable_argsort(np, file)
    bounds = np.flatnonzero(np.diff(file[order])) + 1
    for part in np.split(order, bounds):  # the addresses in one file
        m = entries[int(entry[part[0]])]
        got, file_syms = sym.user_file_syms(np, m, rel[part])
        codes[mapped[part]] = got + len(syms)
        syms.extend(file_syms)
    return codes, syms
