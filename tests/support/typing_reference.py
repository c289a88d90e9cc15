"""The per-example typing evaluation, kept deliberately simple as the reference for the array one.

One call of :func:`streamgen.timing.policies.evaluate` per (example, rate, policy), on step rows as dicts,
exactly as ``analysis/typing_table.py`` computed it before it went over arrays (:mod:`analysis.post_hoc`).
``tests/analysis/test_post_hoc.py`` compares the two on generated step rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from itertools import groupby

from analysis.typing_table import _row, example_steps, live_row, step_facts
from streamgen.config import TypingConfig
from streamgen.timing.costmodel import CostModelError, LinearCost, fit_cost_model
from streamgen.timing.policies import Policy, evaluate, policies_of
from streamgen.timing.timeline import TypingModel


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
            logging.getLogger(__name__).warning("no cost model for %s on %s: %s", *key, exc)
            fits[key] = None
    return fits


def post_hoc(steps: list[dict], cfg: TypingConfig, policies: Sequence[Policy],
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


def typing_rows(rows: Sequence[dict], cfg: TypingConfig) -> tuple[list[dict], dict]:
    """Per-example rows for every replayed example × rate × policy and every live example."""
    fits = fit_cost_models(rows)
    policies = policies_of(cfg)
    out: list[dict] = []
    for steps in example_steps(rows):
        if steps[0]["live_policy"] is not None:
            out.append(live_row(steps))
        else:
            out.extend(post_hoc(steps, cfg, policies, fits.get((steps[0]["model"], steps[0]["device"]))))
    return out, fits
