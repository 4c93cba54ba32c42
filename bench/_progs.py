"""Hold N BPF programs loaded, as a busy host does: for bench/ scripts.

    python3 bench/_progs.py hold N [--dir DIR]     # load, pin under DIR, print ids, exit
    python3 bench/_progs.py release DIR            # unpin at a bounded rate
    python3 bench/_progs.py count                  # programs and [bpf] kallsyms lines now

Each program is a copy of bpf/demo.bpf.o's xdp_demo (a main function calling three
sub-programs: four JIT functions, four [bpf] kallsyms lines), loaded through libbpf
(ctypes on libbpf.so.1, the loader's library) so that every copy carries BTF, func_info
and line_info like a real libbpf object. The copies share the first copy's maps
(bpf_map__reuse_fd): the programs are what is being measured, not thousands of maps.

Programs are pinned in bpffs under a directory unique to this process, then libbpf's
fds are closed: nothing needs RLIMIT_NOFILE while they are held, a bench killed half way
leaves pins that `release` removes, and the kernel (6.18, memcg accounting) charges no
RLIMIT_MEMLOCK. Release unlinks 64 pins at a time and waits for an RCU grace period
(membarrier GLOBAL) between batches: thousands of programs freed at once deadlocked this
VM's bpf_prog_pack allocator once (docs/kernel-notes.md).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bpfsym.live import progs  # noqa: E402

OBJECT = REPO / "bpf" / "demo.bpf.o"
PROGRAM = b"xdp_demo"
BPFFS = Path("/sys/fs/bpf")
FREE_BATCH = 64
_MEMBARRIER_CMD_GLOBAL = 1  # synchronize_rcu() (include/uapi/linux/membarrier.h)
_NR_MEMBARRIER = 324  # x86_64

_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_quiet = _PRINT_FN(lambda level, fmt, args: 0)  # libbpf's probe warnings: not ours to show


def _libbpf() -> ctypes.CDLL:
    lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
    vp = ctypes.c_void_p
    lib.bpf_object__open_mem.restype = vp
    lib.bpf_object__open_mem.argtypes = [ctypes.c_char_p, ctypes.c_size_t, vp]
    lib.bpf_object__find_program_by_name.restype = vp
    lib.bpf_object__find_program_by_name.argtypes = [vp, ctypes.c_char_p]
    lib.bpf_object__next_program.restype = vp
    lib.bpf_object__next_program.argtypes = [vp, vp]
    lib.bpf_program__set_autoload.argtypes = [vp, ctypes.c_bool]
    lib.bpf_program__fd.argtypes = [vp]
    lib.bpf_object__next_map.restype = vp
    lib.bpf_object__next_map.argtypes = [vp, vp]
    lib.bpf_map__fd.argtypes = [vp]
    lib.bpf_map__name.restype = ctypes.c_char_p
    lib.bpf_map__name.argtypes = [vp]
    lib.bpf_map__reuse_fd.argtypes = [vp, ctypes.c_int]
    lib.bpf_object__find_map_by_name.restype = vp
    lib.bpf_object__find_map_by_name.argtypes = [vp, ctypes.c_char_p]
    lib.bpf_object__load.argtypes = [vp]
    lib.bpf_object__close.argtypes = [vp]
    lib.bpf_obj_pin.argtypes = [ctypes.c_int, ctypes.c_char_p]
    lib.libbpf_set_print(_quiet)
    return lib


def _rcu_sync() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(_NR_MEMBARRIER, _MEMBARRIER_CMD_GLOBAL, 0, 0)


class Held:
    """N pinned copies of xdp_demo; ids ascending in load order."""

    def __init__(self, directory: Path, ids: list[int]) -> None:
        self.dir = directory
        self.ids = ids

    def release(self) -> None:
        release(self.dir)


def hold(n: int, directory: Path | None = None, progress: bool = False) -> Held:
    """Load and pin n copies (n = 0: nothing, no directory)."""
    d = directory or BPFFS / f"bpfsym-bench-{os.getpid()}"
    if n == 0:
        return Held(d, [])
    lib = _libbpf()
    blob = OBJECT.read_bytes()
    d.mkdir(parents=True, exist_ok=False)
    ids: list[int] = []
    maps: dict[bytes, int] = {}  # the first copy's map fds, reused by all others
    first = None
    try:
        for i in range(n):
            obj = lib.bpf_object__open_mem(blob, len(blob), None)
            if not obj:
                raise OSError(ctypes.get_errno(), f"bpf_object__open_mem({OBJECT})")
            prog = None
            while prog := lib.bpf_object__next_program(obj, prog):
                lib.bpf_program__set_autoload(prog, False)
            main = lib.bpf_object__find_program_by_name(obj, PROGRAM)
            lib.bpf_program__set_autoload(main, True)
            for name, fd in maps.items():
                lib.bpf_map__reuse_fd(lib.bpf_object__find_map_by_name(obj, name), fd)
            err = lib.bpf_object__load(obj)
            if err:
                lib.bpf_object__close(obj)
                raise OSError(-err, f"bpf_object__load copy {i}: {os.strerror(-err)}")
            fd = lib.bpf_program__fd(main)
            if lib.bpf_obj_pin(fd, str(d / f"p{i}").encode()):
                e = ctypes.get_errno()
                lib.bpf_object__close(obj)
                raise OSError(e, f"bpf_obj_pin {d}/p{i}: {os.strerror(e)}")
            ids.append(progs.basic_info(fd).id)
            if first is None:
                first = obj  # kept open: its map fds are the shared ones
                m = None
                while m := lib.bpf_object__next_map(obj, m):
                    maps[lib.bpf_map__name(m)] = lib.bpf_map__fd(m)
            else:
                lib.bpf_object__close(obj)
            if progress and (i + 1) % 500 == 0:
                print(f"  held {i + 1}/{n}", file=sys.stderr)
    except BaseException:
        if first is not None:
            lib.bpf_object__close(first)
        release(d)
        raise
    lib.bpf_object__close(first)  # the maps stay: the pinned programs reference them
    return Held(d, ids)


def release(directory: Path) -> None:
    """Unpin everything under directory, FREE_BATCH at a time with a grace period between."""
    if not directory.is_dir():
        return
    pins = sorted(directory.iterdir())
    for i, p in enumerate(pins):
        p.unlink()
        if (i + 1) % FREE_BATCH == 0:
            _rcu_sync()
            time.sleep(0.01)
    _rcu_sync()
    shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def held(n: int, progress: bool = True) -> Iterator[Held]:
    t0 = time.perf_counter()
    h = hold(n, progress=progress)
    if n:
        print(
            f"  {n} programs held ({len(h.ids) * 4} [bpf] functions) in "
            f"{time.perf_counter() - t0:.1f} s under {h.dir}",
            file=sys.stderr,
        )
    try:
        yield h
    finally:
        t0 = time.perf_counter()
        h.release()
        if n:
            print(f"  released in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def count_now() -> tuple[int, int]:
    """(programs loaded, [bpf] lines in /proc/kallsyms) on the host now."""
    n = sum(1 for _ in progs.iter_ids())
    with open("/proc/kallsyms", "rb") as f:
        lines = sum(1 for line in f if line.endswith(b"\t[bpf]\n"))
    return n, lines


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hold")
    h.add_argument("n", type=int)
    h.add_argument("--dir", type=Path)
    r = sub.add_parser("release")
    r.add_argument("dir", type=Path)
    sub.add_parser("count")
    a = ap.parse_args()
    if a.cmd == "hold":
        t0 = time.perf_counter()
        got = hold(a.n, a.dir, progress=True)
        print(f"{got.dir} {len(got.ids)} programs in {time.perf_counter() - t0:.1f} s")
    elif a.cmd == "release":
        release(a.dir)
    else:
        n, lines = count_now()
        print(f"{n} programs, {lines} [bpf] kallsyms lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
