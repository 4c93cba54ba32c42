"""C++ symbols are shown demangled the way perf shows them (no parameters)."""

from __future__ import annotations

import json
import subprocess

from kit.livekit import bpfsym_run
from kit.perftext import sections

SOURCE = r"""
namespace work {
template <typename T> struct Mixer {
    __attribute__((noinline)) T spin(T x, long n) const {
        for (long i = 0; i < n; i++) x = x * 3 + static_cast<T>(i);
        return x;
    }
};
}  // namespace work
int main() {
    volatile long r = work::Mixer<long>().spin(1, 200000000L);
    volatile unsigned s = work::Mixer<unsigned>().spin(1u, 100000000L);
    return static_cast<int>(r + s) & 1;
}
"""


def test_cxx_names_equal_perfs(tmp_path):
    (tmp_path / "spin.cc").write_text(SOURCE)
    subprocess.run(
        ["g++", "-O1", "-g", "-o", str(tmp_path / "spin"), str(tmp_path / "spin.cc")], check=True
    )
    data = str(tmp_path / "perf.data")
    subprocess.run(
        ["perf", "record", "-q", "-e", "cpu-clock", "-o", data, "--", str(tmp_path / "spin")],
        check=True,
    )
    perf = subprocess.run(
        ["perf", "report", "-i", data, "--stdio", "--no-children", "-g", "none", "--sort", "sym"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    ours = bpfsym_run("report", "-i", data, "--no-side", "--sort", "sym", "--stdio")
    assert ours.returncode == 0, ours.stderr
    theirs, mine = sections(perf)["cpu-clock"], sections(ours.stdout)["cpu-clock"]
    for name in ("[.] work::Mixer<long>::spin", "[.] work::Mixer<unsigned int>::spin"):
        assert name in theirs and name in mine
        assert abs(theirs[name] - mine[name]) <= 0.01
    assert theirs["[.] work::Mixer<long>::spin"] > 40
    rows = json.loads(
        bpfsym_run("report", "-i", data, "--no-side", "--sort", "sym", "--json").stdout
    )
    assert not [
        r for r in rows["events"][0]["rows"] if r["sym"].removeprefix("[.] ").startswith("_Z")
    ]
