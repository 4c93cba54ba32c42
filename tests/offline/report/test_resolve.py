"""report.resolve.plain_kernel: kernel addresses named from kallsyms in one lookup are
only those no other code (BPF, out-of-line, a module's map) ever covers, up to the
address space's last byte. _Chains._plain: the call chain groups whose chain is their
slots' symbols, numbered alike when those are alike."""

from __future__ import annotations

import types

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.read.kallsyms import KernelSymbols
from bpfsym.report.resolve import _Chains, plain_kernel
from bpfsym.symbolize.symbolizer import KERNEL_MAP_DSO, Symbolizer

TOP = 1 << 64


def _symbolizer() -> Symbolizer:
    text = "ffffffff81000000 T _stext\nffffffffffffff00 T last_page_fn\n"
    sym = Symbolizer(KernelSymbols.from_text(text, "test", np=np), "")
    sym.kmaps = [(0xFFFFFFFF80000000, TOP, KERNEL_MAP_DSO)]
    return sym


def test_code_that_runs_to_the_last_address_covers_it() -> None:
    ips = np.array([0xFFFFFFFF81000010, TOP - 0x80, TOP - 1], dtype=np.uint64)
    sym = _symbolizer()
    got = plain_kernel(np, sym, [], ips)
    assert got is not None and got[0].tolist() == [0, 1, 2]  # kallsyms' own, all three
    sym.ool[TOP - 0x40] = (0x40, "__ool_tail")  # out-of-line code up to the last byte
    got = plain_kernel(np, sym, [], ips)
    assert got is not None and got[0].tolist() == [0, 1]
    sym.ool.clear()
    sym.kmaps.append((TOP - 0x100, TOP, "[mod]"))  # a module's map, the same
    sym.kmaps.sort()
    got = plain_kernel(np, sym, [], ips)
    assert got is not None and got[0].tolist() == [0]


def test_kallsyms_names_only_what_lies_in_the_kernels_own_map() -> None:
    ips = np.array([0x7F0000001000, 0xFFFFFFFF81000010, TOP - 0x80], dtype=np.uint64)
    sym = _symbolizer()
    sym.kmaps = [(0xFFFFFFFF80000000, TOP - 0x100, KERNEL_MAP_DSO)]  # ends before the top
    got = plain_kernel(np, sym, [], ips)
    assert got is not None and got[0].tolist() == [1]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_plain_groups_are_those_whose_chain_is_their_slots_symbols(n, nslots, seed):
    rng = np.random.default_rng(seed)
    syms = [object() for _ in range(max(nslots // 2, 1))]
    slot_sym = [syms[i] for i in rng.integers(0, len(syms), nslots)]  # slots alike in symbol
    slot_unres = (rng.random(nslots) < 0.15).tolist()
    nnodes = rng.integers(0, 4, n)
    node_slots = rng.integers(0, nslots, int(nnodes.sum()))
    own = np.where(rng.random(n) < 0.4, rng.integers(0, nslots, n), -1)
    alone, odd = rng.random(n) < 0.1, rng.random(n) < 0.1
    order = rng.permutation(n)  # the walk's order of the groups
    chains = types.SimpleNamespace(
        np=np, groups=types.SimpleNamespace(count=n), order=order, slot_sym=slot_sym,
        slot_unres=slot_unres, own_slot_a=own,
        nstart_a=np.concatenate(([0], np.cumsum(nnodes))), node_slots_a=node_slots,
        alone_a=alone, odd_a=odd,
    )  # fmt: skip
    plain, seq, visit = _Chains._plain(chains)  # type: ignore[arg-type]
    # by definition (chain_of): a group neither alone nor odd, with nodes, whose own entry
    # (when it has a slot) and nodes all have symbols, else whose first node has one
    start = np.concatenate(([0], np.cumsum(nnodes)))
    nodes = [node_slots[start[g] : start[g + 1]].tolist() for g in range(n)]
    want = [
        bool(nodes[g]) and not alone[g] and not odd[g]
        and (
            not slot_unres[own[g]] and not any(slot_unres[k] for k in nodes[g])
            if own[g] >= 0 else not slot_unres[nodes[g][0]]
        )
        for g in range(n)
    ]  # fmt: skip
    assert plain.tolist() == want
    chain = [
        tuple(slot_sym[k] for k in ([own[g]] if own[g] >= 0 else []) + nodes[g]) for g in range(n)
    ]
    for g in range(n):
        assert (seq[g] >= 0) == want[g]
        for h in range(n):
            if want[g] and want[h]:
                assert (seq[g] == seq[h]) == (chain[g] == chain[h])
    # visited: every group in walk order but a plain one after a plain one of its chain
    seen, visits = set(), []
    for g in order.tolist():
        if not want[g]:
            visits.append(g)
        elif chain[g] not in seen:
            seen.add(chain[g])
            visits.append(g)
    assert visit.tolist() == visits
