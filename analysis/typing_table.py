"""The typing analysis: every included example under every typing rate and drafting policy.

``_typing_inputs.sql`` gives the recorded steps; per (model, device) a cost model is fitted on the
recorded steps and base runs (:func:`streamgen.timing.costmodel.fit_cost_model`); each replayed example is
evaluated post hoc under each rate of the typing config and each policy — over arrays, all
examples and rates at once (:mod:`analysis.post_hoc`, equal to :func:`streamgen.timing.policies.evaluate`
run per example, which ``tests/support/typing_reference.py`` keeps as the reference) — and each live
example contributes the wait it really had.
The rows become the ``typing_examples`` view; ``typing.sql`` aggregates them into the ``typing``
table. Definitions: docs/timing.md.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from analysis.figures import run_starts
from analysis.post_hoc import StepColumns, arrivals_at, lane_blocks, post_hoc_lanes
from analysis.render import Column, markdown, setting_label
from analysis.sql_template import CELL_KEY
from analysis.tables import sql_text
from streamgen.config import TypingConfig, load, raise_if_problems, validate_typing
from streamgen.timing.costmodel import CostModelError, LinearCost, fit_cost_model
from streamgen.timing.policies import Policy, StepFacts, policies_of
from streamgen.timing.timeline import PrefixCounts, TypingModel

log = logging.getLogger(__name__)

CELL = CELL_KEY  # the setting key every table is keyed by (analysis.sql_template)
EXAMPLE_COLUMNS = (*CELL, "device", "example_id", "chars_per_s", "policy", "source", "wait_s", "backlog_s",
                   "base_wait_s", "keeps_up", "skipped", "modelled")


@dataclass(frozen=True)
class TypingTables:
    examples: pa.Table  # typing_examples: one row per example × rate × policy
    summary: pa.Table  # typing: the aggregate (typing.sql)
    cost_models: pa.Table  # the fitted cost model per (model, device)


def example_steps(rows: Sequence[dict]) -> Iterator[list[dict]]:
    for _, group in groupby(rows, key=lambda r: (r["run_id"], r["cell_id"], r["example_id"])):
        yield list(group)


def fit_cost_models(rows: Sequence[dict]) -> dict[tuple[str, str], LinearCost | None]:
    """:func:`fit_cost_columns` over rows of ``_typing_inputs`` as dicts (the simulation's few examples)."""
    return fit_cost_columns(pa.Table.from_pylist(list(rows))) if rows else {}


def fit_cost_columns(inputs: pa.Table, offsets: np.ndarray | None = None) -> dict[tuple[str, str], LinearCost | None]:
    """Per (model, device): every recorded step plus each example's base run (after its steps); None
    when unfittable. ``inputs``: ``_typing_inputs`` rows (sorted by model and device first)."""
    offsets = example_offsets(inputs) if offsets is None else offsets
    starts = offsets[:-1]
    firsts = inputs.select(["model", "device"]).take(starts)
    cols = {c: inputs.column(c).to_numpy(zero_copy_only=False)
            for c in ("forwards", "tokens_fed", "wall_s", "base_forwards", "base_tokens_fed", "base_wall_s")}
    fits: dict[tuple[str, str], LinearCost | None] = {}
    groups = run_starts(firsts, ("model", "device")).tolist()  # examples of one (model, device): a run
    for e, e1 in zip(groups, [*groups[1:], len(starts)], strict=True):
        key = (firsts["model"][e].as_py(), firsts["device"][e].as_py())
        rows = slice(offsets[e], offsets[e1])
        ends = offsets[e + 1:e1 + 1] - offsets[e]  # after each example's steps: its base run
        data = [np.insert(cols[c][rows], ends, cols[f"base_{c}"][starts[e:e1]]) for c in ("forwards", "tokens_fed", "wall_s")]
        try:
            fits[key] = fit_cost_model(*data)
        except CostModelError as exc:
            log.warning("no cost model for %s on %s: %s", *key, exc)
            fits[key] = None
    return fits


def example_offsets(inputs: pa.Table) -> np.ndarray:
    """Where each example's steps start in ``_typing_inputs`` (and the row count at the end)."""
    starts = run_starts(inputs, ("run_id", "cell_id", "example_id"))
    return np.append(starts, inputs.num_rows).astype(np.int64)


def typed_keys(steps: Sequence[dict]) -> list[int]:
    """One example's keystrokes spent on corrections up to each step (0 where not recorded)."""
    return list(itertools.accumulate(int(s.get("correction_keys") or 0) for s in steps))


def step_facts(steps: Sequence[dict], typist: TypingModel) -> list[StepFacts]:
    """An example's steps as :class:`StepFacts`; a correction's keystrokes count as typed characters."""
    return [StepFacts(typist.arrival(PrefixCounts(s["prefix_chars"] + keys, s["pasted_chars"], s["sentence_ends"])),
                      s["wall_s"], s["forwards"], s["tokens_fed"], s["draft_tokens_in"], s["accepted_tokens"],
                      s["generated_tokens"], s.get("request_tokens"), s.get("cached_tokens"),
                      s.get("chars_deleted")) for s, keys in zip(steps, typed_keys(steps), strict=True)]


def _row(first: dict, rate: float, policy: str, source: str, **values: Any) -> dict:
    return {**{k: first[k] for k in (*CELL, "device", "example_id")}, "chars_per_s": rate, "policy": policy,
            "source": source, "base_wait_s": first["base_wall_s"], **values}


def live_row(steps: list[dict]) -> dict:
    """A live example's real figures from its step rows (only the steps that ran have rows)."""
    first, final = steps[0], steps[-1]
    ends = [s["start_s"] + s["wall_s"] for s in steps]
    keeps = all(end <= nxt["arrival_s"] for end, nxt in zip(ends, steps[1:], strict=False))
    skipped = final["step"] - len(steps) if first["live_policy"] == "latest" else 0
    k = first.get("live_every_k")  # null on rows written before k was recorded: the label stays every_k
    label = first["live_policy"] if k is None else Policy(first["live_policy"], k=k).label  # as post hoc
    return _row(first, first["live_chars_per_s"], label, "live", wait_s=ends[-1] - final["arrival_s"],
                backlog_s=final["start_s"] - final["arrival_s"], keeps_up=keeps and skipped == 0,
                skipped=skipped, modelled=False)


def _int(inputs: pa.Table, column: str, null: int = 0) -> np.ndarray:
    return inputs.column(column).cast(pa.int64()).fill_null(null).to_numpy(zero_copy_only=False)


def step_columns(inputs: pa.Table, offsets: np.ndarray) -> StepColumns:
    return StepColumns(
        offsets=offsets, wall_s=inputs.column("wall_s").to_numpy(zero_copy_only=False).astype(float),
        forwards=_int(inputs, "forwards"), tokens_fed=_int(inputs, "tokens_fed"),
        draft_tokens_in=_int(inputs, "draft_tokens_in"), accepted_tokens=_int(inputs, "accepted_tokens"),
        generated_tokens=_int(inputs, "generated_tokens"), cached_tokens=_int(inputs, "cached_tokens", -1),
        prefix_chars=_int(inputs, "prefix_chars"), pasted_chars=_int(inputs, "pasted_chars"),
        sentence_ends=_int(inputs, "sentence_ends"),
        chars_deleted=_int(inputs, "chars_deleted") if "chars_deleted" in inputs.column_names else None,
        correction_keys=_cumulative(_int(inputs, "correction_keys"), offsets)
        if "correction_keys" in inputs.column_names else None)


def _cumulative(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per example (``offsets``), the running sum of ``values`` through each step."""
    total = np.cumsum(values)
    before = np.concatenate([[0], total])[offsets[:-1]]  # the sum before each example's first step
    return total - np.repeat(before, np.diff(offsets))


def typing_examples(inputs: pa.Table, cfg: TypingConfig) -> tuple[pa.Table, dict]:
    """Per-example rows for every replayed example × rate × policy (evaluated over arrays,
    :mod:`analysis.post_hoc`), in example, rate, policy order, then one row per live example."""
    offsets = example_offsets(inputs)
    fits = fit_cost_columns(inputs, offsets) if inputs.num_rows else {}
    firsts = inputs.take(offsets[:-1])
    live_policy = firsts.column("live_policy").to_pylist()
    replayed = np.array([e for e, p in enumerate(live_policy) if p is None], np.int64)
    parts = [_replayed_table(inputs, offsets, firsts, replayed, fits, cfg)] if replayed.size else []
    live = [e for e, p in enumerate(live_policy) if p is not None]
    if live:
        parts.append(_examples_table([live_row(inputs.slice(offsets[e], offsets[e + 1] - offsets[e]).to_pylist())
                                      for e in live]))
    return (pa.concat_tables(parts) if parts else _examples_table([])), fits


def _replayed_table(inputs: pa.Table, offsets: np.ndarray, firsts: pa.Table, replayed: np.ndarray, fits: dict,
                    cfg: TypingConfig) -> pa.Table:
    steps = step_columns(inputs, offsets)
    fitted = [fits.get(k) for k in zip(firsts.column("model").to_pylist(), firsts.column("device").to_pylist(),
                                       strict=True)]
    a_ex = np.array([f.a_s if f else np.nan for f in fitted])
    b_ex = np.array([f.b_s if f else np.nan for f in fitted])
    blocks = lane_blocks(steps, replayed)
    rates = np.asarray(cfg.chars_per_s, float)
    arrivals = np.concatenate([arrivals_at(steps, r, cfg.sentence_pause_s, cfg.paste_code)[blocks] for r in rates])
    lane_ex = np.tile(replayed, len(rates))  # lanes: rate-major
    policies = policies_of(cfg)
    outs = [post_hoc_lanes(steps, arrivals, lane_ex, p, a_ex[lane_ex], b_ex[lane_ex]) for p in policies]
    # rows in example, rate, policy order: row (e, r, p) is lane r·E + e of policy p
    E, R, P = replayed.size, len(rates), len(policies)
    e, r, pol = (a.ravel() for a in np.meshgrid(np.arange(E), np.arange(R), np.arange(P), indexing="ij"))
    lane = r * E + e
    pick = lambda field: np.stack([getattr(o, field) for o in outs])[pol, lane]  # noqa: E731
    miss = pick("failed")  # the policy changes work and no cost model was fitted: the figure is missing
    example = lane_ex[lane]
    ids = firsts.select([*CELL, "device", "example_id", "base_wall_s"]).take(example)
    labels = np.array([p.label for p in policies], dtype=object)[pol]
    cols = {c: ids.column(c) for c in (*CELL, "device", "example_id")}
    cols.update({
        "chars_per_s": pa.array(rates[r], pa.float64()), "policy": pa.array(labels, pa.string()),
        "source": pa.array(np.full(len(lane), "post_hoc", dtype=object), pa.string()),
        "wait_s": pa.array(pick("wait_s"), pa.float64(), mask=miss),
        "backlog_s": pa.array(pick("backlog_s"), pa.float64(), mask=miss),
        "base_wait_s": ids.column("base_wall_s"),
        "keeps_up": pa.array(pick("keeps_up"), pa.bool_(), mask=miss),
        "skipped": pa.array(pick("skipped"), pa.int64(), mask=miss),
        "modelled": pa.array(pick("modelled"), pa.bool_(), mask=miss)})
    return pa.table({c: cols[c] for c in EXAMPLE_COLUMNS}).cast(_examples_table([]).schema)


def _examples_table(rows: list[dict]) -> pa.Table:
    types = {"tau": pa.float64(), "chars_per_s": pa.float64(), "wait_s": pa.float64(), "backlog_s": pa.float64(),
             "base_wait_s": pa.float64(), "keeps_up": pa.bool_(), "skipped": pa.int64(), "modelled": pa.bool_()}
    schema = pa.schema([(c, types.get(c, pa.string())) for c in EXAMPLE_COLUMNS])
    return pa.table({c: [r[c] for r in rows] for c in EXAMPLE_COLUMNS}, schema=schema)


def _cost_table(fits: dict) -> pa.Table:
    keys = sorted(fits)
    return pa.table({"model": [k[0] for k in keys], "device": [k[1] for k in keys],
                     "a_s_per_forward": [fits[k].a_s if fits[k] else None for k in keys],
                     "b_s_per_token": [fits[k].b_s if fits[k] else None for k in keys],
                     "n_rows": [fits[k].n_rows if fits[k] else 0 for k in keys],
                     "r2": [fits[k].r2 if fits[k] else None for k in keys]},
                    schema=pa.schema([("model", pa.string()), ("device", pa.string()),
                                      ("a_s_per_forward", pa.float64()), ("b_s_per_token", pa.float64()),
                                      ("n_rows", pa.int64()), ("r2", pa.float64())]))


TYPING_COLUMNS = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("rate", "chars/s", "num"),
    Column("policy", "Policy"),
    Column("source", "Source"),
    Column("n", "n", "num"),
    Column("median_wait_s", "wait: median (s)", "num"),
    Column("p90_wait_s", "p90 (s)", "num"),
    Column("median_base_wait_s", "base wait: median (s)", "num"),
    Column("keeps_up_share", "keeps up", "share"),
    Column("median_backlog_s", "backlog: median (s)", "num"),
    Column("modelled_share", "modelled", "share"),
]
COST_COLUMNS = [Column("model", "Model"), Column("device", "Device"),
                Column("a_ms", "ms / forward", "x"), Column("b_ms", "ms / token fed", "x"),
                Column("n_rows", "rows fitted", "num"), Column("r2", "R²", "x")]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


def typing_section(tables: TypingTables) -> str:
    """The report's typing section (markdown): the typing table and the cost models behind it."""
    rows = [{**r, "setting": setting_label(r)} for r in tables.summary.to_pylist()]
    costs = [{**r, "a_ms": _ms(r["a_s_per_forward"]), "b_ms": _ms(r["b_s_per_token"])}
             for r in tables.cost_models.to_pylist()]
    return ("## Typing: wait after the last keystroke\n\nPer typing rate and drafting policy (docs/timing.md). "
            "`post_hoc` replays the recorded steps on the typing timeline; `live` is what live cells measured. "
            "`modelled` is the share of examples with a step costed by the fitted cost model below (a skipped "
            "prefix, an older or capped draft); `every` is never modelled.\n\n"
            + markdown(rows, TYPING_COLUMNS, blank_repeats="setting")
            + "\n### Cost model (wall ≈ a · forwards + b · tokens fed)\n\n" + markdown(costs, COST_COLUMNS))


def typing_settings(overrides: Sequence[str] = ()) -> TypingConfig:
    """The typing config of the analysis: defaults + ``key=value`` overrides, validated (ConfigError)."""
    cfg = load(TypingConfig, overrides=overrides)
    raise_if_problems(validate_typing(cfg), "bad typing settings")
    return cfg


def build_typing(results_dir: Any, cfg: TypingConfig | None = None, *, threads: int | None = None,
                 latest: bool = False) -> TypingTables:
    """:func:`typing_tables` over a results directory (its own connection; ``latest`` as the report's)."""
    from analysis.tables import connect

    con = connect(results_dir, threads=threads, latest=latest)
    try:
        return typing_tables(con, cfg)
    finally:
        con.close()


def typing_tables(con: duckdb.DuckDBPyConnection, cfg: TypingConfig | None = None) -> TypingTables:
    """Build ``typing_examples`` and the ``typing`` table on a connection from :func:`analysis.tables.connect`."""
    cfg = cfg or TypingConfig()
    table, fits = typing_examples(con.sql(sql_text("_typing_inputs")).to_arrow_table(), cfg)
    con.register("typing_examples", table)
    summary = con.sql(sql_text("typing")).to_arrow_table()
    return TypingTables(table, summary, _cost_table(fits))
