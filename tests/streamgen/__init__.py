"""Tests of streamgen/: its top-level modules here (config, stream, live, acceptance rules, try request),
its packages in the folders below."""
