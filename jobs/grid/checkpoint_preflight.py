"""The grid's pre-flight: every hub or local checkpoint checked before an actor starts, snapshots pinned.

Run by ``jobs.grid.plan.plan_grid`` (so by ``--dry-run`` and at the start of every run). For each model
with ``source: hub`` or ``source: local`` (tiny, scripted and packaged models have nothing to check
here), :mod:`streamgen.models.hub_cache` finds its snapshot and :mod:`streamgen.models.checkpoint_facts` says
whether its files are whole, whether its config builds the model (the families it can build), whether its
weights fit one to one and whether its EOS, mask ids and chat template agree with its YAML. A hub model's
configured revision (None: ``main``) is resolved to the snapshot's commit, and the model config the
actors receive carries ``revision: <commit>``: the weights cannot change under the cell's fingerprint
(``model.revision`` is in it) when the cache is refreshed mid-run. The commits go into every ``runs``
row (``model_snapshots``); a results directory whose earlier runs loaded another snapshot of a model
is refused (:func:`snapshot_conflicts`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from streamgen.config import ConfigError, GridConfig, ModelConfig, model_config
from streamgen.families.checkpoint_match import checkpoint_problems
from streamgen.models.hub_cache import (
    Snapshot,
    fetch_again,
    find_snapshot,
    local_folder,
    missing_snapshot_line,
)
from streamgen.results.result_files import readable_files

log = logging.getLogger(__name__)

CHECKED_SOURCES = ("hub", "local")


@dataclass(frozen=True)
class Preflight:
    """The problems found, each model's snapshot commit (None: not a hub snapshot) and the model
    configs pinned to those commits."""

    problems: list[str]
    snapshots: dict[str, str | None]
    models: dict[str, ModelConfig]


def _snapshot(cfg: ModelConfig) -> Snapshot | None:
    if cfg.source == "local":
        folder = local_folder(cfg.path)
        return Snapshot(folder, None) if folder.is_dir() else None
    return find_snapshot(cfg.path, cfg.revision)


def preflight(models: Mapping[str, ModelConfig]) -> Preflight:
    """Check every hub / local checkpoint of ``models`` (no network, no tensor data read)."""
    problems: list[str] = []
    snapshots: dict[str, str | None] = dict.fromkeys(models)
    pinned = dict(models)
    for name, cfg in models.items():
        if cfg.source not in CHECKED_SOURCES:
            continue
        snap = _snapshot(cfg)
        if snap is None:
            problems.append(missing_snapshot_line(cfg) if cfg.source == "hub"
                            else f"model {name}: folder {local_folder(cfg.path)} does not exist; fix path=")
            continue
        problems.extend(checkpoint_problems(cfg, snap.folder, fetch_again(cfg)))
        if snap.commit is not None:
            snapshots[name] = snap.commit
            pinned[name] = dataclasses.replace(cfg, revision=snap.commit)
            log.info("model %s: %s at snapshot %s", name, cfg.path, snap.commit)
    return Preflight(problems, snapshots, pinned)


def grid_models(grid: GridConfig) -> dict[str, ModelConfig]:
    """``grid``'s model configs that load (names that do not are validate_grid's to report)."""
    models = {}
    for name in grid.models:
        try:
            models[name] = model_config(name)
        except ConfigError:
            continue
    return models


def grid_problems(grid: GridConfig) -> list[str]:
    """The pre-flight's problems for ``grid``'s models: what ``jobs.cluster.executors.submit_grid`` checks
    before a Slurm job books its GPUs."""
    return preflight(grid_models(grid)).problems


# --------------------------------------------------------------------------------------------
# Resume: the snapshots earlier runs of this results directory recorded
# --------------------------------------------------------------------------------------------


def recorded_snapshots(results_dir: str | Path) -> list[tuple[str, str, dict[str, str | None]]]:
    """(started_at, run_id, {model: commit}) of every earlier runs row that recorded its snapshots."""
    out: list[tuple[str, str, dict[str, str | None]]] = []
    if not Path(results_dir).is_dir():
        return out
    for path in readable_files(Path(results_dir), "runs").files:
        if "model_snapshots" not in pq.read_schema(path).names:
            continue
        for row in pq.read_table(path, columns=["run_id", "started_at", "model_snapshots"]).to_pylist():
            if row["model_snapshots"]:
                out.append((row["started_at"], row["run_id"], json.loads(row["model_snapshots"])))
    return sorted(out)


def snapshot_conflicts(earlier: list[tuple[str, str, dict[str, str | None]]],
                       current: Mapping[str, str | None], results_dir: str | Path) -> list[str]:
    """One line per model whose snapshot differs from the latest one an earlier run recorded for it."""
    latest: dict[str, tuple[str, str]] = {}
    for _, run_id, snapshots in earlier:  # sorted by start: the last one wins
        latest.update({m: (c, run_id) for m, c in snapshots.items() if c})
    p = []
    for model, commit in current.items():
        if commit and model in latest and latest[model][0] != commit:
            old, run_id = latest[model]
            p.append(f"model {model}: results_dir {results_dir} holds rows of snapshot {old} (run {run_id}), but this "
                     f"run would load snapshot {commit}; pin `revision: {old}` in configs/models/{model}.yaml "
                     "(hf download with --revision if it left the cache), or use a new results_dir")
    return p
