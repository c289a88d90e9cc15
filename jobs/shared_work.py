"""Work units: the shards one actor call decodes together so that shared work runs once.

Cells that differ only in acceptance/τ (same model, benchmark, verifier mode, answer budget and
timing settings) get the same example chunks from :func:`jobs.shards.expand_shards` (the chunks
depend on the benchmark's ids and ``shard_size`` only). With ``share_work: true`` (the default) such
shards form ONE unit: the actor runs each example's base run and first stream step once for all of
them (``streamgen.shared``), then every cell's remaining steps back to back. Each shard keeps its own
id, run order, rows and result files; only the actor call is shared. Live cells (typing on the clock)
and ``share_work: false`` give one shard per unit.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobs.shards import Shard
from streamgen.results.cells import RULE_KEYS, stable_hash


def sharing_key(shard: Shard) -> str:
    """What must match for two shards to share their base runs and first steps: the cell without its
    acceptance rule (τ, tie guard), and the example ids. Live shards never share (the key is their own id)."""
    cell = shard.cell
    if cell.live is not None:
        return shard.shard_id
    identity = {k: v for k, v in cell.identity().items() if k not in RULE_KEYS}
    return stable_hash({"cell": identity, "example_ids": list(shard.example_ids), "seed": shard.seed})


def group_shards(shards: Sequence[Shard], *, share: bool) -> list[tuple[Shard, ...]]:
    """The shards as work units, in the order of each unit's first shard; one per unit unless ``share``."""
    if not share:
        return [(s,) for s in shards]
    units: dict[str, list[Shard]] = {}
    for s in shards:
        units.setdefault(sharing_key(s), []).append(s)
    return [tuple(u) for u in units.values()]
