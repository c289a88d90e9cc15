"""Tests of streamgen/results/: cells, compaction, the results directory."""
