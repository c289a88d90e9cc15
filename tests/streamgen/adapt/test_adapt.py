"""Adaptation (paper §7) on tiny random models: pairs, leakage, LoRA training, resume, merge, Table 3."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from streamgen.acceptance_rules import Greedy
from streamgen.adapt import checkpoint
from streamgen.adapt.config import (
    AdaptConfig,
    LoraSettings,
    PairSettings,
    SourceSettings,
    TrainSettings,
    adapt_config,
    validate_adapt,
)
from streamgen.adapt.leakage import LeakageError, check_rows, evaluation_split
from streamgen.adapt.merge import adapted_config, merged_model
from streamgen.adapt.pairs import TrainingPair, build_pairs
from streamgen.adapt.sources import TrainingRequest, load_requests
from streamgen.adapt.teacher import teacher_answers
from streamgen.adapt.train import encode_pairs, lora_model, train
from streamgen.config import ConfigError, default_data_dir, model_config
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.models.weights import load_model_and_tokenizer
from streamgen.requests.segment import SentenceSegmenter, segment
from streamgen.stream import StreamRequest, run_stream

MAX_NEW = 8
REQUESTS = (
    TrainingRequest("r1", "Write a function that adds two numbers. It should return their sum. Use type hints."),
    TrainingRequest("r2", "Sort a list of words. Ignore case when comparing. Return a new list.",
                    system_prompt="Reply with code."),
    TrainingRequest("r3", "Count the vowels in a string. Treat y as a consonant. Return an integer."),
)


def fresh_model():
    return load_model_and_tokenizer(model_config("tiny-llama"))


@pytest.fixture(scope="module")
def plain():
    return fresh_model()


@pytest.fixture(scope="module")
def decoder(plain) -> AutoregressiveDecoder:
    return AutoregressiveDecoder(plain.model, plain.tokenizer, max_new_tokens=MAX_NEW)


# --------------------------------------------------------------------------------------------
# Pairs
# --------------------------------------------------------------------------------------------


def test_pairs_cut_at_segment_boundaries_with_the_teachers_answers(decoder, tmp_path: Path) -> None:
    calls: list[int] = []
    teacher = teacher_answers(decoder, REQUESTS, SentenceSegmenter(), tmp_path, with_drafts=True, chunk=2,
                              on_answer=calls.append)
    pairs = build_pairs(REQUESTS, SentenceSegmenter(), PairSettings(variant="draft_refinement"), teacher,
                        decoder.decode_text)
    for req in REQUESTS:
        segs = segment(req.request)
        assert len(segs) == 3, "the fixture requests have three sentences each"
        mine = [p for p in pairs if p.request_id == req.request_id]
        assert [p.prefix_index for p in mine] == [1, 2, 3]  # incomplete prefixes + the complete request
        full = decoder.generate(req.messages(req.request))  # the base run, computed here independently
        drafts = [()] + [s.answer.token_ids for s in run_stream(
            decoder, StreamRequest(req.request_id, (), tuple(segs), req.system_prompt), Greedy())[:-1]]
        for p in mine:
            prefix = "".join(segs[: p.prefix_index])
            assert p.prefix_chars == len(prefix) and p.n_segments == 3
            assert p.draft_text == decoder.decode_text(drafts[p.prefix_index - 1])
            user = p.messages[-1]["content"]
            assert user == PairSettings().draft_template.format(prefix=prefix, draft=p.draft_text)
            assert p.target_token_ids == list(full.token_ids) and p.target_text == full.text
        assert (mine[0].messages[0]["role"] == "system") == (req.system_prompt is not None)
    assert sum(calls) == 3
    # Resume: a second run reads every answer from the cache and generates nothing.
    class NoModel:
        def generate(self, *_):
            raise AssertionError("the cache should have answered")
    again = teacher_answers(NoModel(), REQUESTS, SentenceSegmenter(), tmp_path, with_drafts=True)  # type: ignore[arg-type]
    assert again == teacher


def test_prefix_to_answer_pairs_show_the_bare_prefix_and_skip_single_sentences() -> None:
    reqs = (*REQUESTS[:1], TrainingRequest("one", "Just one sentence here."))
    corpus = (dataclasses.replace(reqs[0], answer="ANSWER"), dataclasses.replace(reqs[1], answer="X"))
    pairs = build_pairs(corpus, SentenceSegmenter(), PairSettings(target="corpus", include_complete=False), {}, str)
    assert [p.prefix_index for p in pairs] == [1, 2]  # n−1 incomplete prefixes; one-sentence request: none
    assert [p.messages[-1]["content"] for p in pairs] == ["".join(segment(reqs[0].request)[:i]) for i in (1, 2)]
    assert {p.target_text for p in pairs} == {"ANSWER"} and all(p.target_token_ids is None for p in pairs)


# --------------------------------------------------------------------------------------------
# Leakage
# --------------------------------------------------------------------------------------------


def test_training_rows_from_evaluation_splits_are_refused() -> None:
    data = default_data_dir()
    with pytest.raises(LeakageError, match="MBPP task 11"):
        load_requests(SourceSettings(benchmark_overrides=["options.split=test"]), data)
    with pytest.raises(LeakageError, match="evaluation benchmark"):
        load_requests(SourceSettings(benchmark="humaneval", benchmark_overrides=[]), data)
    for data_file, name in (("humaneval/HumanEval.jsonl.gz", "HumanEval"), ("canitedit/canitedit_test.jsonl", "CanItEdit"),
                            ("ds1000/ds1000.jsonl.gz", "DS-1000"), ("mbpp/mbpp.jsonl", "MBPP task 1 ")):
        with pytest.raises(LeakageError, match=name):
            load_requests(SourceSettings(kind="rows", data_file=data_file, request_field="prompt"), data)
    train_rows = load_requests(SourceSettings(), data)  # MBPP 601–974 through the benchmark module
    assert len(train_rows) == 374 and train_rows[0].request_id == "mbpp/601"
    assert evaluation_split({"task_id": 974, "test_list": []}) is None
    assert evaluation_split({"task_id": 600, "test_list": []}) is not None
    with pytest.raises(LeakageError, match="2 row"):
        check_rows([{"task_id": 700, "test_list": []}, {"task_id": 5, "test_list": []},
                    {"task_id": "HumanEval/3"}], "test rows")


# --------------------------------------------------------------------------------------------
# Training, resume, merge
# --------------------------------------------------------------------------------------------

FAST = TrainSettings(learning_rate=1e-2, effective_batch=4, micro_batch=2, max_length=256, steps=30,
                     save_every=10, seed=3, device="cpu")
LORA = LoraSettings(rank=8, alpha=16, dropout=0.0)


def _pairs() -> list[TrainingPair]:
    targets = [[10 + i, 20 + i, 30 + i, 40 + i, 50 + i] for i in range(3)]
    return [TrainingPair(r.request_id, 1, 3, 10, json.dumps(r.messages(segment(r.request)[0])), None, "",
                         json.dumps(t), "teacher") for r, t in zip(REQUESTS, targets, strict=True)]


def _train(tmp: Path, cfg: TrainSettings = FAST):
    loaded = fresh_model()
    render = AutoregressiveDecoder(loaded.model, loaded.tokenizer).render
    data = encode_pairs(_pairs(), render, lambda t: [], 0, cfg.max_length)
    model = lora_model(loaded.model, LORA, cfg.seed)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    losses = [p.loss for p in train(model, data, cfg, tmp, pad_id=0, device="cpu")]
    return model, before, losses, data


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("ckpt"))


def test_only_lora_parameters_change_and_the_loss_falls(trained) -> None:
    model, before, losses, data = trained
    assert all(p.n_prompt > 0 and p.n_answer == 5 for p in data.pairs)  # loss only on the 5 answer tokens
    changed = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    lora = {k for k in before if "lora_" in k}
    assert lora and changed == lora, f"non-LoRA parameters changed: {sorted(changed - lora)[:3]}"
    assert {k for k, v in model.named_parameters() if v.requires_grad} == lora
    assert losses[-1] < 0.25 * losses[0], losses


def test_resumed_training_equals_the_uninterrupted_run(trained, tmp_path: Path) -> None:
    first, _, _, _ = _train(tmp_path, dataclasses.replace(FAST, steps=10))  # stops at a checkpoint
    assert checkpoint.latest(tmp_path).step == 10  # type: ignore[union-attr]
    resumed, _, losses, _ = _train(tmp_path)  # same folder, 30 steps: restarts from step 10
    assert len(losses) == 20
    full = dict(trained[0].named_parameters())
    for k, v in resumed.named_parameters():
        if "lora_" in k:
            torch.testing.assert_close(v, full[k], rtol=0, atol=1e-6)


def test_merged_model_logits_equal_the_adapter_models(trained) -> None:
    model = copy.deepcopy(trained[0]).eval()
    ids = torch.tensor([list(trained[3].pairs[0].input_ids)])
    with torch.no_grad():
        adapter = model(input_ids=ids).logits
        with model.disable_adapter():
            base = model(input_ids=ids).logits
        merged = merged_model(model)
        logits = merged(input_ids=ids).logits
    assert (adapter - base).abs().max() > 1e-2, "the adapter must change the logits for this test to mean anything"
    assert type(merged).__name__ == "LlamaForCausalLM" and not any("lora_" in k for k, _ in merged.named_parameters())
    torch.testing.assert_close(logits, adapter, rtol=0, atol=1e-5)


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------


def test_a_bad_recipe_lists_every_problem_at_once() -> None:
    cfg = adapt_config("smoke", ["model=tiny-refusion", "pairs.target=gold", "train.effective_batch=5",
                                 "lora.target_modules=[]", "output.model_name=tiny-llama", "eval.grid=nope"])
    problems = validate_adapt(cfg)
    for needle in ("slot-diffusion", "pairs.target", "multiple of", "target_modules", "overwrite", "eval.grid"):
        assert any(needle in p for p in problems), (needle, problems)
    with pytest.raises(ConfigError, match="unknown_key"):
        adapt_config("smoke", ["train.unknown_key=1"])


def test_adapted_config_carries_variant_base_model_and_prompt(tmp_path: Path) -> None:
    cfg = adapted_config(model_config("tiny-llama"), "tiny-llama-x", tmp_path, "x-30", "typing...")
    assert (cfg.source, cfg.path, cfg.variant, cfg.base_model, cfg.row_model) == (
        "local", str(tmp_path), "x-30", "tiny-llama", "tiny-llama")
    assert cfg.system_prompt == "typing..." and cfg.name == "tiny-llama-x"
    assert isinstance(AdaptConfig().variant, str)


def test_collated_labels_cover_answer_tokens_only() -> None:
    from streamgen.adapt.train import IGNORE, EncodedPair, collate

    batch = collate([EncodedPair((1, 2, 3, 4, 5), 3), EncodedPair((6, 7, 8), 1)], pad_id=0, device="cpu")
    assert batch["labels"].tolist() == [[IGNORE, IGNORE, IGNORE, 4, 5], [IGNORE, 7, 8, IGNORE, IGNORE]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5], [6, 7, 8, 0, 0]]


def test_training_prompts_compose_the_adapted_prompt_with_the_benchmarks_as_the_grid_does() -> None:
    from streamgen.adapt.pipeline import composed_messages
    from streamgen.results.cells import effective_system_prompt

    bench = [{"role": "system", "content": "Answer in one code block."}, {"role": "user", "content": "Write f"}]
    out = composed_messages(bench, "The request may be incomplete.")
    assert [m["role"] for m in out] == ["system", "user"]  # one system turn, as jobs/run/driver.py renders it
    assert out[0]["content"] == effective_system_prompt("The request may be incomplete.", "Answer in one code block.")
    assert out[0]["content"].index("incomplete") < out[0]["content"].index("code block")  # the model's first
    assert composed_messages(bench[1:], "P") == bench[1:]  # no benchmark prompt: render prepends the model's
