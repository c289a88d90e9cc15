"""Work units: the shards one actor call decodes together so that shared work runs once.

Cells that differ only in acceptance/τ (same model, benchmark, verifier mode, answer budget and
timing settings) get the same example chunks from :func:`jobs.grid.shards.expand_shards` (the chunks
depend on the benchmark's ids and ``shard_size`` only). With ``share_work: true`` (the default) such
shards form ONE unit: the actor runs each example's base run once and every cell's stream through one
tree of steps, each distinct step computed once (``streamgen.shared_example``). LLaDA/Dream cells of both
verifier modes join one unit too: the base run and step 1 verify nothing, and a step that keeps
nothing is a base decode of its prefix (``MODE_FREE_FAMILIES``). Each shard keeps its own id, run
order, rows and result files; only the actor call is shared. Live cells (typing on the clock) and
``share_work: false`` give one shard per unit.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobs.grid.shards import Shard
from streamgen.results.cells import RULE_KEYS, stable_hash

MODE_FREE_FAMILIES = ("bidirectional",)  # their base run, step 1 and keep-nothing decodes ignore the verifier mode


def sharing_key(shard: Shard) -> str:
    """What must match for two shards to share work: the cell without its acceptance rule (τ, tie guard)
    and, for ``MODE_FREE_FAMILIES``, without its verifier mode; and the example ids. Live shards never
    share (the key is their own id)."""
    cell = shard.cell
    if cell.live is not None:
        return shard.shard_id
    free = RULE_KEYS + (("verifier_mode",) if cell.model.family in MODE_FREE_FAMILIES else ())
    identity = {k: v for k, v in cell.identity().items() if k not in free}
    return stable_hash({"cell": identity, "example_ids": list(shard.example_ids), "seed": shard.seed})


def group_shards(shards: Sequence[Shard], *, share: bool) -> list[tuple[Shard, ...]]:
    """The shards as work units, in the order of each unit's first shard; one per unit unless ``share``."""
    if not share:
        return [(s,) for s in shards]
    units: dict[str, list[Shard]] = {}
    for s in shards:
        units.setdefault(sharing_key(s), []).append(s)
    return [tuple(u) for u in units.values()]
