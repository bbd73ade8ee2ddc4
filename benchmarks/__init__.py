"""Benchmarks of simlab (not tests): `python -m benchmarks.sweep` and `python -m benchmarks.refine`
(see docs/performance.md); `python -m pytest -p benchmarks.compile_profile` for where the test
suite's time goes in jax (docs/design.md, "Tests")."""
