"""bpfsym report: perf.data samples aggregated by sort keys and rendered like perf report.

query       ReportQuery (what is asked) and KeyLayout (the row keys it implies)
analysis    analyze_query(): side file, kernel symbols, one pass, the Analysis
sideband    the records other than samples, decoded and applied one way for both passes
aggregates  EventStats and the pass's sums
ordered     the record-by-record pass (every file: pipes, streams, compressed)
bulk        the numpy pass, composed of:
  window      which files it takes; records located, sample heads decoded into arrays
  rounds      which round flush each record goes out in
  groups      samples grouped by the side-band state their answer depends on
  resolve     one walk over the side-band records resolving each group where it lives
  userspace   user-space addresses through memory maps and ELF symbols, in bulk
  accumulate  ids, rows and stacks
  split       the pass shared between two processes
progress    the progress bar
render      --stdio, --json and --folded
"""
