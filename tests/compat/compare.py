"""Print how many corpus files bpfsym report reads as perf does: a table for before/after figures.

    python -P tests/compat/compare.py [-j 2] [-v] [FILE ...]

One line per file: whether the events agree (names, order, sample counts, from the `dso`
reading), then each comparison: `dso`, `dso,sym`, `comm,dso,sym`, and `children` (the
call-graph totals, `--children` against `bpfsym report -g`, on files whose events have
call chains; "-" elsewhere). A cell says `ok`, `ok*` (perf cannot read the file and bpfsym
answered as it should: exit 0, or one line and exit 2) or `FAIL`. Then the totals, as
"28 of 67 agree on dso". -v prints what differs under each failing file. Both programs run
now: perf as installed, bpfsym as this interpreter imports it (-P: the installed package).
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kit import perfcompat as P  # noqa: E402

COLUMNS = [*P.KEY_SETS, "children"]


def cell(c: P.Comparison | None) -> str:
    if c is None:
        return "-"
    if not c.verdict.ok:
        return "FAIL"
    return "ok" if c.verdict.perf_readable else "ok*"


def events_cell(c: P.Comparison) -> str:
    """Do the event lists agree (names, order, counts)? From the dso comparison."""
    if not c.verdict.perf_readable:
        return "ok*" if c.verdict.ok else "FAIL"
    bad = [p for p in c.verdict.problems if p.startswith("events:") or ": samples:" in p]
    if c.bpfsym.returncode != 0 or c.bpfsym.timed_out:
        return "FAIL"
    return "FAIL" if bad else "ok"


def run_file(path: str) -> dict[str, P.Comparison | None]:
    out: dict[str, P.Comparison | None] = {k: P.check(path, k) for k in P.KEY_SETS}
    chains = P.has_callchains(path)
    out["children"] = P.check(path, P.CHILDREN_KEYS, children=True) if chains else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="perf.data files (default: the corpus)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="files compared at once")
    ap.add_argument("-v", "--verbose", action="store_true", help="what differs, per failure")
    args = ap.parse_args(argv)
    files = args.files or P.corpus_files()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(run_file, files))
    names = [os.path.basename(f) for f in files]
    w = max(len(n) for n in names)
    head = f"{'file':<{w}}  {'events':>6}" + "".join(f"  {c:>12}" for c in COLUMNS)
    print(head)
    print("-" * len(head))
    agree = dict.fromkeys(["events", *COLUMNS], 0)
    applicable = dict.fromkeys(["events", *COLUMNS], 0)
    for name, res in zip(names, results, strict=True):
        dso = res["dso"]
        assert dso is not None
        ev = events_cell(dso)
        cells = [cell(res[c]) for c in COLUMNS]
        print(f"{name:<{w}}  {ev:>6}" + "".join(f"  {x:>12}" for x in cells))
        for col, x in zip(["events", *COLUMNS], [ev, *cells], strict=True):
            if x != "-":
                applicable[col] += 1
                agree[col] += x.startswith("ok")
        if args.verbose:
            for col in COLUMNS:
                c = res[col]
                if c is not None and not c.verdict.ok:
                    for line in P.describe(c).splitlines()[3:]:
                        print(f"    [{col}] {line}")
    print()
    for col in ["events", *COLUMNS]:
        print(f"{agree[col]} of {applicable[col]} agree on {col}")
    refused = sum(1 for r in results if r["dso"] is not None and not r["dso"].verdict.perf_readable)
    print(f"({refused} of {len(files)} files perf cannot read: 'ok*' is bpfsym's answer to them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
