"""Tests of streamgen/demo/: the server, its guard, the browser."""
