"""Tests of analysis/: the report's SQL and tables, timing, fingerprints, rescoring, the viewer."""
