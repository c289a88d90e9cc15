"""Tests of streamgen/adapt/: pairs, training, the curve, merging, the estimate."""
