"""A new per-token acceptance rule is one class plus its registration (streamgen/acceptance_rules.py):
a rule defined only here goes from the grid's validation through a stream step on a scripted model to
the cell's label and fingerprint, with no other edit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import pytest

from analysis.render import setting_label
from jobs.grid.shards import expand_cells
from streamgen import acceptance_rules
from streamgen.acceptance_rules import Greedy, Param, PerToken, Threshold, make_rule, sweep
from streamgen.config import GridConfig, benchmark_config, model_config, validate_acceptance
from streamgen.models.scripted import SCRIPTS

CALIBRATED = SCRIPTS["calibrated"].probs  # (0.99, 0.95, 0.8, 0.6, 0.3, 0.9, 0.97): set by design


@dataclass(frozen=True)
class Floor(PerToken):
    """Test-only rule: a draft token passes if it is the verifier's argmax AND its probability is ≥ p."""

    name: ClassVar[str] = "floor"
    params: ClassVar[Mapping[str, Param]] = MappingProxyType({"p": Param("p", "0.5")})
    p: float = 0.5

    def passes(self, draft_token: int, argmax_token: int, prob: float, margin: float | None = None) -> bool:
        return draft_token == argmax_token and prob >= self.p


@pytest.fixture
def floor_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one registration line, done for this test only."""
    monkeypatch.setattr(acceptance_rules, "RULES", MappingProxyType({**acceptance_rules.RULES, "floor": Floor}))


def _grid(**kw: object) -> GridConfig:
    base: dict[str, object] = dict(models=["scripted-ar-calibrated"], benchmarks=["coedit"],
                                   acceptance=["greedy", "floor"], rule_params={"p": [0.7]})
    return GridConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_a_rule_defined_here_validates_steps_labels_and_fingerprints(floor_registered: None) -> None:
    grid = _grid()
    assert validate_acceptance(grid) == []
    model, bench = model_config("scripted-ar-calibrated"), benchmark_config("coedit")
    greedy, floor = expand_cells(grid, {model.name: model}, {bench.name: bench})
    assert floor.rule == Floor(p=0.7) and greedy.rule == Greedy()

    # The stream step: the draft is the model's own answer (every token the argmax), so greedy keeps it
    # whole, and floor p=0.7 keeps the run before the first designed probability below 0.7:
    # 0.99, 0.95, 0.8 pass, 0.6 (position 3) does not → 3 tokens, by hand.
    from streamgen.families.registry import load_decoder

    expected = next(j for j, q in enumerate(CALIBRATED) if q < 0.7)
    assert expected == 3
    decoder = load_decoder(model, max_new_tokens=12)
    messages = [{"role": "user", "content": "Explain lists. Be brief."}]
    draft = decoder.generate(messages).token_ids
    assert len(draft) > expected + 1
    for cell, kept in ((floor, expected), (greedy, len(draft))):
        session = decoder.open_stream()
        try:
            step = session.step(messages, draft, cell.rule)
        finally:
            session.close()
        assert (step.draft_tokens_in, step.accepted_tokens) == (len(draft), kept), cell.label

    # Label and fingerprint: the rule's parameter is spelled in the label and enters the fingerprint and
    # the cell id; the record's acceptance column says floor, so the report's row is not greedy's.
    assert floor.label == "scripted-ar-calibrated / coedit / floor p=0.7"
    assert (floor.acceptance, floor.tau, floor.tie_guard) == ("floor", None, None)
    assert floor.settings()["acceptance"] == "floor" and floor.settings()["acceptance.p"] == 0.7
    assert "acceptance.p" not in greedy.settings()
    assert floor.fingerprint != greedy.fingerprint and floor.cell_id != greedy.cell_id
    other = expand_cells(_grid(rule_params={"p": [0.9]}), {model.name: model}, {bench.name: bench})[1]
    assert other.fingerprint != floor.fingerprint  # p itself is in the fingerprint, not only the name
    rows = [{"model": "m", "acceptance": c.acceptance, "tau": c.tau} for c in (greedy, floor)]
    assert [setting_label(r) for r in rows] == ["m · greedy", "m · floor"]


def test_a_registered_rules_config_problems_name_the_fix(floor_registered: None) -> None:
    problems = validate_acceptance(_grid(rule_params={}))
    assert problems == ["acceptance lists floor but rule_params.p=[] is empty: e.g. rule_params.p=[0.5]"]
    assert validate_acceptance(_grid(rule_params={"q": [1.0]})) == [
        "rule_params.q is set but acceptance lists no rule that takes q (none does): add one, or drop rule_params.q",
        "acceptance lists floor but rule_params.p=[] is empty: e.g. rule_params.p=[0.5]"]
    with pytest.raises(ValueError, match="acceptance=floor takes p, not tau"):
        make_rule("floor", {"p": 0.5, "tau": 0.9})


def test_unregistered_rules_are_refused_by_name() -> None:
    # the registered names come from the registry, so a new rule changes no line here (docs/decoding.md)
    assert validate_acceptance(_grid(rule_params={"floor_q": [0.7]})) == [
        f"acceptance='floor' is not one of {tuple(acceptance_rules.RULES)}",
        "rule_params.floor_q is set but acceptance lists no rule that takes floor_q (none does): add one, or drop "
        "rule_params.floor_q"]
    assert tuple(acceptance_rules.RULES)[:2] == ("greedy", "threshold")


def test_the_sweep_keeps_the_grids_order_of_cells() -> None:
    """Required parameters: one rule per value; optional ones: the rule without, then one per value."""
    values = {"tau": [0.5, 0.9], "tie_guard": [1.0, 4.0]}
    assert sweep("threshold", values) == [Threshold(0.5), Threshold(0.9)]
    assert sweep("greedy", values) == [Greedy(), Greedy(1.0), Greedy(4.0)]
    assert [acceptance_rules.rule_label(r) for r in sweep("greedy", values)] == [
        "greedy", "greedy guard=1", "greedy guard=4"]
    assert acceptance_rules.column_label("threshold", 0.9, table=True) == "τ=0.9"
    assert acceptance_rules.column_label("threshold", 0.9) == "threshold τ=0.9"
