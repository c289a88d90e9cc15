"""Sizing the grid before it runs: forwards per decode (forward_counts), model size without weights (parameters), and
seconds per forward on a device (devices); read by jobs.grid.gpu_hours."""
