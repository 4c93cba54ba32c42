"""`perf record` options, checked against the installed perf's own `perf record -h`.

bpfsym passes perf's options through unchanged; checking them first turns a
typo into one line before anything is captured, and finds -o and -k, which
bpfsym needs too.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

# "    -e, --event <event>   ..." / "        --no-bpf-event" / "    -I, --intr-regs[=<any register>]"
_OPT = re.compile(
    r"^\s{2,}(?:-(?P<short>\w), )?(?:--(?P<long>[\w-]+))?(?P<arg>\[?[= ]?<[^>]*>\]?)?"
)
_BARE_SHORT = re.compile(r"^\s{2,}-(?P<short>\w)(?P<arg> <[^>]*>)?\s")

# clock names perf accepts for -k (tools/perf/builtin-record.c clockids[])
CLOCKS = {
    "monotonic": 1, "mono": 1, "monotonic_raw": 4, "raw": 4, "realtime": 0, "real": 0,
    "boottime": 7, "boot": 7, "tai": 11,
}  # fmt: skip


@dataclass
class PerfOptions:
    """What bpfsym learned from the options it passes to perf."""

    args: list[str]
    output: str = "perf.data"
    clockid: int | None = None
    errors: list[str] = field(default_factory=list)


@dataclass
class OptionTable:
    takes_arg: dict[str, bool] = field(default_factory=dict)  # "-e", "--event" -> True
    optional_arg: set[str] = field(default_factory=set)


def option_table(perf: str) -> OptionTable:
    """Parse `perf record -h` (exits 129 and prints usage to stderr)."""
    out = subprocess.run([perf, "record", "-h"], capture_output=True, text=True, timeout=30)
    table = OptionTable()
    for line in (out.stdout + out.stderr).splitlines():
        m = _OPT.match(line)
        if not m or not (m.group("short") or m.group("long")):
            m = _BARE_SHORT.match(line)
            if not m:
                continue
            names = ["-" + m.group("short")]
        else:
            names = [
                n
                for n in ("-" + (m.group("short") or ""), "--" + (m.group("long") or ""))
                if len(n) > 2 or n not in ("-", "--")
            ]
        arg = m.group("arg") or ""
        for n in names:
            if n in ("-", "--"):
                continue
            table.takes_arg[n] = bool(arg) and not arg.startswith("[")
            if arg.startswith("["):
                table.optional_arg.add(n)
            if n.startswith("--") and not n.startswith("--no-"):
                table.takes_arg.setdefault("--no-" + n[2:], False)
    return table


def parse_clock(value: str) -> int | None:
    v = value.lower().removeprefix("clock_")
    if v in CLOCKS:
        return CLOCKS[v]
    return int(v) if v.isdigit() else None


def check(args: list[str], table: OptionTable) -> PerfOptions:
    """Validate perf options; note -o and -k."""
    res = PerfOptions(list(args))
    i = 0
    while i < len(args):
        a = args[i]
        value: str | None = None
        name = a
        if a.startswith("--"):
            name, eq, v = a.partition("=")
            value = v if eq else None
            known = name in table.takes_arg
            if not known:
                res.errors.append(f"unknown perf record option '{a}'")
                i += 1
                continue
            if table.takes_arg[name] and value is None:
                if i + 1 >= len(args):
                    res.errors.append(f"perf record option '{name}' needs a value")
                    break
                value = args[i + 1]
                i += 1
        elif a.startswith("-") and len(a) > 1:
            # clustered short options: -ag, -F999, -o file
            j = 1
            while j < len(a):
                name = "-" + a[j]
                if name not in table.takes_arg:
                    res.errors.append(f"unknown perf record option '{name}' in '{a}'")
                    break
                if table.takes_arg[name] or name in table.optional_arg:
                    rest = a[j + 1 :]
                    if rest:
                        value = rest.lstrip("=")
                    elif table.takes_arg[name]:
                        if i + 1 >= len(args):
                            res.errors.append(f"perf record option '{name}' needs a value")
                            break
                        value = args[i + 1]
                        i += 1
                    break
                j += 1
        else:
            res.errors.append(f"unexpected argument '{a}' before '--' (put the command after '--')")
            i += 1
            continue
        if name in ("-o", "--output") and value is not None:
            res.output = value
        if name in ("-k", "--clockid") and value is not None:
            clock = parse_clock(value)
            if clock is None:
                res.errors.append(f"unknown clock '{value}' for {name}")
            res.clockid = clock
        i += 1
    return res
