"""Tests of streamgen/requests/: segmentation and the rendered chat."""
