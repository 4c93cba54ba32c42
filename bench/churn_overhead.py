"""What recording costs a program loader, and how many JIT images each recorder keeps.

    python3 -P bench/churn_overhead.py [--rates 10,100,1000] [--seconds 4]
        [--test-runs 0,1] [--modes perf,bpfsym] [--object] [--repeat 1]

For each rate and test-run setting, bench/churner.c (built here, libbpf) loads programs
at that rate for --seconds under each mode, in one run:

  perf     perf record -e cpu-clock -a -o X -- churner ...
  bpfsym   python -P -m bpfsym record -e cpu-clock -a -o X -- churner ...
  no-ns    the same with --no-perf-namespace (perf as it is)
  no-nice  bpfsym with its fetch and writer threads at nice 0 (BPFSYM_NO_NICE=1)

Load n is due at start + n/rate and a late load is not skipped, so a loader slowed by
the recorder makes fewer loads in the time: "loads" is what it made, "x perf" that over
the loads made under plain perf in the same run (medians of --repeat runs; "min": the
fewest loads and the lowest bpfsym image share of those runs). --test-runs 1 runs each program once
(BPF_PROG_TEST_RUN) between load and close. Images: of the churned programs, the share
whose JIT image perf kept (a bpf_prog_info entry in perf.data's header, `perf report
--header-only`) and bpfsym kept (side file, bpfsym's own reader). Programs are 2-insn
socket filters closed at once (as libbpf's probes), or with --object bpf/churn.bpf.o
through libbpf (three functions, and libbpf's probe program: two loads per copy).

Also per load: the loader's involuntary context switches (each time something on its CPU
preempted it), the pinner processes' wake-ups (voluntary context switches, sampled from
/proc every 20 ms), and the CPU time of everything the recorder ran but the loader
(wait4's rusage: perf, bpfsym, its pinners), start and stop included. The machine is
shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from churn import perf_prog_ids  # noqa: E402

from bpfsym.read.sidefile import read_capture  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def build_churner(out: Path) -> Path:
    exe = out / "churner"
    subprocess.run(
        ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", str(REPO / "bench" / "churner.c"),
         "-o", str(exe), "-lbpf"],
        check=True,
    )  # fmt: skip
    return exe


def _role(cmdline: str) -> str:
    argv = cmdline.split("\0")
    exe = os.path.basename(argv[0])
    if "bpfsym.live.pinner" in argv:
        return "pinner"
    if exe == "churner":
        return "loader"
    if exe == "perf":
        return "perf"
    if any(a.endswith("kallsyms_split.py") for a in argv):
        return "kallsyms reader"
    return "recorder"


class ProcStats(threading.Thread):
    """Polls the tree under pid: the last CPU time and context switches seen per process."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = pid
        self.seen: dict[int, tuple[str, float, int, int]] = {}  # pid -> role, cpu s, vcs, ivcs
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.sample()

    def sample(self) -> None:
        kids: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
        todo, tree = [self.root], []
        while todo:
            p = todo.pop()
            tree.append(p)
            todo += kids.get(p, [])
        for p in tree:
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{p}/status") as f:
                    st = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / CLK  # utime + stime
            vcs = int(st["voluntary_ctxt_switches"])
            ivcs = int(st["nonvoluntary_ctxt_switches"])
            self.seen[p] = (_role(cmd), cpu, vcs, ivcs)

    def by_role(self) -> dict[str, tuple[float, int, int]]:
        out: dict[str, list[float]] = {}
        for role, cpu, vcs, ivcs in self.seen.values():
            acc = out.setdefault(role, [0.0, 0, 0])
            acc[0] += cpu
            acc[1] += vcs
            acc[2] += ivcs
        return {k: (v[0], int(v[1]), int(v[2])) for k, v in out.items()}


def run_one(
    mode: str, churn: list[str], data: Path, perf: str
) -> tuple[dict[str, object], dict[str, tuple[float, int, int]], float, float | None]:
    """One recording: (churner output, per-role stats, perf image share, bpfsym image share)."""
    rec = ["-e", "cpu-clock", "-a", "-o", str(data), "--", *churn]
    if mode == "perf":
        cmd = [perf, "record", *rec]
    elif mode == "bpfsym":
        cmd = [sys.executable, "-P", "-m", "bpfsym", "record", *rec]
    elif mode == "no-nice":
        cmd = [sys.executable, "-P", "-m", "bpfsym", "record", *rec]
    elif mode == "no-ns":
        cmd = [sys.executable, "-P", "-m", "bpfsym", "record", "--no-perf-namespace", *rec]
    else:
        raise SystemExit(f"unknown mode {mode}")
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        env = dict(os.environ, BPFSYM_NO_NICE="1" if mode == "no-nice" else "0")
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        stats = ProcStats(p.pid)
        stats.start()
        # wait4: the CPU time of the recorder and every process it reaped (pinners, perf,
        # and the churner, whose own time it reports and is taken off below)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        stats.stop.set()
        stats.join()
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{errors}")
    got = json.loads(text.strip().splitlines()[-1])
    got["recorder_cpu_s"] = ru.ru_utime + ru.ru_stime - int(got["cpu_ns"]) / 1e9
    ids = set(got["prog_ids"])
    n = max(len(ids), 1)
    perf_share = len(perf_prog_ids(data) & ids) / n
    side: float | None = None
    if mode != "perf":
        cap = read_capture(str(data) + ".bpfsym")
        side = sum(1 for q in cap.programs if q.id in ids and q.has_image) / n
    return got, stats.by_role(), perf_share, side


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rates", default="10,100,1000")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--test-runs", default="0,1", help="comma list: runs per program (0: none)")
    ap.add_argument("--modes", default="perf,bpfsym")
    ap.add_argument("--object", action="store_true", help="churn bpf/churn.bpf.o via libbpf")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each mode (interleaved)")
    ap.add_argument("--perf", default="perf")
    a = ap.parse_args()
    modes = a.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="bpfsym-churn-") as d:
        tmp = Path(d)
        exe = build_churner(tmp)
        print(f"# {os.uname().release}, {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.2f} at start (shared machine: noisy)")  # fmt: skip
        print(f"# churner: {'bpf/churn.bpf.o via libbpf' if a.object else '2-insn socket filters'}, "
              f"{a.seconds:g} s per run, {a.repeat} run(s) per mode")  # fmt: skip
        head = (f"{'loads/s':>7} {'test':>4} {'mode':<7} {'loads':>6} {'min':>6} {'x perf':>6} "
                f"{'perf img':>8} {'bpfsym img':>10} {'min img':>8} {'preempt/load':>12} "
                f"{'wakes/load':>10} {'rec CPU/load':>12}")  # fmt: skip
        print(head)
        for rate in (int(r) for r in a.rates.split(",")):
            for runs in (int(t) for t in a.test_runs.split(",")):
                churn = [str(exe), str(REPO / "bpf" / "churn.bpf.o") if a.object else "--raw",
                         "--rate", str(rate), "--seconds", str(a.seconds)]  # fmt: skip
                if runs:
                    churn += ["--test-run", str(runs)]
                results: dict[str, list[tuple]] = {m: [] for m in modes}
                for _ in range(a.repeat):
                    for m in modes:
                        results[m].append(run_one(m, churn, tmp / f"{m}.data", a.perf))
                base = statistics.median(int(r[0]["loaded"]) for r in results.get("perf", [])) \
                    if "perf" in results else None  # fmt: skip
                for m in modes:
                    rs = results[m]
                    loads = statistics.median(int(r[0]["loaded"]) for r in rs)
                    pimg = statistics.median(r[2] for r in rs)
                    simg = statistics.median(r[3] for r in rs) if rs[0][3] is not None else None
                    smin = min(r[3] for r in rs) if rs[0][3] is not None else None
                    lmin = min(int(r[0]["loaded"]) for r in rs)
                    preempt = statistics.median(
                        int(r[0]["nivcsw"]) / max(int(r[0]["loaded"]), 1) for r in rs
                    )
                    wakes = statistics.median(
                        r[1].get("pinner", (0, 0, 0))[1] / max(int(r[0]["loaded"]), 1) for r in rs
                    )
                    cpu = statistics.median(
                        float(r[0]["recorder_cpu_s"]) / max(int(r[0]["loaded"]), 1) for r in rs
                    )
                    ratio = f"{loads / base:.2f}" if base else "-"
                    sim = f"{simg:.1%}" if simg is not None else "-"
                    smn = f"{smin:.1%}" if smin is not None else "-"
                    wk = f"{wakes:.2f}" if m != "perf" else "-"
                    print(f"{rate:>7} {runs:>4} {m:<7} {loads:>6.0f} {lmin:>6} {ratio:>6} "
                          f"{pimg:>8.1%} {sim:>10} {smn:>8} {preempt:>12.2f} {wk:>10} "
                          f"{cpu * 1e6:>10.0f}us")  # fmt: skip
                    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
