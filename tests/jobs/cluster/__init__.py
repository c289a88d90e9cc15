"""Tests of jobs/cluster/."""
