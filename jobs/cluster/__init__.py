"""The cluster: where the work runs (here, as a submitit job on Slurm, or on a running Ray cluster), and Ray across a job's nodes.

The top room of ``jobs/``: it imports ``jobs.run``, ``jobs.grid`` and ``streamgen/``; nothing in
``jobs/`` imports it. One line per module, in import order:

- ``kind_protocol``: what a cluster kind is: the ``ClusterKind`` Protocol and the values it returns.
- ``slurm_partition``: what a Slurm partition offers (``sinfo``) and why a request can never run.
- ``ray_cluster``: a Ray cluster over one job allocation (head on rank 0, workers on the other ranks).
- ``preemption_relay``: a SIGUSR2 on any node's task reaches rank 0 once; the whole job requeues.
- ``local``: the ``local`` kind: the work runs in this process on this machine; nothing is submitted.
- ``debug``: the ``debug`` kind: submitit's in-process job on this machine, the path a Slurm job takes.
- ``slurm``: the ``slurm`` kind: ``sbatch`` parameters, setup lines, the partition, Slurm's variables.
- ``existing_ray``: the ``ray`` kind: the driver here attaches to a running Ray cluster, checked before any work.
- ``kinds``: the kinds by executor name (``KINDS``), the one list of those names; ``cluster_kind(cluster)``.
- ``executors``: the one dispatch (here, or one job through submitit), the checks before submitting,
  following a job, and the grid's job (``RayJob``, requeued on preemption); every difference between
  kinds is asked of the kind.
- ``adapt_job``: the adaptation's model stages as one requeueable one-GPU job.
- ``dry_run``: ``--dry-run``: the plan, its estimate and the allocation check, nothing started. It sits
  here, not in ``jobs.grid``, because it asks all three rooms: the plan (grid), which shards are
  complete (``jobs.run.writer``) and the cluster's allocation (``executors.allocation``).

What ``workflows/`` use: ``executors.run_grid_on_cluster`` (run a grid where its cluster config says),
``executors.run`` / ``submit`` / ``follow``, ``adapt_job.run`` and ``dry_run.dry_run_report`` /
``plan_dry_run``. The face re-exports nothing: importing it must not import submitit.
"""
