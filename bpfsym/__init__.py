"""bpfsym: make BPF programs visible to profiling, beside perf record."""

__version__ = "0.1.0"
