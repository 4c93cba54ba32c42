"""Helpers the tests share (importable as `kit`: pyproject puts tests/ on pytest's path).

- perftext: reading perf's --stdio tables, fixture kallsyms
- pproftext: google/pprof's CLI driven on a profile
- promkit: a real Prometheus server and promtool
- livekit: bpfsym/perf runs on the real kernel, held demo programs
- perfcompat: perf vs bpfsym agreement rules on the perf.data corpus
- annotate_fixtures, topkit, unwindkit, perfdata_builder: fixtures, drivers and built files
"""
