"""Test-wide settings: property tests have no per-example deadline and no "too slow" health
check (CI machines are shared, and their timing says nothing about correctness)."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "bpfsym", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("bpfsym")
