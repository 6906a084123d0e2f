"""Benchmarks: print tables of medians; never asserted on in tests."""
