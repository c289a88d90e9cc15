"""Paper §6.5's probe (streamgen/diagnostics/probe_drafts.py, analysis/probe_report.py, workflows/verifier_probe.py): designed verdicts on
scripted and copying models, the table's statistics from the records, reused base answers, resume.

Expected verdicts follow from the models' design: a scripted model predicts its scripted answer with
``Script.prob(j)`` at answer position j and spreads the rest over the vocabulary; a copying model
predicts the token it sees (trained LLaDA/Dream on visible positions, the study's 0.999 / 96-of-96).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pyarrow as pa
import pytest

from streamgen.config import ConfigError, model_config
from streamgen.diagnostics.probe_drafts import (
    ProbeConfig,
    ProbeExample,
    drafts,
    probe_cell,
    probe_example,
    require_answers,
    reused_answers,
    rules,
    token_pool,
    validate_probe,
)
from streamgen.families.registry import load_decoder
from streamgen.models.scripted import SCRIPTS, pool_tokens
from streamgen.results.records import PairRecord, ProbeRecord, to_table, write_parquet_atomic

COLUMNS = {"probe_id": "p", "model": "m", "family": "f", "benchmark": "b", "base_source": "decoded",
           "max_new_tokens": 16, "code_version": "test"}
QUESTIONS = ("Write a function that adds two numbers.", "Explain a hash table, briefly please.",
             "Fix the grammar: he go home.")


def _examples(decoder) -> list[ProbeExample]:
    msgs = [({"role": "user", "content": q},) for q in QUESTIONS]
    return [ProbeExample(f"e{i}", m, tuple(decoder.generate(list(m)).token_ids)) for i, m in enumerate(msgs)]


def _by(records: list[ProbeRecord]) -> dict[tuple, ProbeRecord]:
    return {(r.example_id, r.draft_kind, r.verifier, r.tau): r for r in records}


@pytest.mark.parametrize("name", ["scripted-llada-lastsegment", "scripted-dream-lastsegment",
                                  "scripted-ar-lastsegment", "scripted-refusion-lastsegment"])
def test_designed_verdicts_in_every_mode(name: str) -> None:
    """lastsegment answers depend on the request's byte length: its own answer is kept whole with median
    probability = the median of ``Script.prob`` over its positions; another example's answer (the
    rotation: e0 gets e1's) and random tokens are rejected at their first token in every verifier."""
    d = load_decoder(model_config(name), max_new_tokens=16)
    examples = _examples(d)
    assert examples[0].own[0] != examples[1].own[0]  # the rotation gives an answer to another request
    recs = _by(list(probe_example(d, examples, 0, rules([0.5, 0.9]), pool=token_pool(d), seed=0,
                                  columns=COLUMNS)))
    modes = ("visible", "hidden") if d.family == "bidirectional" else ("causal",)
    assert {k[2] for k in recs} == set(modes)
    script, n = SCRIPTS["lastsegment"], len(examples[0].own)
    for mode in modes:
        for tau in (None, 0.5, 0.9):
            own, other, rnd = (recs[("e0", kind, mode, tau)] for kind in ("own", "unrelated", "random"))
            assert (own.draft_tokens, own.accepted_tokens) == (n, n)
            assert own.median_prob == pytest.approx(statistics.median(script.prob(j) for j in range(n)), abs=1e-6)
            assert other.accepted_tokens == 0 and rnd.accepted_tokens == 0
            assert rnd.draft_tokens == n  # as many tokens as the own answer, no EOS among them
            assert rnd.median_prob < 1e-3


def test_constant_model_keeps_an_unrelated_answer_because_it_is_the_same() -> None:
    """scripted constant answers every request alike, so 'unrelated' is its own answer again: kept whole."""
    d = load_decoder(model_config("scripted-llada-constant"), max_new_tokens=16)
    recs = _by(list(probe_example(d, _examples(d), 1, rules([]), pool=token_pool(d), seed=0, columns=COLUMNS)))
    other = recs[("e1", "unrelated", "visible", None)]
    assert other.accepted_tokens == other.draft_tokens == SCRIPTS["constant"].length + 1


def test_copying_bidirectional_verifier_confirms_anything_it_sees() -> None:
    """The §6.5 mechanism: a model that reads its own token accepts another request's answer whole in
    visible mode (median p near 1) and nothing when the draft is hidden."""
    from streamgen.families.bidirectional.decoder import BidirectionalDecoder, BidirSettings
    from streamgen.families.bidirectional.model import copying_bidir_model
    from streamgen.models.tokenizers import tiny_tokenizer

    tok = tiny_tokenizer()
    model = copying_bidir_model(len(tok), mask_token_id=511, eos_token_id=tok.eos_token_id)
    d = BidirectionalDecoder(model, tok, BidirSettings(style="llada", mask_token_id=511), max_new_tokens=16)
    pool = [t for t in pool_tokens()]
    examples = [ProbeExample(f"e{i}", ({"role": "user", "content": q},), tuple(pool[i * 5:i * 5 + 12]))
                for i, q in enumerate(QUESTIONS)]
    recs = _by(list(probe_example(d, examples, 0, rules([0.9]), pool=pool, seed=0, columns=COLUMNS)))
    seen, hidden = recs[("e0", "unrelated", "visible", 0.9)], recs[("e0", "unrelated", "hidden", 0.9)]
    assert seen.accepted_tokens == seen.draft_tokens == 12 and seen.median_prob > 0.9
    assert hidden.accepted_tokens == 0


def test_autoregressive_own_answer_is_its_greedy_argmax() -> None:
    """A causal verifier re-derives its own greedy answer: accepted whole under greedy (lossless), while
    random tokens stop at the first position."""
    d = load_decoder(model_config("tiny-llama"), max_new_tokens=12)
    recs = _by(list(probe_example(d, _examples(d), 2, rules([]), pool=token_pool(d), seed=0, columns=COLUMNS)))
    own, rnd = recs[("e2", "own", "causal", None)], recs[("e2", "random", "causal", None)]
    assert own.accepted_tokens == own.draft_tokens > 0 and rnd.accepted_tokens == 0


def test_random_drafts_are_seeded_per_example_and_avoid_special_tokens() -> None:
    d = load_decoder(model_config("scripted-ar-constant"), max_new_tokens=16)
    examples = [ProbeExample(f"e{i}", (), (1, 2, 3, 4)) for i in range(3)]
    pool = token_pool(d)
    a, b, c = drafts(examples, 0, pool, 7), drafts(examples, 0, pool, 7), drafts(examples, 1, pool, 7)
    assert a == b and a["random"] != c["random"] and a["random"] != drafts(examples, 0, pool, 8)["random"]
    assert a["unrelated"] == list(examples[1].own) and drafts(examples, 2, pool, 7)["unrelated"] == [1, 2, 3, 4]
    assert not set(pool) & (set(d.tokenizer.all_special_ids) | set(d.eos_token_ids))


def _record(example: str, kind: str, accepted: int, tokens: int, p: float, tau: float | None) -> ProbeRecord:
    return ProbeRecord(**COLUMNS, example_id=example, draft_kind=kind, verifier="visible",
                       acceptance="greedy" if tau is None else "threshold", tau=tau, draft_tokens=tokens,
                       accepted_tokens=accepted, median_prob=p, seed=0, schema_version=3)


def test_table_statistics_follow_from_the_records(tmp_path: Path) -> None:
    """median p = median over examples; accepted share = Σ accepted / Σ tokens; whole = share kept whole."""
    from analysis.probe_report import probe_long, probe_wide, write_probe_report

    recs = [_record("e0", "own", 4, 4, 0.9, None), _record("e1", "own", 1, 6, 0.5, None),
            _record("e2", "own", 0, 2, 0.2, None), _record("e0", "own", 2, 4, 0.9, 0.5)]
    write_parquet_atomic(to_table(recs, ProbeRecord), tmp_path / "probe" / "a.parquet")
    rows = {(r["draft_kind"], r["tau"]): r for r in probe_long(tmp_path).to_pylist()}
    greedy = rows[("own", None)]
    assert greedy["n_examples"] == 3 and greedy["median_prob"] == pytest.approx(0.5)
    assert greedy["accepted_share"] == pytest.approx((4 + 1 + 0) / (4 + 6 + 2))
    assert greedy["whole_share"] == pytest.approx(1 / 3)
    assert rows[("own", 0.5)]["accepted_share"] == pytest.approx(0.5)
    wide, columns = probe_wide(probe_long(tmp_path))
    assert len(wide) == 1 and [c.header for c in columns][-4:] == ["accepted greedy", "whole", "accepted τ=0.5", "whole"]
    assert "41.7%" in write_probe_report(tmp_path)  # 5/12, as the markdown shows it
    assert (tmp_path / "probe.md").is_file() and (tmp_path / "probe.csv").is_file()


def _pairs_row(example: str, answer: str, tokens: int, budget: int) -> PairRecord:
    from tests.support.analysis_fixtures import pair_record

    return pair_record(model="scripted-ar-constant", benchmark="coedit", example_id=example,
                       base_answer=answer, base_answer_tokens=tokens,
                       cell_settings=f'{{"max_new_tokens": {budget}}}')


def test_reused_answers_come_back_as_tokens_with_their_eos(tmp_path: Path) -> None:
    d = load_decoder(model_config("scripted-ar-constant"), max_new_tokens=16)
    text = d.decode_text(list(pool_tokens()[:3]))
    ids = d.tokenizer(text, add_special_tokens=False)["input_ids"]
    rows = [_pairs_row("a", text, len(ids) + 1, 16), _pairs_row("b", text, len(ids), 16),
            _pairs_row("c", text, len(ids) + 1, 32)]
    write_parquet_atomic(to_table(rows, PairRecord), tmp_path / "pairs" / "x.parquet")
    found = reused_answers(tmp_path, "scripted-ar-constant", "coedit", 16, d)
    eos = min(d.eos_token_ids)
    assert found == {"a": (*ids, eos), "b": tuple(ids)}  # c ran at another budget
    with pytest.raises(ConfigError, match="no base answer for 1 of 2 examples.*omit reuse="):
        require_answers(found, ["a", "c"], "reuse=x")


def test_probe_cell_reuses_and_runs_no_base_forward(tmp_path: Path, monkeypatch) -> None:
    """With reuse=, the base answers come from the pairs; only verify forwards run (one per draft kind)."""
    d = load_decoder(model_config("scripted-ar-constant"), max_new_tokens=16)
    from streamgen.benchmarks import load_benchmark
    from streamgen.config import benchmark_config

    items = load_benchmark(benchmark_config("coedit")).examples(limit=2)
    answer = d.decode_text(list(pool_tokens()[:2]))
    rows = [_pairs_row(ex.example_id, answer, 3, 16) for ex in items]
    write_parquet_atomic(to_table(rows, PairRecord), tmp_path / "pairs" / "x.parquet")
    cfg = ProbeConfig(models=["scripted-ar-constant"], benchmarks=["coedit"], limit=2, taus=[0.5],
                      max_new_tokens=16, reuse=str(tmp_path))
    before = len(d.meter.calls)
    recs = probe_cell(d, cfg, "scripted-ar-constant", "coedit", probe_id="p", code_version="t")
    assert {c.kind for c in d.meter.calls[before:]} == {"verify"} and len(d.meter.calls) - before == 2 * 3
    assert {r.base_source for r in recs} == {"reused"} and len(recs) == 2 * 3 * 2


def test_workflow_keeps_files_on_disk_and_validates(tmp_path: Path, monkeypatch, capsys) -> None:
    sys_path_workflows()
    import verifier_probe as workflow  # workflows/verifier_probe.py

    cfg = ProbeConfig(models=["scripted-ar-constant"], benchmarks=["coedit"], limit=2, taus=[],
                      max_new_tokens=16, results_dir=str(tmp_path))
    workflow.run(cfg)
    path = workflow.cell_file(cfg, "scripted-ar-constant", "coedit")
    assert path.is_file() and pa.parquet.read_table(path).num_rows == 2 * 3  # examples × kinds × 1 rule

    def refuse(*args, **kwargs):
        raise AssertionError("a probe on disk must not load its model again")

    monkeypatch.setattr("streamgen.families.registry.load_decoder", refuse)
    workflow.run(cfg)  # resumes: nothing to do
    args = [f"results_dir={tmp_path}", "models=[scripted-ar-constant]", "benchmarks=[coedit]", "limit=2",
            "taus=[]", "max_new_tokens=16", "--dry-run"]
    assert workflow.main(args) == 0 and "1 cells (model × benchmark), 1 already complete" in capsys.readouterr().out
    assert workflow.main([f"results_dir={tmp_path}", "limit=1", "taus=[1.5]", "models=[nope]"]) == 2
    assert "3 problems" in capsys.readouterr().err
    problems = validate_probe(ProbeConfig(limit=1, taus=[1.5], reuse=str(tmp_path / "nope")))
    assert len(problems) == 3 and any("limit must be ≥ 2" in p for p in problems)


def sys_path_workflows() -> None:
    import sys

    from streamgen.config import REPO_ROOT

    if str(REPO_ROOT / "workflows") not in sys.path:
        sys.path.insert(0, str(REPO_ROOT / "workflows"))
