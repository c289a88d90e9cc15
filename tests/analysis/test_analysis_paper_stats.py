"""The paper's remaining statistics against independent numpy computations over the same records:
share of the attainable speedup (ratio of medians), speed × correctness, unchanged drafts, Figure 2's
per-model numbers, and Table 3's accept ratio / one-forward share. Record sets come from hypothesis
and from real tiny decoders of every family (autoregressive, ReFusion, LLaDA-style bidirectional).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.tables import build_tables
from jobs.run.rows import outcome_rows
from streamgen.acceptance_rules import Greedy, Threshold
from streamgen.benchmarks import Score
from streamgen.config import model_config
from streamgen.decoding.base import draft_fingerprint
from streamgen.families.registry import load_decoder
from streamgen.results.records import PairRecord, StepRecord
from streamgen.scoring.metrics import best_token_f1
from streamgen.stream import StreamRequest, run_pair
from tests.analysis.test_analysis_stats import (
    HYPO,
    KEY,
    SETTING,
    _macro,
    _mean,
    _med,
    assert_matches,
    dist_stats,
    group,
    included,
    reference,
    step_reference,
)
from tests.support.analysis_fixtures import RecordSet, record_sets, write_record_set
from tests.support.row_support import row_context


def speedup(p: PairRecord) -> float:
    return p.base_forwards / p.residual_forwards


def attain_stats(rows: list[PairRecord]) -> dict:
    inc = [p for p in rows if included(p)]
    s = [speedup(p) for p in inc]
    att = [p.base_forwards / p.min_residual_forwards for p in inc]
    ms, ma = _med(s), _med(att)
    return {"n_included": len(inc), "median_speedup_forwards": ms, "median_attainable": ma,
            "share_of_medians": ms / ma if ms is not None and ma else None,
            "median_achieved": _med([x / a for x, a in zip(s, att, strict=True)])}


def attain_reference(pairs: list[PairRecord]) -> dict:
    out = reference(pairs, attain_stats, with_macro=True)
    for k, v in out.items():
        if k[0] == "macro":  # the ratio of the macro medians, not a mean of ratios
            ms, ma = v["median_speedup_forwards"], v["median_attainable"]
            v["share_of_medians"] = ms / ma if ms is not None and ma else None
    return out


def _speed(x: float) -> str:
    return "faster" if x > 1 else "slower" if x < 1 else "same"


def crosstab_reference(pairs: list[PairRecord]) -> dict:
    inc = [p for p in pairs if included(p)]
    out = {}
    for scope, cols in (("benchmark", KEY), ("pooled", SETTING)):
        for k, rows in group(inc, cols).items():
            key = k if scope == "benchmark" else (k[0], None, *k[1:])
            by: dict[tuple, list[PairRecord]] = defaultdict(list)
            for p in rows:
                by[(_speed(speedup(p)), "changed" if p.base_answer != p.stream_answer else "unchanged")].append(p)
            for (speed, answer), rs in by.items():
                out[(scope, *key, speed, answer)] = {
                    "n": len(rs), "share": len(rs) / len(rows),
                    "n_quality_changed": sum(p.stream_quality != p.base_quality for p in rs),
                    "n_quality_up": sum(p.stream_quality > p.base_quality for p in rs),
                    "n_quality_down": sum(p.stream_quality < p.base_quality for p in rs),
                    "mean_quality_delta": _mean(p.stream_quality - p.base_quality for p in rs),
                }
    return out


def stability_reference(records: RecordSet) -> dict:
    steps: dict[tuple, list[StepRecord]] = defaultdict(list)
    for s in records.steps:
        steps[(s.run_id, s.cell_id, s.example_id)].append(s)
    per_cell: dict[tuple, list[tuple[int, int, int | None]]] = defaultdict(list)
    for p in filter(included, records.pairs):
        mine = sorted(steps.get((p.run_id, p.cell_id, p.example_id), []), key=lambda s: s.step)
        if not mine:
            continue
        pairs_ = list(zip([None, *(s.draft_fingerprint for s in mine)], mine, strict=False))
        compared = [(prev, s) for prev, s in pairs_ if prev is not None and s.draft_fingerprint is not None]
        final = [prev == s.draft_fingerprint for prev, s in compared if s.is_final]
        per_cell[tuple(getattr(p, c) for c in KEY)].append(
            (len(compared), sum(prev == s.draft_fingerprint for prev, s in compared), final[0] if final else None))
    out = {}
    for k, items in per_cell.items():
        n_cmp = sum(i[0] for i in items)
        finals = [float(i[2]) for i in items if i[2] is not None]
        out[k] = {"n_examples": len(items), "n_steps_compared": n_cmp,
                  "share_steps_unchanged": sum(i[1] for i in items) / n_cmp if n_cmp else None,
                  "share_final_unchanged": _mean(finals) if finals else None}
    return out


def by_model_reference(pairs: list[PairRecord]) -> dict:
    out = {}
    for k, rows in group(filter(included, pairs), SETTING).items():
        s = np.asarray([speedup(p) for p in rows])
        out[k] = {"n": s.size, "n_benchmarks": len({p.benchmark for p in rows}),
                  "median_speedup_forwards": float(np.median(s)), "mean_speedup_forwards": float(s.mean()),
                  "min_speedup_forwards": float(s.min()), "max_speedup_forwards": float(s.max()),
                  "share_below_1x": float((s < 1).mean())}
    return out


def adaptation_extras(records: RecordSet) -> dict:
    """Table 3's new columns from the numpy step and distribution references (benchmark rows)."""
    steps, dist = step_reference(records), reference(records.pairs, dist_stats, with_macro=False)
    cells = {k for k in group(records.pairs, KEY)}
    out = {}
    for k in cells:
        model, bench, acc, tau, variant, mode = k
        before = (model, bench, acc, tau, None, mode)
        if variant is None or before not in cells:
            continue
        out[("benchmark", *k)] = {
            "accept_ratio_after": steps.get(k, {}).get("accept_ratio_all"),
            "accept_ratio_before": steps.get(before, {}).get("accept_ratio_all"),
            "one_forward_share_after": dist[("benchmark", *k)]["share_one_forward"],
            "one_forward_share_before": dist[("benchmark", *before)]["share_one_forward"],
        }
    for k in {(kk[1], *kk[3:]) for kk in out}:
        members = [v for kk, v in out.items() if (kk[1], *kk[3:]) == k]
        out[("macro", k[0], None, *k[1:])] = _macro(members)
    return out


def check_all(records: RecordSet) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        write_record_set(Path(tmp), records)
        t = build_tables(tmp, threads=1)
    assert_matches(t["attainable"], attain_reference(records.pairs))
    assert_matches(t["speed_quality"], crosstab_reference(records.pairs), key=("scope", *KEY, "speed", "answer"))
    assert_matches(t["draft_stability"], stability_reference(records), key=KEY)
    assert_matches(t["model_speedups"], by_model_reference(records.pairs), key=SETTING)
    extras = adaptation_extras(records)
    rows = {tuple(r[c] for c in ("scope", *KEY)): r for r in t["adaptation"].to_pylist()}
    assert set(rows) == set(extras)
    for k, want in extras.items():
        for col, v in want.items():
            assert rows[k][col] == (None if v is None else pytest.approx(v, rel=1e-12)), (k, col)


@st.composite
def varied_sets(draw: st.DrawFn) -> RecordSet:
    """record_sets with answers that sometimes differ and steps that carry draft fingerprints."""
    rs = draw(record_sets())
    pairs = [dataclasses.replace(p, stream_answer=draw(st.sampled_from(["a", "b"]))) for p in rs.pairs]
    steps = [dataclasses.replace(s, draft_fingerprint=draw(st.sampled_from(["d1", "d2", None])))
             for s in rs.steps]
    return RecordSet(pairs, steps)


@HYPO
@given(varied_sets())
def test_new_statistics_match_numpy(records: RecordSet) -> None:
    check_all(records)


REQUESTS = [
    ("humaneval", ("Write a function. ", "It adds two numbers. ", "Return the sum!")),
    ("humaneval", ("def f(x):\n", "Explain why? ", "Use type hints.")),
    ("chat", ("The fox jumps. ", "Describe it. ")),
    ("chat", ("Hi there. ", "What is two plus two? ", "Answer briefly.")),
    ("chat", ("Say hi. ", "")),  # the last arrival adds nothing: the final draft repeats the previous one
]
MODELS = {"tiny-llama": "autoregressive", "tiny-refusion": "refusion", "tiny-llada": "bidirectional"}


@pytest.fixture(scope="module")
def decoder_records() -> RecordSet:
    """Rows of real tiny decoders of each family: greedy and τ=0.5, 5 requests each, F1-scored."""
    pairs, steps = [], []
    for name in MODELS:
        decoder = load_decoder(model_config(name), max_new_tokens=8)
        for acceptance, rule, tau in (("greedy", Greedy(), None), ("threshold", Threshold(0.5), 0.5)):
            for i, (bench, segs) in enumerate(REQUESTS):
                cell = f"{name}|{bench}|{acceptance}"
                ctx = row_context(name, bench, acceptance, tau, shard_id=f"shard-{cell}")
                outcome = run_pair(decoder, StreamRequest(f"e{i}", (), segs), rule, base_first=i % 2 == 0)
                q = [best_token_f1(a, ["the sum of two numbers"]) for a in (outcome.base.text, outcome.stream.text)]
                rec = outcome_rows(outcome, ctx, Score(q[0], "f1"), Score(q[1], "f1"))
                assert [s.draft_fingerprint for s in rec.steps] == [
                    draft_fingerprint(st.answer.token_ids) for st in outcome.steps]
                pairs.append(rec.pair)
                steps.extend(rec.steps)
    return RecordSet(pairs, steps)


@pytest.mark.slow
def test_new_statistics_match_numpy_on_real_decoder_rows(decoder_records: RecordSet) -> None:
    assert {p.family for p in decoder_records.pairs} == set(MODELS.values())
    assert sum(included(p) for p in decoder_records.pairs) >= 24, "most rows must enter the statistics"
    stable = stability_reference(decoder_records)
    # the repeated prefix gives an unchanged final draft for every family; other steps change
    for model in MODELS:
        shares = [v["share_final_unchanged"] for k, v in stable.items() if k[0] == model and k[1] == "chat"]
        assert shares and all(0 < x < 1 for x in shares), (model, shares)
    check_all(decoder_records)
