"""Tests of streamgen/diagnostics/: the probe."""
