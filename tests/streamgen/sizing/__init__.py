"""Tests of streamgen/sizing/: forward counts and the calibration of the estimate."""
