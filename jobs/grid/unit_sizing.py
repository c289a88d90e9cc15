"""Work units sized to the work (``shard_size: auto``): examples per shard and each unit's timeout from the estimate.

A work unit is one (model, benchmark, verifier mode, example chunk) across its acceptance cells
(``jobs/grid/units.py``), decoded on one actor. With ``shard_size: auto`` the chunk length of each
(model, benchmark) is the largest whose WORST chunk — the chunk length × the most expensive single
example's unit work (``jobs.grid.gpu_hours.example_cost``) — stays within ``UNIT_FRACTION`` of the cluster's
Slurm time limit (``timeout_min``): a unit killed at the limit or requeued loses at most that. An example
whose work alone exceeds it gets a unit of its own (and the dry run says so). Each unit's timeout is
``TIMEOUT_FACTOR`` × its estimate, at least ``TIMEOUT_FLOOR_S``, replacing ``shard_timeout_s`` × shards.

The sizes use only the plan and the device (no earlier rows), so a rerun of the same grid on the same
cluster cuts the same shards and resumes; another device (or a changed estimate) cuts others.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from jobs.grid.gpu_hours import PlanLike, example_cost, grid_device, unit_seconds
from jobs.grid.shards import Cell, size_key
from jobs.grid.units import MODE_FREE_FAMILIES
from streamgen.config import ClusterConfig
from streamgen.sizing.devices import Device
from streamgen.sizing.parameters import model_size

__all__ = ["TIMEOUT_FACTOR", "TIMEOUT_FLOOR_S", "UNIT_FRACTION", "auto_shard_sizes", "target_unit_s", "unit_timeout_s",
           "unit_timeouts"]

UNIT_FRACTION = 0.25  # no unit longer than a quarter of the Slurm time limit (estimated)
TIMEOUT_FACTOR = 3.0  # a unit's timeout: 3 × its estimate (the estimate is ±2×)
TIMEOUT_FLOOR_S = 600.0  # never below 10 minutes (model warm-up, a loaded machine)


def target_unit_s(cluster: ClusterConfig) -> float:
    """The longest a unit may be estimated to take on ``cluster``."""
    return UNIT_FRACTION * cluster.timeout_min * 60.0


def unit_timeout_s(estimate_s: float) -> float:
    """A unit's timeout from its estimate."""
    return max(TIMEOUT_FLOOR_S, TIMEOUT_FACTOR * estimate_s)


def auto_shard_sizes(cells: Sequence[Cell], examples: Mapping[str, Mapping[str, Any]],
                     segments: Mapping[tuple[str, str], tuple[str, ...]],
                     excluded: Mapping[tuple[str, str], str | None], *, cluster: ClusterConfig,
                     device: Device) -> dict[str, int]:
    """Examples per shard for each (model, benchmark) (``jobs.grid.shards.size_key``) of ``cells``."""
    sharing: dict[tuple[str, str, str | None], list[str | None]] = defaultdict(list)  # the modes of one unit's cells
    for cell in cells:
        free = cell.model.family in MODE_FREE_FAMILIES  # both verifier modes in one unit
        sharing[(cell.model.name, cell.benchmark.name, None if free else cell.verifier_mode)].append(cell.verifier_mode)
    sizes: dict[str, int] = {}
    for cell in cells:
        key = size_key(cell)
        if key in sizes:
            continue
        bench, size = cell.benchmark.name, model_size(cell.model)
        assert size is not None, "jobs.grid.gpu_hours.require_sizes runs first"
        modes = max((v for (m, b, _), v in sharing.items() if (m, b) == (cell.model.name, bench)), key=len)
        worst = max((example_cost(cell.model, bench, cell.max_new_tokens, ex, segments[(bench, eid)], len(modes),
                                  device, size, modes=modes).seconds
                     for eid, ex in examples[bench].items() if not excluded[(bench, eid)]), default=0.0)
        fit = math.floor(target_unit_s(cluster) / worst) if worst > 0 else len(examples[bench])
        sizes[key] = max(1, min(fit, len(examples[bench]) or 1))
    return sizes


def unit_timeouts(plan: PlanLike) -> dict[str, float]:
    """Each work unit's timeout (by its first shard id) on the grid's device."""
    return {k: unit_timeout_s(v) for k, v in unit_seconds(plan, grid_device(plan.grid)).items()}
