"""Tests of streamgen/timing/: policies, typists, granularity, corrections, the oracle."""
