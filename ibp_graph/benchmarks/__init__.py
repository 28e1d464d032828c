"""Benchmarks: each prints a table and writes JSON (speed targets live here, never in tests)."""
