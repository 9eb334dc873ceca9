"""Benchmarks, run on demand (`make bench` or `python -m bench`); they write docs/benchmarks.md."""
