"""Running a grid on a Ray that is already there or started here: actors, scheduler, rows, result files.

The middle room of ``jobs/``: it imports ``jobs.grid`` and ``streamgen/``, never ``jobs.cluster``. One
line per module, in import order:

- ``local_ray``: loopback-only local Ray: the environment, the bootstrap file, ``start_ray`` / ``stop_ray``.
- ``stop_signals``: SIGTERM / SIGINT during a run: stop scheduling, keep what finished, exit 128 + signal.
- ``progress``: the progress bar over examples.
- ``writer``: one Parquet file per shard per table, atomically; which shards are complete (resume).
- ``spool``: a unit's finished examples, appended durably: a killed unit resumes from them.
- ``scheduler``: per-model queues, timeouts, requeue on actor death; yields events (imports nothing of jobs/).
- ``actors``: ``ModelActor``, one model per actor, base and stream runs of an example back to back.
- ``pilot``: ``--calibrate``'s pilot: a few examples per (model, benchmark) through ``run_unit``, outside the results;
  answer lengths and forward factors for the calibrated estimate.
- ``rows``: the CPU worker's task: score a decoded unit; the one row builder.
- ``driver``: ``run_grid(grid)`` → ``GridSummary``: plan, resume, start Ray, schedule, write, close the run.

What ``jobs.cluster`` and ``workflows/`` use: ``driver.run_grid``, ``writer.ResultWriter``,
``stop_signals`` (``note_requeue``, ``ending``) and ``local_ray``'s environment. The face imports
nothing on purpose: ``jobs/__init__`` imports ``local_ray`` to set Ray's environment before anything
imports ``ray``, and a face that re-exported the driver would import ``ray`` first.
"""
