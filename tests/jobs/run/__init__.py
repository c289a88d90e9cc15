"""Tests of jobs/run/."""
