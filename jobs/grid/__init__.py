"""Planning a grid: validate it, cut it into shards and work units, price it, check it fits an allocation.

The bottom room of ``jobs/``: it imports ``streamgen/`` only, nothing of ``jobs.run`` or ``jobs.cluster``
(no Ray, no submitit). One line per module, in import order:

- ``shards``: grid → cells → shards; stable content-hash shard ids; seeded, balanced run order.
- ``units``: work units, the shards one actor call decodes together so shared work runs once.
- ``shard_tasks``: the types a shard travels as (``ShardTask`` → ``DecodedShard`` → rows).
- ``checkpoint_preflight``: hub / local checkpoints checked before an actor starts; snapshots pinned.
- ``allocation_fit``: the allocation (``Shape``) checked against the work: GPUs, CPUs, memory, time.
- ``plan``: the grid and all it names validated up front (one ``ConfigError``); ``GridPlan``.
- ``gpu_hours``: the GPU-hour estimate from first principles (forwards × roofline seconds per unit).
- ``unit_sizing``: ``shard_size: auto``: examples per shard and unit timeouts from the estimate.

What the other rooms and ``workflows/`` use: ``plan.plan_grid`` / ``plan.GridPlan``, ``shards.Shard``,
``units.group_shards``, ``shard_tasks``' types, ``allocation_fit.Shape`` / ``check``, the estimate
(``gpu_hours.estimate_plan``, ``grid_device``) and ``unit_sizing.unit_timeouts``. The face re-exports
nothing: import the module (``from jobs.grid.plan import plan_grid``).
"""
