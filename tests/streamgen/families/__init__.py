"""Tests of streamgen/families/: each family's decoder, model code, official procedure and forward rule, and the registry."""
