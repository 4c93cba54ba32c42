"""Every output a speed change must leave alone, written to a directory to diff.

Runs bpfsym report (flat, -g, five --sort lists, --bpf-only, --json, -g --json,
--folded) on the perf.data fixtures, the dwarf fixtures and the corpus, bpfsym annotate
(--stdio and --json of every program with samples) on each file that has a side file,
and the same on any file given with -i; one file per command in OUT, holding the exit
code, stdout and stderr. Run it with the code before and after a change and compare:

    python3 bench/outputs.py /tmp/before --bpfsym OLD_CHECKOUT
    python3 bench/outputs.py /tmp/after
    diff -r /tmp/before /tmp/after     # empty: the change printed nothing differently

Fixtures are read with the kallsyms they carry (tests/fixtures/perfdata/kallsyms.xz),
never the host's; corpus files with --symfs of an empty directory, as the compatibility
test reads them.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from kit.perftext import fixture_kallsyms  # noqa: E402

REPORTS: list[tuple[str, list[str]]] = [
    ("flat", []),
    ("g", ["-g"]),
    ("dso", ["--sort", "dso"]),
    ("dso_sym", ["--sort", "dso,sym"]),
    ("comm_dso_sym", ["--sort", "comm,dso,sym"]),
    ("prog", ["--sort", "prog"]),
    ("sym_srcline", ["--sort", "sym,srcline"]),
    ("bpf_only", ["--bpf-only"]),
    ("json", ["--json"]),
    ("g_json", ["-g", "--json"]),
    ("folded", ["-g", "--folded"]),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="directory for the outputs (made; must not hold any)")
    ap.add_argument("-i", "--input", action="append", default=[], help="another perf.data")
    ap.add_argument("--bpfsym", metavar="CHECKOUT", help="run another checkout's bpfsym")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-corpus", action="store_true", help="leave out the 67 corpus files")
    a = ap.parse_args()
    os.makedirs(a.out)
    env = dict(os.environ)
    if a.bpfsym:
        env["PYTHONPATH"] = os.path.abspath(a.bpfsym)
    else:
        env["PYTHONPATH"] = ROOT
    # one fixed place: the kallsyms file's name is in the reports' headers
    tmp = os.path.join(tempfile.gettempdir(), "bpfsym-outputs")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    kallsyms = fixture_kallsyms(tmp)
    empty = os.path.join(tmp, "symfs")
    os.mkdir(empty)
    files: list[tuple[str, str, list[str]]] = []  # name, path, extra options
    for p in sorted(glob.glob(os.path.join(FIX, "perfdata", "*.data"))):
        files.append(("fix_" + os.path.basename(p), p, ["--kallsyms", kallsyms]))
    for p in sorted(glob.glob(os.path.join(FIX, "dwarf", "*.data"))):
        files.append(("dwarf_" + os.path.basename(p), p, ["--kallsyms", kallsyms]))
    if not a.no_corpus:
        corpus = os.path.join(FIX, "perfdata-corpus")
        for p in sorted(os.listdir(corpus)):
            if p in ("SOURCES.tsv", "README.md"):
                continue
            files.append(("corpus_" + p, os.path.join(corpus, p), ["--symfs", empty]))
    for p in a.input:
        files.append(("input_" + os.path.basename(p), os.path.abspath(p), []))

    def run(name: str, cmd: list[str]) -> None:
        r = subprocess.run(
            [sys.executable, "-m", "bpfsym", *cmd], capture_output=True, env=env, cwd=tmp
        )
        with open(os.path.join(a.out, name), "wb") as o:
            o.write(b"exit %d\n" % r.returncode + r.stdout + b"\n--- stderr\n" + r.stderr)

    jobs: list[tuple[str, list[str]]] = []
    for name, path, extra in files:
        for tag, opts in REPORTS:
            jobs.append((f"{name}.report.{tag}", ["report", "-i", path, "--stdio", *extra, *opts]))
    with ThreadPoolExecutor(a.jobs) as ex:
        list(ex.map(lambda j: run(*j), jobs))
    # annotate: each program with samples, of each file with a side file
    ann: list[tuple[str, list[str]]] = []
    for name, path, _extra in files:
        if not os.path.exists(path + ".bpfsym"):
            continue
        r = subprocess.run(
            [sys.executable, "-m", "bpfsym", "report", "-i", path, "--sort", "prog", "--json",
             "--bpf-only"],
            capture_output=True, env=env, cwd=tmp,
        )  # fmt: skip
        ann.append((f"{name}.annotate", ["annotate", "-i", path, "--stdio"]))
        if r.returncode:
            continue
        progs = {row["prog"] for ev in json.loads(r.stdout)["events"] for row in ev["rows"]}
        for prog in sorted(progs):
            ann.append((f"{name}.annotate.{prog}", ["annotate", "-i", path, "--stdio", prog]))
            ann.append((f"{name}.annotate.{prog}.json", ["annotate", "-i", path, "--json", prog]))
    with ThreadPoolExecutor(a.jobs) as ex:
        list(ex.map(lambda j: run(*j), ann))
    print(f"{len(jobs) + len(ann)} outputs in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
