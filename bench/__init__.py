"""Benchmarks: they print numbers and ratios; tests check correctness."""
