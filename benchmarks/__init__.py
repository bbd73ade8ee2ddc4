"""Benchmarks of simlab (not tests): `python -m benchmarks.sweep` (see docs/performance.md)."""
