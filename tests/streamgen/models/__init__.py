"""Tests of streamgen/models/: loading, checkpoints, weights, scripted models."""
