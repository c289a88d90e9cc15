"""Tests of streamgen/decoding/: the decoders of every family, the meter, numerics, stops, acceptance."""
