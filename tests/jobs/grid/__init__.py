"""Tests of jobs/grid/."""
