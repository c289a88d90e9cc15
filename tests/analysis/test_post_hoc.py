"""The array evaluation of the typing analysis (analysis.post_hoc, via analysis.typing_table.typing_examples)
equals the per-example reference (tests/support/typing_reference.py: one policies.evaluate call per example, rate
and policy) row for row, value for value, on generated step rows: several models (one with too little data
for a cost model), replayed and live examples, pasted blocks, simultaneous arrivals and ties (times on a
binary grid, so a step can end exactly when a segment arrives), drafts accepted in part, drafts cut shorter than
the previous answer (so a modelled step's draft is not the recorded one), cached-token counts recorded or
not, and every policy."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.post_hoc import StepColumns, post_hoc_lanes
from analysis.typing_table import typing_examples
from streamgen.config import TypingConfig
from streamgen.timing.policies import Policy
from tests.support.typing_reference import typing_rows


@st.composite
def example(draw: Any, model: str, index: int, live: bool) -> list[dict]:
    n = draw(st.integers(1, 7))
    rows, chars, pasted, ends, draft = [], 0, 0, 0, 0
    cached_recorded = draw(st.booleans())
    corrected = cached_recorded and draw(st.booleans())  # corrections rows: some steps rewrote earlier text
    for step in range(1, n + 1):
        seg = draw(st.sampled_from([0, 8, 8, 16, 32]))  # 0: arrives with the previous one
        paste = draw(st.integers(0, seg)) if draw(st.booleans()) else 0
        chars, pasted = chars + seg, pasted + paste
        ends += draw(st.integers(0, 1))
        accepted = draw(st.integers(0, draft))
        generated = draw(st.integers(0, 6))
        forwards = max(1, generated)
        request = 10 + chars // 4
        cached = draw(st.integers(0, request)) if cached_recorded else None
        tokens_fed = draft + (request - (cached or 0)) + (forwards - 1)
        rows.append({
            "model": model, "benchmark": "b", "acceptance": "greedy", "tau": None, "variant": None,
            "verifier_mode": None, "settings_tag": None, "device": "cpu", "run_id": "r", "cell_id": f"c-{model}",
            "example_id": f"e{index:02d}", "live_policy": "latest" if live else None,
            "live_chars_per_s": 8.0 if live else None, "base_wall_s": draw(st.sampled_from([0.5, 1.0, 2.0])),
            "base_forwards": 6, "base_tokens_fed": 40, "step": step, "is_final": step == n, "prefix_chars": chars,
            "pasted_chars": pasted, "sentence_ends": ends,
            "wall_s": draw(st.sampled_from([0.25, 0.5, 1.0, 2.0, 0.75])),
            "forwards": forwards, "tokens_fed": tokens_fed, "draft_tokens_in": draft, "accepted_tokens": accepted,
            "generated_tokens": generated, "arrival_s": chars / 8.0, "start_s": chars / 8.0 + 0.5 * step,
            "request_tokens": request if cached_recorded else None, "cached_tokens": cached, "live_every_k": None,
            "chars_deleted": draw(st.sampled_from([0, 0, 2])) if corrected and step > 1 else (0 if corrected else None),
            "correction_keys": draw(st.sampled_from([0, 0, 4, 8])) if corrected else None})
        draft = max(0, accepted + generated - draw(st.sampled_from([0, 0, 0, 1, 3])))  # a cut draft, at times
    for r in rows[1:]:
        r["base_wall_s"] = rows[0]["base_wall_s"]
    return rows


@st.composite
def results(draw: Any) -> list[dict]:
    rows: list[dict] = []
    for model, count in (("m1", draw(st.integers(1, 6))), ("m2", draw(st.integers(0, 4)))):
        for i in range(count):
            rows += draw(example(model, i, live=model == "m2" and i == 0))
    unfittable = draw(example("m3", 0, live=False))
    for r in unfittable:  # every row 10 tokens per forward: no cost model can be fitted (rank 1)
        r.update(tokens_fed=10 * r["forwards"], base_forwards=1, base_tokens_fed=10)
    return rows + unfittable


CONFIGS = [
    TypingConfig(chars_per_s=[4.0, 8.0, 16.0], policies=["every", "latest", "every_k", "cap"], every_k=2, cap_tokens=4),
    TypingConfig(chars_per_s=[8.0], sentence_pause_s=0.5, paste_code=False, policies=["latest", "every_k", "cap"],
                 every_k=3, cap_tokens=2),
]


def _record(reference: list[dict], rows: list[dict], paths: Counter[str]) -> None:
    corrected = {(r["model"], r["example_id"]) for r in rows if r["chars_deleted"]}
    for r in reference:
        paths["rows"] += 1
        paths["missing (no cost model)"] += r["wait_s"] is None
        paths["skipped"] += bool(r["skipped"])
        paths["modelled"] += bool(r["modelled"])
        paths["keeps up"] += bool(r["keeps_up"])
        paths["live"] += r["source"] == "live"
        paths["corrected skip"] += bool(r["skipped"]) and (r["model"], r["example_id"]) in corrected


@pytest.mark.parametrize("cfg", CONFIGS, ids=["four-policies", "pauses-no-paste"])
def test_array_evaluation_equals_the_per_example_reference(cfg: TypingConfig) -> None:
    paths: Counter[str] = Counter()

    @settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(rows=results())
    def compare(rows: list[dict]) -> None:
        reference, ref_fits = typing_rows(rows, cfg)
        table, fits = typing_examples(pa.Table.from_pylist(rows), cfg)
        assert fits == ref_fits
        got = table.to_pylist()
        assert len(got) == len(reference)
        # the array rows come replayed first (example, rate, policy order), then the live ones
        live = [r for r in reference if r["source"] == "live"]
        reference = [r for r in reference if r["source"] != "live"] + live
        for mine, theirs in zip(got, reference, strict=True):
            assert mine == theirs, f"\narrays:    {mine}\nreference: {theirs}"
        _record(reference, rows, paths)

    compare()
    # the generated timelines hit each case the comparison is meant to cover (counted in this test, so it
    # holds whatever order or worker the tests run in)
    for path in ("missing (no cost model)", "skipped", "modelled", "keeps up", "live", "corrected skip"):
        assert paths[path] > 0, (path, paths)
    assert paths["keeps up"] < paths["rows"]


def _one(n: int, arrivals: list[float]) -> tuple[StepColumns, np.ndarray]:
    z = np.zeros(n, np.int64)
    ones = np.ones(n, np.int64)
    cols = StepColumns(np.array([0, n]), np.full(n, 1.0), ones, ones, z, z, ones, np.full(n, -1),
                       np.arange(1, n + 1), z, z)
    return cols, np.array(arrivals, float)


def test_decreasing_arrivals_are_refused() -> None:
    cols, arrivals = _one(3, [0.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="arrivals decrease within an example"):
        post_hoc_lanes(cols, arrivals, np.array([0]), Policy("latest"), np.array([0.1]), np.array([0.01]))


def test_latest_by_hand() -> None:
    """Three segments at 0, 0.5 and 0.5 s, each recorded step 1 s: step 1 runs 0-1 s; at 1 s both later
    segments have arrived, so latest runs step 3 (skipping 2), which verifies step 1's draft of one token
    and so differs from the recorded work (modelled): 1 forward, 1 (fed) + 1 (skipped request token) +
    1 (draft) − 0 (recorded draft) tokens at 0.1 s + 0.01 s each = 0.13 s; the wait is 1.13 − 0.5 s."""
    cols, arrivals = _one(3, [0.0, 0.5, 0.5])
    out = post_hoc_lanes(cols, arrivals, np.array([0]), Policy("latest"), np.array([0.1]), np.array([0.01]))
    assert out.skipped.tolist() == [1] and out.modelled.tolist() == [True] and out.keeps_up.tolist() == [False]
    assert out.wait_s[0] == pytest.approx(1.0 + 0.1 + 3 * 0.01 - 0.5)
    assert out.backlog_s[0] == pytest.approx(0.5)
