"""Numerics (issue 27): dtype spacing, top-2 margins in spacings, greedy's tie_guard, the numerics
record, and the near-tie scripted model showing the draft-branch effect and the guard removing it.

Expected counts come from the design in streamgen/models/scripted_tie.py, recomputed here from the rendered
request's byte length (the chat template's text, encoded), not from the model's own helpers.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgen.acceptance_rules import Greedy, Threshold, TieGuardUnsupported
from streamgen.config import model_config
from streamgen.decoding.numerics import margins_in_spacings, numerics_record, spacing, top2
from streamgen.decoding.verification import Verification, accepted_length
from streamgen.diagnostics.divergence import divergence, first_difference
from streamgen.families.registry import load_decoder
from streamgen.stream import StreamRequest, run_pair

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


# -- spacing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=300, deadline=None)
@given(x=st.floats(min_value=-6e4, max_value=6e4, allow_nan=False))
def test_spacing_is_the_gap_to_the_next_representable_value(dtype: torch.dtype, x: float) -> None:
    t = torch.tensor(x, dtype=dtype).abs()  # a value of the dtype, as logits are
    gap = torch.nextafter(t, torch.tensor(math.inf, dtype=dtype)) - t
    assert spacing(float(t), dtype) == float(gap)
    assert spacing(-float(t), dtype) == float(gap)  # the magnitude's spacing


def test_spacing_at_known_points() -> None:
    """bf16 keeps 8 significant bits: eps = 2**-7 at 1; 0.0625 between 8 and 16; 0.125 between 16 and 32."""
    assert spacing(1.0, torch.bfloat16) == torch.finfo(torch.bfloat16).eps == 2.0 ** -7
    assert spacing(12.0, torch.bfloat16) == 0.0625 and spacing(-20.0, torch.bfloat16) == 0.125
    assert spacing(1.0, torch.float32) == torch.finfo(torch.float32).eps
    assert spacing(0.0, torch.bfloat16) == torch.finfo(torch.bfloat16).eps * torch.finfo(torch.bfloat16).tiny
    assert math.isnan(spacing(math.inf, torch.float32))


def test_margins_in_spacings_of_a_bf16_row() -> None:
    row = torch.tensor([[12.0, 12.0625, 3.0, 12.25]], dtype=torch.bfloat16)  # top 12.25, next 12.0625
    assert margins_in_spacings(row, torch.bfloat16) == [(12.25 - 12.0625) / 0.0625] == [3.0]
    t = top2(row[0], torch.bfloat16)
    assert (t.top1, t.top2, t.margin, t.margin_spacings) == (3, 1, 0.1875, 3.0)


# -- tie_guard ---------------------------------------------------------------------------------


def _reference_accepted(draft: list[int], argmax: list[int], margins: list[float], guard: float | None) -> int:
    n = 0
    while n < len(draft) and draft[n] == argmax[n] and (guard is None or margins[n] > guard):
        n += 1
    return n


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_greedy_tie_guard_matches_a_simple_reference(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 12))
    draft = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    argmax = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    margins = data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.0, 4.0, 4.5, 100.0]), min_size=n, max_size=n))
    guard = data.draw(st.sampled_from([None, 0.0, 1.0, 4.0]))
    ver = Verification(tuple(argmax), (0.5,) * n, tuple(margins))
    assert accepted_length(draft, ver, Greedy(tie_guard=guard)) == _reference_accepted(draft, argmax, margins, guard)


def test_tie_guard_needs_margins_and_is_greedy_only() -> None:
    with pytest.raises(TieGuardUnsupported, match="only autoregressive"):
        accepted_length([1], Verification((1,), (0.9,)), Greedy(tie_guard=1.0))
    assert accepted_length([1], Verification((1,), (0.9,)), Greedy()) == 1  # no guard: margins not needed
    assert not Threshold(0.5).guarded(0.0)
    with pytest.raises(ValueError, match="tie_guard"):
        Greedy(tie_guard=-1.0)


# -- the numerics record -----------------------------------------------------------------------


def test_numerics_record_names_what_the_process_runs() -> None:
    import transformers

    dec = load_decoder(model_config("tiny-llama", ["dtype=bfloat16"]), max_new_tokens=4)
    rec = json.loads(numerics_record(dec.model, "cpu").to_json())  # type: ignore[attr-defined]
    assert rec["dtype"] == "bfloat16" and rec["device"] == "cpu"
    assert rec["torch_version"] == torch.__version__ and rec["transformers_version"] == transformers.__version__
    assert rec["num_threads"] == torch.get_num_threads() and rec["kv_cache_class"] == "DynamicCache"
    assert rec["matmul_precision"] == torch.get_float32_matmul_precision()
    assert rec["attn_implementation"] == dec.model.config._attn_implementation  # type: ignore[attr-defined]
    assert dec.logits_dtype == torch.bfloat16  # type: ignore[attr-defined]


# -- the near-tie scripted model ---------------------------------------------------------------

# Two-segment requests of varied lengths: the parities of both prefixes' byte lengths cover all four cases.
SEGMENTS = [(f"{'a' * i}. ", f"{'b' * j}. ") for i in range(1, 5) for j in range(1, 5)]


@pytest.fixture(scope="module")
def neartie() -> object:
    return load_decoder(model_config("scripted-ar-neartie"), max_new_tokens=16)


def _bytes(dec: object, request: StreamRequest, i: int) -> int:
    """The rendered request's length in bytes (the ChatML text, encoded), after ``i`` segments."""
    tok = dec.tokenizer  # type: ignore[attr-defined]
    return len(tok.apply_chat_template(request.messages(i), tokenize=False, add_generation_prompt=True).encode())


def test_near_tie_shows_the_draft_branch_and_the_guard_removes_it(neartie: object) -> None:
    from streamgen.models import scripted_tie as design

    answer_len, tail_len = design.TIE_AT + 4 + 1, 3  # content (fixed, branch, 3-token tail) + EOS
    counts = {"diverged": 0, "from_draft": 0, "guarded_diverged": 0}
    expected = {"diverged": 0, "from_draft": 0, "guarded_diverged": 0}
    for k, segs in enumerate(SEGMENTS):
        req = StreamRequest(f"r{k}", (), segs)
        tie_final, odd_prefix = _bytes(neartie, req, 2) % 2 == 0, _bytes(neartie, req, 1) % 2 == 1
        plain = run_pair(neartie, req, Greedy(), base_first=True)  # type: ignore[arg-type]
        guarded = run_pair(neartie, req, Greedy(tie_guard=1.0), base_first=True)  # type: ignore[arg-type]
        d = divergence(plain.base, plain.stream, plain.final.accepted_tokens)
        g = divergence(guarded.base, guarded.stream, guarded.final.accepted_tokens)
        expected["diverged"] += tie_final
        expected["from_draft"] += tie_final and odd_prefix
        counts["diverged"] += d.position is not None
        counts["from_draft"] += bool(d.from_draft)
        counts["guarded_diverged"] += g.position is not None
        if tie_final:  # the path taken: the first difference is the branch token, one spacing either side
            assert d.position == design.TIE_AT and d.base_margin == 1.0 and d.stream_margin == 1.0
            if odd_prefix:  # the draft (written for the odd prefix) held Y: the whole draft was kept
                assert plain.final.accepted_tokens == answer_len and plain.residual_forwards == 1
                assert d.draft_tokens_after == tail_len + 1  # the tail and EOS came from the draft
            else:  # the draft held X: rejected at the tie, the verify row's bonus token Y regenerated
                assert plain.final.accepted_tokens == design.TIE_AT and d.draft_tokens_after == 0
            # guard 1 ≥ margin 1: the draft stops before the tie, a one-token forward picks X, then 3 + EOS
            assert guarded.final.accepted_tokens == design.TIE_AT
            assert guarded.residual_forwards == 1 + 1 + tail_len + 1
            assert guarded.final.extra["tie_guarded"] == 1.0
        else:
            assert guarded.residual_forwards == plain.residual_forwards  # no tie: the guard changes nothing
    assert counts == expected
    assert expected["from_draft"] > 0 and expected["diverged"] > expected["from_draft"]  # both paths reached


def test_guard_below_the_margin_changes_nothing(neartie: object) -> None:
    """A guard under the tie's 1-spacing margin lets the verify pass decide, as plain greedy does."""
    for k, segs in enumerate(SEGMENTS[:6]):
        req = StreamRequest(f"r{k}", (), segs)
        a = run_pair(neartie, req, Greedy(), base_first=True)  # type: ignore[arg-type]
        b = run_pair(neartie, req, Greedy(tie_guard=0.5), base_first=True)  # type: ignore[arg-type]
        assert a.stream.token_ids == b.stream.token_ids and a.residual_forwards == b.residual_forwards


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


# -- tie_guard through the grid: cells, fingerprints, sharing, rows -----------------------------


def test_tie_guards_add_greedy_cells_that_share_work_and_differ_in_fingerprint() -> None:
    from jobs.grid.shards import expand_cells, expand_shards
    from jobs.grid.units import sharing_key
    from streamgen.config import BenchmarkConfig, GridConfig, ModelConfig

    models = {"ar": ModelConfig(name="ar", family="autoregressive", source="tiny", tiny_arch="llama")}
    benches = {"b": BenchmarkConfig(name="b", version="1", module="m", data_file="x", max_new_tokens=8)}
    grid = GridConfig(models=["ar"], benchmarks=["b"], acceptance=["greedy", "threshold"], taus=[0.9],
                      tie_guards=[1.0, 4.0])
    cells = expand_cells(grid, models, benches)
    assert [(c.acceptance, c.tau, c.tie_guard) for c in cells] == [
        ("greedy", None, None), ("greedy", None, 1.0), ("greedy", None, 4.0), ("threshold", 0.9, None)]
    assert len({c.fingerprint for c in cells}) == len({c.cell_id for c in cells}) == 4
    assert [c.label.split(" / ")[-1] for c in cells] == ["greedy", "greedy guard=1", "greedy guard=4",
                                                         "threshold τ=0.9"]
    settings_ = cells[1].settings()
    assert settings_["numerics.tie_guard"] == 1.0 and "numerics.tie_guard" not in cells[0].settings()
    assert settings_["numerics.torch"] == torch.__version__
    shards = expand_shards(cells, {"b": ["e1", "e2"]}, shard_size=2, seed=0)
    assert len({sharing_key(s) for s in shards}) == 1  # the guard cells share base runs and step 1


def test_tie_guards_validation_names_the_fix() -> None:
    from streamgen.config import GridConfig, validate_acceptance

    ok = GridConfig(models=["scripted-ar-neartie"], tie_guards=[1.0])
    assert validate_acceptance(ok) == []
    unused = GridConfig(models=["tiny-llada"], acceptance=["threshold"], taus=[0.9], tie_guards=[1.0])
    assert "acceptance lists no rule that takes tie_guard (greedy)" in " | ".join(validate_acceptance(unused))
    bad = GridConfig(models=["scripted-ar-neartie"], tie_guards=[-1.0])
    assert "must be a finite number of spacings ≥ 0" in " | ".join(validate_acceptance(bad))
    margins = " | ".join(validate_acceptance(GridConfig(models=["tiny-llada"], tie_guards=[1.0])))
    assert "greedy guard=1 needs top-2 margins, which only autoregressive models report: tiny-llada is " \
           "bidirectional" in margins


def test_rows_carry_the_divergence_and_the_numerics(neartie: object) -> None:
    from jobs.run.rows import RowContext, outcome_rows
    from streamgen.config import benchmark_config
    from streamgen.results.cells import Cell

    segs = next(s for s in SEGMENTS if _bytes(neartie, StreamRequest("x", (), s), 2) % 2 == 0
                and _bytes(neartie, StreamRequest("x", (), s), 1) % 2 == 1)  # the draft-branch case
    outcome = run_pair(neartie, StreamRequest("e", (), segs), Greedy(), base_first=True)  # type: ignore[arg-type]
    cell = Cell(model_config("scripted-ar-neartie"), benchmark_config("coedit"), Greedy(), None, 16)
    record = '{"dtype":"float32"}'
    pair = outcome_rows(outcome, RowContext(cell, "r", "s", "v", "cpu", numerics=record)).pair
    assert (pair.first_diff_token, pair.base_margin_at_diff, pair.stream_margin_at_diff) == (2, 1.0, 1.0)
    assert (pair.diff_from_draft, pair.draft_tokens_after_diff, pair.numerics) == (True, 4, record)
    assert pair.tie_guard is None
