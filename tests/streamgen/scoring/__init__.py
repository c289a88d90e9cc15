"""Tests of streamgen/scoring/: extraction, metrics, the sandbox."""
