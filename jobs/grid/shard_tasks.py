"""What a shard is on its way through the grid: the driver builds a :class:`ShardTask`
(``jobs.grid.plan``), a model actor decodes it into a :class:`DecodedShard` of :class:`ExampleResult`
(``jobs.run.actors``), a CPU worker scores it and builds its rows (``jobs.run.rows``).

The types live here, apart from both the actor and the row builder, so each imports them and
neither imports the other; this module imports neither torch nor any other part of ``jobs`` but
the shard itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.grid.shards import Shard
from streamgen.results.cells import Cell

if TYPE_CHECKING:
    from streamgen.stream import PairOutcome, StreamRequest


@dataclass(frozen=True)
class ExampleTask:
    """One example of a shard: the benchmark's example, its request (None when excluded up front),
    its run order and its segment count."""

    example: Any  # streamgen.benchmarks.Example (scored on the CPU worker)
    request: StreamRequest | None
    base_first: bool
    n_segments: int
    excluded: str | None = None  # reason decided before decoding (one segment)

    @property
    def example_id(self) -> str:
        return self.example.example_id


@dataclass(frozen=True)
class ShardTask:
    """One shard, built once by the driver (``jobs.grid.plan.GridPlan.task``) and carried whole: the actor
    decodes it, a CPU worker scores it and builds its rows (``jobs.run.rows``)."""

    shard: Shard
    run_id: str
    code_version: str
    examples: tuple[ExampleTask, ...]
    share_work: bool = True  # the grid's share_work: decodes remembered across the unit's steps (streamgen.shared_example)

    @property
    def cell(self) -> Cell:
        return self.shard.cell

    def __len__(self) -> int:
        return len(self.examples)


@dataclass(frozen=True)
class ExampleResult:
    """What the actor did for one example: the paired outcome, or the error that stopped it."""

    example_id: str
    base_first: bool
    outcome: PairOutcome | None
    error_type: str | None = None
    error_traceback: str | None = None
    wall_s: float = 0.0  # both runs, end to end (a shared base run / step 1 counts where it ran)
    forward_wall_s: float = 0.0  # inside the model forwards this pair executed (shared ones once)
    forwards_executed: int = 0  # model calls this pair executed (shared ones once; a failed pair: those before it raised)
    resumed: bool = False  # taken from the unit's spool: decoded by an earlier, killed attempt (jobs.run.spool)


@dataclass(frozen=True)
class Placement:
    """Where a model actor runs: the GPU ids Ray gave it, the ``CUDA_VISIBLE_DEVICES`` it saw, and whether
    it ran its model on CPU although it holds a GPU (a rehearsal on fake GPUs: ``ClusterConfig.rehearsal``)."""

    gpu_ids: tuple[str, ...] = ()
    cuda_visible_devices: str | None = None
    cpu_fallback: bool = False


@dataclass(frozen=True)
class DecodedShard:
    shard_id: str
    actor_id: str
    device: str
    results: tuple[ExampleResult, ...]
    busy_s: float  # wall time of this shard's pairs decoded on the actor (+ the unit's other time: first shard)
    forward_wall_s: float  # inside the model forwards of those pairs (resumed ones: not in this attempt)
    load_s: float  # the actor's model load, reported with its first shard only (0.0 afterwards)
    cpu_s: float = 0.0  # CPU time of the actor process during run_shard (contention-independent)
    thresholds: tuple[float | None, float | None] = (None, None)  # effective (slot, token): ReFusion only
    numerics: str | None = None  # JSON: the actor's streamgen.decoding.numerics.NumericsRecord
    placement: Placement = Placement()  # the actor's GPU (runs row inventory: one actor per GPU)

    @property
    def forwards_executed(self) -> int:
        """Model calls the actor executed for this shard (a shared base run / step 1 counts once, in
        the shard whose pair ran it); examples resumed from the unit's spool ran no call here."""
        return sum(r.forwards_executed for r in self.results if not r.resumed)

    @property
    def resumed(self) -> int:
        """Examples of this shard taken from the unit's spool instead of decoded (``jobs.run.spool``)."""
        return sum(r.resumed for r in self.results)
