"""The typing analysis: every included example under every typing rate and drafting policy.

``_typing_inputs.sql`` gives the recorded steps; per (model, device) a cost model is fitted on the
recorded steps and base runs (:func:`streamgen.costmodel.fit_cost_model`); each replayed example is
evaluated post hoc under each rate of the typing config and each policy
(:func:`streamgen.policies.evaluate`), and each live example contributes the wait it really had.
The rows become the ``typing_examples`` view; ``typing.sql`` aggregates them into the ``typing``
table. Definitions: docs/timing.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import duckdb
import pyarrow as pa

from analysis.figures import setting_label
from analysis.render import Column, markdown
from analysis.tables import sql_text
from streamgen.config import TypingConfig, load, raise_if_problems, validate_typing
from streamgen.costmodel import CostModelError, LinearCost, fit_cost_model
from streamgen.policies import Policy, StepFacts, evaluate, policies_of
from streamgen.timeline import PrefixCounts, TypingModel

log = logging.getLogger(__name__)

# settings_tag: what differs between fingerprints of one cell name (analysis.fingerprints), as in every table
CELL = ("model", "benchmark", "acceptance", "tau", "variant", "verifier_mode", "settings_tag")
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
    """Per (model, device): every recorded step plus each example's base run; None when unfittable."""
    fits: dict[tuple[str, str], LinearCost | None] = {}
    for key, group in groupby(rows, key=lambda r: (r["model"], r["device"])):
        data = []
        for steps in example_steps(list(group)):
            data += [(s["forwards"], s["tokens_fed"], s["wall_s"]) for s in steps]
            data.append((steps[0]["base_forwards"], steps[0]["base_tokens_fed"], steps[0]["base_wall_s"]))
        try:
            fits[key] = fit_cost_model(*zip(*data, strict=True))
        except CostModelError as exc:
            log.warning("no cost model for %s on %s: %s", *key, exc)
            fits[key] = None
    return fits


def step_facts(steps: Sequence[dict], typist: TypingModel) -> list[StepFacts]:
    return [StepFacts(typist.arrival(PrefixCounts(s["prefix_chars"], s["pasted_chars"], s["sentence_ends"])),
                      s["wall_s"], s["forwards"], s["tokens_fed"], s["draft_tokens_in"], s["accepted_tokens"],
                      s["generated_tokens"], s.get("request_tokens"), s.get("cached_tokens")) for s in steps]


def _row(first: dict, rate: float, policy: str, source: str, **values: Any) -> dict:
    return {**{k: first[k] for k in (*CELL, "device", "example_id")}, "chars_per_s": rate, "policy": policy,
            "source": source, "base_wait_s": first["base_wall_s"], **values}


def _post_hoc(steps: list[dict], cfg: TypingConfig, policies: Sequence[Policy],
              cost: LinearCost | None) -> Iterator[dict]:
    for rate in cfg.chars_per_s:
        facts = step_facts(steps, TypingModel(rate, cfg.sentence_pause_s, cfg.paste_code))
        for policy in policies:
            try:
                out = evaluate(facts, policy, cost)
            except ValueError:  # needs the cost model and none could be fitted: the figure is missing
                yield _row(steps[0], rate, policy.label, "post_hoc", wait_s=None, backlog_s=None,
                           keeps_up=None, skipped=None, modelled=None)
                continue
            yield _row(steps[0], rate, out.policy, "post_hoc", wait_s=out.wait_s, backlog_s=out.backlog_s,
                       keeps_up=out.keeps_up, skipped=len(out.skipped), modelled=out.modelled)


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


def typing_rows(rows: Sequence[dict], cfg: TypingConfig) -> tuple[list[dict], dict]:
    """Per-example rows for every replayed example × rate × policy and every live example."""
    fits = fit_cost_models(rows)
    policies = policies_of(cfg)
    out: list[dict] = []
    for steps in example_steps(rows):
        if steps[0]["live_policy"] is not None:
            out.append(live_row(steps))
        else:
            out.extend(_post_hoc(steps, cfg, policies, fits.get((steps[0]["model"], steps[0]["device"]))))
    return out, fits


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


def build_typing(results_dir: Any, cfg: TypingConfig | None = None, *, threads: int | None = None) -> TypingTables:
    """:func:`typing_tables` over a results directory (its own connection)."""
    from analysis.tables import connect

    con = connect(results_dir, threads=threads)
    try:
        return typing_tables(con, cfg)
    finally:
        con.close()


def typing_tables(con: duckdb.DuckDBPyConnection, cfg: TypingConfig | None = None) -> TypingTables:
    """Build ``typing_examples`` and the ``typing`` table on a connection from :func:`analysis.tables.connect`."""
    cfg = cfg or TypingConfig()
    rows = con.sql(sql_text("_typing_inputs")).to_arrow_table().to_pylist()
    examples, fits = typing_rows(rows, cfg)
    table = _examples_table(examples)
    con.register("typing_examples", table)
    summary = con.sql(sql_text("typing")).to_arrow_table()
    return TypingTables(table, summary, _cost_table(fits))
