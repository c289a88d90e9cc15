"""The typo model (streamgen.timing.corrections): rate, delay, final state, seeding; the request's states,
the grid's corrections block and its place in cell identity; the step rows' edit columns."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyarrow as pa
import pytest

from analysis.population import paragraph_ends
from analysis.post_hoc import arrivals_at
from analysis.typing_table import step_columns, step_facts
from jobs.grid.shards import expand_cells, expand_shards
from jobs.run.rows import step_rows
from streamgen.config import ConfigError, CorrectionsConfig, grid_config, validate_corrections
from streamgen.decoding.base import Generation, StepResult
from streamgen.decoding.meter import MeterReading
from streamgen.live import StepTiming
from streamgen.requests.request import Edit, StreamRequest, edit_between
from streamgen.requests.segment import code_block_spans
from streamgen.stream import PairOutcome
from streamgen.timing.corrections import state_at, typed_states, typos, with_corrections
from streamgen.timing.timeline import TypingModel
from streamgen.timing.timeline import paragraph_ends as text_paragraph_ends
from tests.jobs.grid.test_shards import BENCHES, IDS, MODELS, _grid
from tests.support.row_support import row_context

LETTERS = "abcdefghijklmnopqrstuvwxyz" * 800  # 20,800 typable characters, no whitespace
SENTENCE = "Write a function that adds two numbers. It should handle floats. Use type hints."


def test_the_typo_rate_is_honoured_within_sampling_error() -> None:
    """A typo is drawn at each character typed while none is on screen: (typos) / (such characters) ≈ rate,
    within 4 binomial standard deviations."""
    rate, delay = 0.05, 3
    found = typos(LETTERS, CorrectionsConfig(rate, delay, seed=1), "ex")
    covered = sum(t.fixed_at - t.position - 1 for t in found)  # typed exactly while a typo is on screen
    draws = len(LETTERS) - covered
    assert covered == delay * len(found) - (delay - (len(LETTERS) - 1 - found[-1].position)) * (
        found[-1].fixed_at == len(LETTERS))  # only a typo near the end is cut short
    sd = math.sqrt(rate * (1 - rate) / draws)
    assert abs(len(found) / draws - rate) < 4 * sd, (len(found), draws)


def test_a_typo_stays_for_the_delay_then_is_corrected() -> None:
    """Typed one character at a time: a typo at p shows at typed counts p+1..p+d and is gone at p+d+1."""
    delay = 4
    text = LETTERS[:400]
    found = typos(text, CorrectionsConfig(0.05, delay, seed=3), "ex")
    assert found, "the test needs typos"
    for t in found:
        assert t.wrong != text[t.position]
        if t.fixed_at == len(text):
            continue
        assert t.fixed_at == t.position + delay + 1
        for typed in range(t.position + 1, t.position + delay + 1):
            assert state_at(text, found, typed)[t.position] == t.wrong
        assert state_at(text, found, t.fixed_at)[t.position] == text[t.position]


def test_states_end_with_the_request_and_count_each_correction_once() -> None:
    segments = tuple(LETTERS[i:i + 7] for i in range(0, 700, 7))
    cfg = CorrectionsConfig(0.03, 2, seed=0)
    typed = typed_states(segments, cfg, "ex")
    text = "".join(segments)
    assert typed.states[-1] == text
    assert [len(s) for s in typed.states] == [7 * i for i in range(1, 101)]  # a typo replaces, never adds
    assert any(s != text[:len(s)] for s in typed.states), "some state must not be a prefix"
    # backspaces to the typo and the characters retyped: 2 · (d + 1) each, unless the request ends first
    assert sum(typed.correction_keys) == sum(2 * (t.fixed_at - t.position) for t in typed.typos)
    assert all(2 * (t.fixed_at - t.position) == 2 * 3 for t in typed.typos if t.fixed_at < len(text))


def test_typos_are_seeded_by_seed_and_example_id() -> None:
    cfg = CorrectionsConfig(0.05, 3, seed=7)
    assert typos(LETTERS[:2000], cfg, "ex") == typos(LETTERS[:2000], cfg, "ex")
    assert typos(LETTERS[:2000], cfg, "ex") != typos(LETTERS[:2000], cfg, "other")
    assert typos(LETTERS[:2000], cfg, "ex") != typos(LETTERS[:2000], dataclasses.replace(cfg, seed=8), "ex")


def test_whitespace_and_pasted_code_are_never_mistyped() -> None:
    text = "Fix this:\n```python\ndef f(x):\n    return x\n```\nthanks " * 40
    found = typos(text, CorrectionsConfig(0.5, 1, seed=0), "ex")
    assert found and all(not text[t.position].isspace() for t in found)
    spans = code_block_spans(text)
    assert spans and all(not any(a <= t.position < b for a, b in spans) for t in found)


def test_off_gives_exactly_the_prefixes() -> None:
    """typo_rate 0: with_corrections returns the very request, whose states are its prefixes."""
    req = StreamRequest("ex", (), ("Write a function. ", "Keep it short."))
    assert with_corrections(req, CorrectionsConfig(0.0, 3, 0)) is req
    assert with_corrections(req, None) is req
    assert [req.state(i) for i in (0, 1, 2)] == ["", "Write a function. ", "Write a function. Keep it short."]
    assert typed_states(req.segments, CorrectionsConfig(1e-12, 1, 0), "ex").states == (req.prefix(1), req.prefix(2))


def test_messages_send_the_state() -> None:
    req = StreamRequest("ex", (), ("Wrote ", "it."), states=("Wrxte ", "Wrote it."), correction_keys=(0, 6))
    assert req.messages(1)[-1]["content"] == "Wrxte "
    assert req.messages()[-1]["content"] == req.messages(2)[-1]["content"] == "Wrote it."
    assert req.edit(2) == Edit(first_change_char=2, chars_deleted=4, chars_inserted=7)
    with pytest.raises(ValueError, match="states"):
        StreamRequest("ex", (), ("a", "b"), states=("a", "x"))


def test_edit_between() -> None:
    assert edit_between("Wrxte a", "Write a fun") == Edit(2, 5, 9)
    assert edit_between("abc", "abcdef") == Edit(3, 0, 3)
    assert edit_between("", "ab") == Edit(0, 0, 2)


def test_bad_settings_name_the_fix() -> None:
    problems = validate_corrections(CorrectionsConfig(1.0, 0, -1))
    assert len(problems) == 3
    assert "corrections.typo_rate=1.0 must be in [0, 1)" in problems[0] and "typo_rate=0.02" in problems[0]
    assert "correction_delay_chars=0 must be ≥ 1" in problems[1]
    with pytest.raises(ConfigError, match="typo_rate"):
        typos("abc", CorrectionsConfig(-0.1, 1, 0), "ex")


def test_the_typists_grid_turns_corrections_on() -> None:
    grid = grid_config("typists")
    assert grid.corrections.enabled and not validate_corrections(grid.corrections)
    assert not grid_config("smoke").corrections.enabled


def test_corrections_enter_the_cell_identity_only_when_on() -> None:
    def ids(grid):  # type: ignore[no-untyped-def]
        cells = expand_cells(grid, MODELS, BENCHES)
        shards = expand_shards(cells, IDS, shard_size=3, seed=0)
        return [c.cell_id for c in cells], [c.fingerprint for c in cells], [s.shard_id for s in shards]

    default = ids(_grid())
    assert ids(_grid(corrections=CorrectionsConfig(0.0, 9, 5))) == default  # off: byte-identical ids
    on = ids(_grid(corrections=CorrectionsConfig(0.02, 3, 0)))
    assert all(set(a).isdisjoint(b) for a, b in zip(on, default, strict=True))
    cell = expand_cells(_grid(corrections=CorrectionsConfig(0.02, 3, 0)), MODELS, BENCHES)[0]
    assert cell.identity()["corrections"] == {"typo_rate": 0.02, "correction_delay_chars": 3, "seed": 0}


def _step(tokens: int = 2) -> StepResult:
    gen = Generation(tuple(range(tokens)), "x", True, 0.01, MeterReading(1, 3, 0.005))
    return StepResult(0, 0, tokens, gen)


def test_step_rows_record_what_changed() -> None:
    req = StreamRequest("ex", (), ("Wrote ", "it ", "now."), states=("Wrxte ", "Wrote it ", "Wrote it now."),
                        correction_keys=(0, 6, 0))
    outcome = PairOutcome(_step().answer, (_step(), _step(), _step()), "base_first", req)
    rows = step_rows(outcome, row_context())
    got = [(r.first_change_char, r.chars_deleted, r.chars_inserted, r.correction_keys, r.arrived_text) for r in rows]
    assert got == [(0, 0, 6, 0, "Wrxte "), (2, 4, 7, 6, "ote it "), (9, 0, 4, 0, "now.")]
    plain = step_rows(PairOutcome(_step().answer, (_step(), _step(), _step()), "base_first",
                                  dataclasses.replace(req, states=None, correction_keys=None)), row_context())
    assert {(r.first_change_char, r.chars_deleted, r.chars_inserted, r.correction_keys) for r in plain} == {
        (None, None, None, None)}
    assert [r.arrived_text for r in plain] == ["Wrote ", "it ", "now."]


def test_a_live_row_after_skipped_steps_counts_their_edits_and_keys() -> None:
    """A live run drafts steps 1 and 3: step 3's row compares with step 1's text and sums steps 2..3's keys."""
    req = StreamRequest("ex", (), ("Wrote ", "it ", "now."), states=("Wrxte ", "Wrote it ", "Wrote it now."),
                        correction_keys=(0, 6, 2))
    timing = (StepTiming(1, 0.5, 0.5), StepTiming(3, 1.5, 1.6))
    rows = step_rows(PairOutcome(_step().answer, (_step(), _step()), "base_first", req, timing=timing),
                     row_context())
    assert [(r.step, r.first_change_char, r.chars_deleted, r.chars_inserted, r.correction_keys) for r in rows] == [
        (1, 0, 0, 6, 0), (3, 2, 4, 11, 6 + 2)]


def test_the_population_rebuilds_paragraphs_edit_by_edit() -> None:
    """Corrections rows: the request is rebuilt from each step's first change and inserted text (joining the
    arrived texts would count the re-sent characters twice and shift every later paragraph break)."""
    final = "One.\n\nTwo.\n\nThree."
    arrived, first_change = ["One. Two xxxxx", "\n\nTwo.\n\nThree."], [0, 4]  # step 2 rewrites from character 4
    assert paragraph_ends([14, len(final)], arrived, first_change) == text_paragraph_ends(final, [14, len(final)])
    assert paragraph_ends([14, len(final)], arrived) != text_paragraph_ends(final, [14, len(final)])  # the path


def test_correction_keystrokes_delay_the_arrivals() -> None:
    """Post hoc, a correction's backspaces and retyped characters take typing time: step i arrives at
    (prefix chars + correction keys so far) / rate, in the per-example facts and the array columns alike."""
    rows = [{"prefix_chars": c, "pasted_chars": 0, "sentence_ends": 0, "wall_s": 0.5, "forwards": 1, "tokens_fed": 3,
             "draft_tokens_in": 0, "accepted_tokens": 0, "generated_tokens": 1, "correction_keys": k,
             "cached_tokens": 0, "request_tokens": 3, "chars_deleted": 0}
            for c, k in ((8, 0), (16, 6), (24, 2))]
    facts = step_facts(rows, TypingModel(2.0))
    assert [f.arrival_s for f in facts] == [8 / 2, (16 + 6) / 2, (24 + 6 + 2) / 2]
    table = pa.Table.from_pylist([{**r, "generated_tokens": 1} for r in rows * 2])  # two examples of 3 steps
    cols = step_columns(table, np.array([0, 3, 6]))
    assert cols.correction_keys is not None and cols.correction_keys.tolist() == [0, 6, 8, 0, 6, 8]
    assert arrivals_at(cols, 2.0, 0.0, True).tolist() == [f.arrival_s for f in facts] * 2
