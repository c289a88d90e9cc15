"""Tests of streamgen/config/: schemas, loading, validation and strict checks."""
