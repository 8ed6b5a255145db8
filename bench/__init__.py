"""Benchmarks. Not tests: each measures, compares with its peer and the floor in the same
run, and rewrites its own section of docs/benchmarks.md. Run all with `make bench`."""
