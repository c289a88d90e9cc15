"""Tests of workflows/: the entry scripts run as a user runs them (full grid, nightly, adaptation)."""
