"""Tests of streamgen/benchmarks/: each benchmark, the data manifest, checks, references, lm-eval tasks."""
