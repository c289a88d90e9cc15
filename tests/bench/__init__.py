"""Tests of bench/'s scripts, at a tiny size so that they cannot rot."""
