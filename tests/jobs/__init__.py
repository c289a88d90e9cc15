"""Tests of jobs/: planning a grid, running it (actors, scheduler, rows, writer, spool) and the cluster."""
