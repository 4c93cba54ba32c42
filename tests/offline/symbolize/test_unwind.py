"""bpfsym.unwind on real `perf record --call-graph dwarf` files, against perf's own reading.

The fixtures (tests/fixtures/dwarf, recorded by its record.py) carry dwarfdemo, the C
library and dynamic loader it mapped (CFI and symbol tables only) and perf's
`perf script` chains of every sample. Each test lays the binaries out under a private
root or build-id cache, so nothing of the machine running the tests is read.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import example, given
from hypothesis import strategies as st
from kit.unwindkit import (
    BINARIES,
    FIX,
    fixture_file,
    perf_children,
    perf_script_chains,
    recorded_files,
    symfs_root,
)

from bpfsym.read import user_stack as R
from bpfsym.read.perfdata import PerfData
from bpfsym.symbolize import cfi as C
from bpfsym.symbolize import unwind as U
from bpfsym.symbolize import unwind_stops as S

FIXTURES = ("cpu", "signal", "bpf")
OURS = ("hot_leaf", "syscall_leaf", "stage_three", "side_path", "stage_two", "stage_one",
        "run_outer", "main", "signal_work", "on_signal")  # fmt: skip


# ---- perf's reading -------------------------------------------------------------------


def perf_text(name: str, what: str) -> str:
    return (FIX / f"{name}.{what}.txt").read_text()


# ---- the binaries, laid out where the unwinder finds them --------------------------------


def build_id_of(path: Path) -> str:
    with open(path, "rb") as f:
        return C._build_id(ELFFile(f))


def buildid_layout(tmp: Path) -> Path:
    """perf's build-id cache layout (.build-id/xx/rest/elf) holding every fixture binary."""
    cache = tmp / "cache"
    for base in BINARIES:
        f = fixture_file(base, tmp / "files" / base)
        bid = build_id_of(f)
        d = cache / ".build-id" / bid[:2] / bid[2:]
        d.mkdir(parents=True)
        os.link(f, d / "elf")
    return cache


def header_build_ids(name: str) -> dict[str, str]:
    with PerfData(str(FIX / f"{name}.data")) as pd:
        return {os.path.basename(b.filename): b.build_id for b in pd.header.build_ids}


def unwinder_for(tmp: Path, name: str, **kw) -> U.Unwinder:
    """An Unwinder that finds the fixture's binaries as bpfsym would on another machine:
    those with a build id in the header (HEADER_BUILD_ID: perf lists the files with
    sample hits) only through a build-id cache, the others at their recorded paths
    under a private root (-z recordings have no build ids at all)."""
    with_ids = tuple(header_build_ids(name))
    return U.Unwinder(
        root=str(symfs_root(tmp, FIX / f"{name}.data", skip=with_ids)),
        buildid_dir=str(buildid_layout(tmp)),
        debug_dirs=(),
        **kw,
    )


def samples(name: str, unwinder: U.Unwinder) -> Iterator[U.UnwoundSample]:
    yield from U.unwind_samples(str(FIX / f"{name}.data"), unwinder)


def perf_view(s: U.UnwoundSample, ips: tuple[int, ...]) -> list[int]:
    """A sample's kernel chain, then the user ips as perf script prints them (relative to
    the DSO: address - map start + pgoff)."""
    out = list(s.kernel)
    for ip in ips:
        m = s.maps(ip)
        out.append(ip - m.start + m.pgoff if m is not None else ip)
    return out


class Symbols:
    """Function symbols of a fixture binary (pyelftools), looked up by address."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            tab = ELFFile(f).get_section_by_name(".symtab")
            self.funcs = sorted(
                (s["st_value"], s["st_value"] + s["st_size"], s.name)
                for s in tab.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_size"]
            )

    def name(self, addr: int) -> str | None:
        for lo, hi, n in self.funcs:
            if lo <= addr < hi:
                return n
        return None


# ---- chains equal perf's ----------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_every_chain_equals_perfs(tmp_path, name):
    perf = perf_script_chains(perf_text(name, "perf-script"))
    syms = Symbols(FIX / "dwarfdemo")
    uw = unwinder_for(tmp_path, name)
    seen = 0
    through_kernel = 0
    for s in samples(name, uw):
        theirs = perf.pop((s.tid, s.time))
        assert s.user is not None
        assert s.user.reason is None, (s.time, s.user)
        ours = perf_view(s, s.user.ips)
        assert ours == [ip for ip, _ in theirs], (s.time, s.user)
        # dwarfdemo's frames by name too, from its own symbol table
        for ip, (_rel, sym) in zip(s.user.ips, theirs[len(s.kernel) :], strict=True):
            m = s.maps(ip)
            if m is not None and os.path.basename(m.filename) == "dwarfdemo":
                assert syms.name(ip - m.start + m.pgoff) == sym
        seen += 1
        through_kernel += bool(s.kernel)
    assert not perf, f"perf has {len(perf)} samples the file reading missed"
    assert seen > 200
    if name == "bpf":
        assert through_kernel > seen / 2


def test_bpf_samples_show_the_syscall_path(tmp_path):
    """Samples in the BPF program: its kernel chain, then the user path into getppid."""
    perf = perf_script_chains(perf_text("bpf", "perf-script"))
    n = 0
    for s in samples("bpf", unwinder_for(tmp_path, "bpf")):
        theirs = perf[(s.tid, s.time)]
        if not theirs[0][1].startswith("bpf_prog_"):
            continue
        n += 1
        names = [sym for _ip, sym in theirs]
        k = len(s.kernel)
        assert all(ip >= 1 << 63 for ip in s.kernel)
        assert "entry_SYSCALL_64_after_hwframe" in names[:k]
        user = names[k:]
        assert "getppid" in user[0]
        assert user[1:8] == ["syscall_leaf", "stage_three", "stage_two", "stage_one",
                             "run_outer", "main", "__libc_start_call_main"]  # fmt: skip
    assert n > 100


def test_signal_frames(tmp_path):
    """Through glibc's __restore_rt: the handler's frames, then the interrupted ones."""
    perf = perf_script_chains(perf_text("signal", "perf-script"))
    n = 0
    for s in samples("signal", unwinder_for(tmp_path, "signal")):
        names = [sym for _ip, sym in perf[(s.tid, s.time)]]
        if "on_signal" not in names:
            continue
        n += 1
        i = names.index("on_signal")
        assert names[i + 2] in OURS  # the interrupted function, past the trampoline
        assert names[-1] == "_start"
        assert len(s.user.ips) == len(names)
    assert n >= 50


def test_children_totals_equal_perfs(tmp_path):
    """The children totals the report will show, from these chains: perf's exactly."""
    perf = perf_children(perf_text("cpu", "perf-children"))
    syms = Symbols(FIX / "dwarfdemo")
    total = 0
    children: dict[str, int] = {}
    for s in samples("cpu", unwinder_for(tmp_path, "cpu")):
        total += s.period
        names = set()
        for ip in s.user.ips:
            m = s.maps(ip)
            if m is not None and os.path.basename(m.filename) == "dwarfdemo":
                names.add(syms.name(ip - m.start + m.pgoff))
        for f in names:
            children[f] = children.get(f, 0) + s.period
    for f in (
        "hot_leaf",
        "stage_three",
        "side_path",
        "stage_two",
        "stage_one",
        "run_outer",
        "main",
    ):
        assert abs(100.0 * children[f] / total - perf[f][0]) < 0.005, f


def test_debug_frame_only_binary(tmp_path):
    """CFI in .debug_frame only: perf 6.1 on x86-64 stops at the leaf (its libunwind is
    built without .debug_frame support); bpfsym unwinds to _start, each caller being
    one perf shows for that callee in the .eh_frame build of the same source (cpu.data)."""
    perf = perf_script_chains(perf_text("debugframe", "perf-script"))
    mine_only = set(OURS) | {"_start"}
    calls = set()  # (callee, caller) as perf unwinds cpu.data
    for c in perf_script_chains(perf_text("cpu", "perf-script")).values():
        names = [sym for _ip, sym in c if sym in mine_only]
        calls |= set(zip(names, names[1:], strict=False))
    syms = Symbols(FIX / "dwarfdemo_df")
    n = 0
    for s in samples("debugframe", unwinder_for(tmp_path, "debugframe")):
        theirs = perf[(s.tid, s.time)]
        if s.kernel:
            continue
        assert s.user.reason is None
        assert [ip for ip, _ in theirs] == perf_view(s, s.user.ips)[:1]  # perf: the leaf only
        names = []
        for ip in s.user.ips:
            m = s.maps(ip)
            if os.path.basename(m.filename) == "dwarfdemo_df":
                names.append(syms.name(ip - m.start + m.pgoff))
        assert set(zip(names, names[1:], strict=False)) <= calls, names
        assert names[-1] == "_start"
        n += 1
    assert n > 50


def test_arm64_chains_equal_the_emulators(tmp_path):
    """arm64: `chain` (fixtures/dwarf/arm64) run in an emulator; at each snapshot the
    unwound chain equals the calls in progress, which the emulator saw executed (every
    BL and RET). The leaf's return address is in x30 (frameless hot_leaf), the
    callers' on the stack."""
    import json

    d = json.loads((FIX / "arm64" / "samples.json").read_text())
    path = tmp_path / "chain"
    shutil.copyfile(FIX / "arm64" / d["binary"], path)
    maps = []
    with open(path, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] == "PT_LOAD":  # as the kernel maps them: whole pages
                lo = seg["p_vaddr"] & ~0xFFF
                hi = (seg["p_vaddr"] + seg["p_memsz"] + 0xFFF) & ~0xFFF
                maps.append(U.FileMap(lo, hi, seg["p_offset"] & ~0xFFF, str(path)))
    ml = U.MapList(maps)
    uw = U.Unwinder(debug_dirs=())
    depths = set()
    for smp in d["samples"]:
        regs = dict(enumerate(smp["regs"]))
        got = uw.unwind("aarch64", regs, bytes.fromhex(smp["stack"]), ml)
        pc = smp["regs"][C.PERF_REG_ARM64_PC]
        assert got == U.Unwound((pc, *[ra - 1 for ra in reversed(smp["calls"])]))
        depths.add(len(got.ips))
    assert len(d["samples"]) > 100 and max(depths) >= 7
    # the x86-64 register set does not unwind an arm64 binary
    got = uw.unwind("x86_64", {7: 0, 8: pc}, b"\0" * 64, ml)
    assert got.reason == U.UNSUPPORTED and "arm64" in got.detail


# ---- how unwinding stops ----------------------------------------------------------------


def reference(tmp_path: Path, name: str = "cpu") -> list[tuple[U.UnwoundSample, bytes, dict]]:
    """Samples of a fixture with their raw user regs and stack, for re-unwinding."""
    out = []
    path = str(FIX / f"{name}.data")
    with PerfData(path) as pd:
        lay = None
        raws = []
        for rtype, _misc, buf, start, size, _off in pd.records():
            if rtype == 9:
                if lay is None:
                    lay = U.UserSampleLayout.of(pd.attr_of_sample(buf, start, size), pd.little)
                raws.append(lay.extract(buf, start, size))
    for s, us in zip(samples(name, unwinder_for(tmp_path, name)), raws, strict=True):
        out.append((s, us.stack, us.regs))
    return out


def test_truncated_stacks_say_so(tmp_path):
    uw = unwinder_for(tmp_path / "u", "cpu")
    truncated = 0
    for s, stack, regs in reference(tmp_path)[:40]:
        full = s.user.ips
        for cut in range(0, len(stack), 24):
            got = uw.unwind("x86_64", regs, stack[:cut], s.maps)
            assert got.ips == full[: len(got.ips)]
            if cut == 0:
                assert got.reason == U.NO_STACK and got.ips == full[:1]
            elif got.reason is not None:
                assert got.reason == S.TRUNCATED, got
                truncated += 1
    assert truncated > 100


def test_missing_binaries_say_so(tmp_path):
    perf = perf_script_chains(perf_text("cpu", "perf-script"))
    root = symfs_root(tmp_path / "a", FIX / "cpu.data", skip=("libc.so.6",))
    uw = U.Unwinder(root=str(root), buildid_dir=str(tmp_path / "none"), debug_dirs=())
    n = 0
    for s in samples("cpu", uw):
        theirs = [ip for ip, _ in perf[(s.tid, s.time)]]
        got = s.user
        # unwound up to the first return address into the C library, if any
        assert perf_view(s, got.ips) == theirs[: len(s.kernel) + len(got.ips)]
        if 0x27249 in theirs:  # __libc_start_call_main's call of main
            assert got.reason == U.NO_BINARY and "libc.so.6" in got.detail
            assert perf_view(s, got.ips)[-1] == 0x27249
            n += 1
    assert n > 200
    # without dwarfdemo itself: the leaf alone
    root = symfs_root(tmp_path / "b", FIX / "cpu.data", skip=("dwarfdemo",))
    uw = U.Unwinder(root=str(root), buildid_dir=str(tmp_path / "none"), debug_dirs=())
    for s in samples("cpu", uw):
        m = s.maps(s.user.ips[0])
        if os.path.basename(m.filename) == "dwarfdemo":
            assert s.user.reason == U.NO_BINARY and len(s.user.ips) == 1


def test_binary_replaced_by_another_build(tmp_path):
    """A file at the recorded path with another build id is not used; perf's build-id
    cache copy is."""
    root = symfs_root(tmp_path, FIX / "cpu.data")
    for f in recorded_files(FIX / "cpu.data"):
        if os.path.basename(f) == "dwarfdemo":
            fixture_file("dwarfdemo_df", root / f.lstrip("/"))
    uw = U.Unwinder(root=str(root), buildid_dir=str(buildid_layout(tmp_path)), debug_dirs=())
    assert all(s.user.reason is None for s in samples("cpu", uw))
    uw = U.Unwinder(root=str(root), buildid_dir=str(tmp_path / "none"), debug_dirs=())
    first = next(samples("cpu", uw)).user
    assert first.reason == U.NO_BINARY and "has build id" in first.detail


def test_binary_without_cfi(tmp_path):
    """dwarfdemo with its .eh_frame renamed away; and an address no FDE covers."""
    root = symfs_root(tmp_path, FIX / "signal.data")
    for f in recorded_files(FIX / "signal.data"):
        if os.path.basename(f) == "dwarfdemo":
            p = root / f.lstrip("/")
            data = bytearray(p.read_bytes())
            with open(p, "rb") as fh:
                e = ELFFile(fh)
                strtab = e.get_section(e["e_shstrndx"])
                lo, hi = strtab["sh_offset"], strtab["sh_offset"] + strtab["sh_size"]
            data[lo:hi] = bytes(data[lo:hi]).replace(b".eh_frame", b".no_frame")
            p.write_bytes(bytes(data))
    uw = U.Unwinder(root=str(root), buildid_dir=str(tmp_path / "none"), debug_dirs=())
    for s in samples("signal", uw):
        if not s.kernel:
            assert s.user.reason == S.NO_CFI and s.user.ips == (s.ip,)
            assert "no .eh_frame or .debug_frame" in s.user.detail
    s, stack, regs = reference(tmp_path / "r")[0]
    m = s.maps(s.ip)
    uw = unwinder_for(tmp_path / "r2", "cpu")
    header = m.start - m.pgoff + 0x10  # inside dwarfdemo's ELF header: no FDE
    got = uw.unwind("x86_64", {**regs, C.PERF_REG_X86_IP: header}, stack, s.maps)
    assert got.reason == S.NO_CFI and got.ips == (header,)
    got = uw.unwind("x86_64", {**regs, C.PERF_REG_X86_IP: 0x10}, stack, s.maps)
    assert got.reason == U.NO_MAP


def test_frame_limit(tmp_path):
    uw = unwinder_for(tmp_path, "cpu", max_frames=4)
    perf = perf_script_chains(perf_text("cpu", "perf-script"))
    for s in samples("cpu", uw):
        theirs = [ip for ip, _ in perf[(s.tid, s.time)]][len(s.kernel) :]
        assert len(s.user.ips) == min(4, len(theirs))
        assert perf_view(s, s.user.ips)[len(s.kernel) :] == theirs[: len(s.user.ips)]
        assert s.user.reason == (U.FRAME_LIMIT if len(theirs) > 4 else None)
    assert U.Unwinder().max_frames == 127  # perf's default (kernel.perf_event_max_stack)


def cold(uw: U.Unwinder, regs: dict, stack: bytes, maps: U.MapLookup) -> U.Unwound:
    """An unwinding that cannot use what uw kept from earlier samples (a new maps object
    each time: no rows, no memo)."""
    return uw.unwind("x86_64", regs, stack, lambda a: maps(a))


def test_memo_gives_what_a_walk_gives(tmp_path):
    """Samples unwound twice with one Unwinder (the second time from its memo of
    walks) and once without anything kept: the same chains and reasons."""
    refs = reference(tmp_path / "r", "signal")
    uw = unwinder_for(tmp_path / "u", "signal")
    first = [uw.unwind("x86_64", regs, stack, s.maps) for s, stack, regs in refs]
    assert sum(len(v) for v in uw._state_for(refs[0][0].maps).memo.values()) > 10
    again = [uw.unwind("x86_64", regs, stack, s.maps) for s, stack, regs in refs]
    assert first == again == [cold(uw, regs, stack, s.maps) for s, stack, regs in refs]


# ---- sample fields ----------------------------------------------------------------------


@pytest.mark.parametrize("name", (*FIXTURES, "debugframe"))
def test_fields_agree_with_the_declared_layout(name):
    """UserSampleLayout's fast reading against the construct declaration of
    formats/perfdata.py (PerfData.parse_sample)."""
    with PerfData(str(FIX / f"{name}.data")) as pd:
        n = 0
        for rtype, _misc, buf, start, size, off in pd.records():
            if rtype != 9:
                continue
            ev = pd.attr_of_sample(buf, start, size)
            got = U.UserSampleLayout.of(ev, pd.little).extract(buf, start, size)
            want = pd.parse_sample(buf, start, size, off)
            nums = [i for i in range(64) if int(ev.attr.sample_regs_user) >> i & 1]
            assert got.abi == want.regs_user.abi
            assert got.regs == dict(zip(nums, want.regs_user.regs or [], strict=True))
            assert got.size == want.stack_user.size
            assert got.stack == want.stack_user.data[: want.stack_user.dyn_size]
            n += 1
    assert n > 100


def test_regs_from_words():
    assert R.regs_from_words([1, 2, 3], 0b10011) == {0: 1, 1: 2, 4: 3}
    with pytest.raises(R.UserStackError):
        R.regs_from_words([1], 0b11)
    with pytest.raises(U.UnwindError):
        U.Unwinder().unwind("mips", {8: 0}, b"", lambda a: None)


# ---- bad input never raises --------------------------------------------------------------


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real")
    return reference(tmp), unwinder_for(tmp / "u", "cpu")


U64 = st.integers(0, (1 << 64) - 1)


@given(data=st.data())
def test_random_registers_and_stacks(real, data):
    refs, uw = real
    s, stack, regs = data.draw(st.sampled_from(refs))
    arch = data.draw(st.sampled_from(["x86_64", "arm64"]))
    kind = data.draw(st.sampled_from(["random", "flipped", "pointers"]))
    if kind == "random":
        regs = data.draw(st.dictionaries(st.integers(0, 40), U64, max_size=30))
        stack = data.draw(st.binary(max_size=1024))
    elif kind == "flipped":
        b = bytearray(stack)
        for _ in range(data.draw(st.integers(1, 40))):
            if b:
                b[data.draw(st.integers(0, len(b) - 1))] ^= data.draw(st.integers(1, 255))
        stack = bytes(b)
    else:
        # stack words pointing back into the stack and into the mapped code
        rnd = random.Random(data.draw(st.integers(0, 1 << 30)))
        sp = regs[C.PERF_REG_X86_SP]
        code = [m.start + rnd.randrange(max(m.end - m.start, 1)) for m in s.maps.maps]
        words = [rnd.choice([sp + 8 * rnd.randrange(64), rnd.choice(code), 0]) for _ in range(64)]
        stack = b"".join(w.to_bytes(8, "little") for w in words)
    sp = data.draw(st.one_of(st.none(), U64))
    got = uw.unwind(
        arch, regs, stack, s.maps, sp=sp, abi=data.draw(st.sampled_from([0, 1, 2, 2, 2]))
    )
    assert isinstance(got, U.Unwound)
    assert len(got.ips) <= uw.max_frames
    assert got.reason is None or isinstance(got.reason, str)


@given(body=st.binary(max_size=600), st_bits=st.integers(0, (1 << 20) - 1), mask=U64)
# a call chain of 2**60 entries put the raw data's offset past any index (OverflowError)
@example(body=bytes(15) + b"\x10", st_bits=1312, mask=0)
def test_random_sample_records(body, st_bits, mask):
    lay = U.UserSampleLayout(st_bits | (1 << 12) | (1 << 13), 0b10101, 1 << 17, mask)
    rec = (
        (9).to_bytes(4, "little")
        + (0).to_bytes(2, "little")
        + (8 + len(body)).to_bytes(2, "little")
        + body
    )
    try:
        got = lay.extract(rec, 0, len(rec))
    except R.UserStackError:
        return
    assert got is not None and len(got.stack) <= got.size
