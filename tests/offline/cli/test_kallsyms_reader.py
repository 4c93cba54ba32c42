"""cli.start_kallsyms_reader: a report's /proc/kallsyms reader is started before the
report's imports only when the report will read the host's kallsyms: not with
--kallsyms, and not when a side file (--side, or <input>.bpfsym) will name the kernel's
symbols; its arguments read as the report's parser reads them."""

from __future__ import annotations

import pytest

from bpfsym.cli import start_kallsyms_reader
from bpfsym.live.host import HostKallsyms


@pytest.mark.parametrize(
    "args,started",
    [
        (["-i", "x.data"], False),  # x.data.bpfsym beside it
        (["--input", "x.data", "--stdio"], False),
        (["--input=x.data"], False),
        (["-ix.data", "-g"], False),
        (["-i", "x.data", "--no-side"], True),
        (["-i", "y.data"], True),  # no side file beside it
        (["-i", "y.data", "--side", "x.data.bpfsym"], False),
        (["--side=x.data.bpfsym", "-i", "y.data"], False),
        (["--side", "x.data.bpfsym", "--no-side", "-i", "y.data"], True),
        ([], True),  # perf.data, without perf.data.bpfsym
        (["-i", "x.data", "--kallsyms", "k"], False),
        (["-i", "-"], True),  # stdin: no side file beside it
        (["--", "-i", "x.data"], True),
    ],
)
def test_a_reader_only_for_the_hosts_kallsyms(tmp_path, monkeypatch, args, started) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("x.data", "x.data.bpfsym", "y.data"):
        (tmp_path / name).write_bytes(b"")
    reader = start_kallsyms_reader("report", ["report", *args])
    try:
        assert isinstance(reader, HostKallsyms) == started
    finally:
        if reader is not None:
            reader.close()


def test_no_reader_for_other_commands_or_help() -> None:
    assert start_kallsyms_reader("annotate", ["annotate", "-i", "y.data"]) is None
    assert start_kallsyms_reader("report", ["report", "--help"]) is None
