"""Test-wide settings: property tests have no per-example deadline (CI machines are shared
and their timing says nothing about correctness)."""

from hypothesis import settings

settings.register_profile("bpfsym", deadline=None, print_blob=True)
settings.load_profile("bpfsym")
