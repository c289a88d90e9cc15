"""The mechanism of §7 on a tiny model: after self-distillation on prefixes, early drafts already
agree with the full-request answer, so the final verify keeps more and the residual cost drops.

Runs the library pipeline end to end (rows source → teacher answers → pairs → LoRA training → merge
→ generated model YAML) on three three-sentence requests, then measures plain vs adapted with the
real stream procedure. "Before" is the same weights with the same system prompt, so training is the
only difference. Both inequalities can fail: with no effective training (learning_rate=1e-7) the
drafts do not move and both assertions fail.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from streamgen.acceptance_rules import Greedy
from streamgen.adapt.config import (
    AdaptConfig,
    LoraSettings,
    OutputSettings,
    PairSettings,
    SourceSettings,
    TrainSettings,
)
from streamgen.adapt.pipeline import run_stages
from streamgen.benchmarks.data_manifest import COLUMNS, MANIFEST_NAME, sha256_hex
from streamgen.config import ModelConfig, load, model_config
from streamgen.decoding.base import common_prefix_length
from streamgen.families.registry import load_decoder
from streamgen.requests.segment import segment
from streamgen.stream import StreamRequest, run_stream

MAX_NEW = 8
REQUESTS = ["Write a function that adds two numbers. It should return their sum. Use type hints.",
            "Sort a list of words. Ignore case when comparing. Return a new list.",
            "Count the vowels in a string. Treat y as a consonant. Return an integer."]


def measure(decoder, requests: list[str]) -> tuple[int, int]:
    """(tokens of the early drafts agreeing with the full-request answer, residual forwards), summed."""
    agree = residual = 0
    for i, text in enumerate(requests):
        segs = tuple(segment(text))
        full = decoder.generate([{"role": "user", "content": text}]).token_ids
        steps = run_stream(decoder, StreamRequest(str(i), (), segs), Greedy())
        agree += sum(common_prefix_length(s.answer.token_ids, full) for s in steps[:-1])
        residual += steps[-1].answer.forwards
    return agree, residual


@pytest.mark.slow
def test_adapted_drafts_agree_earlier_and_residual_forwards_drop(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    rows = "".join(json.dumps({"id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(REQUESTS)).encode()
    (data / "train.jsonl").write_bytes(rows)
    # every data directory lists its files with their sha256 (streamgen.benchmarks.data_manifest)
    (data / MANIFEST_NAME).write_text("\t".join(COLUMNS) + "\n" + "\t".join(
        ["mech", "train.jsonl", str(len(REQUESTS)), str(len(rows)), sha256_hex(rows), "test", "this test"]) + "\n")
    cfg = AdaptConfig(
        name="mech", model="tiny-llama",
        source=SourceSettings(kind="rows", data_file="train.jsonl", data_dir=str(data)),
        pairs=PairSettings(max_new_tokens=MAX_NEW),
        lora=LoraSettings(dropout=0.0),
        train=TrainSettings(learning_rate=1e-2, effective_batch=9, micro_batch=9, max_length=256, steps=60,
                            save_every=60, device="cpu"),
        output=OutputSettings(dir=str(tmp_path / "out"), configs_dir=str(tmp_path / "models")))
    paths = run_stages(cfg, ("pairs", "train", "merge"))
    adapted_cfg = load(ModelConfig, paths["merge"])
    assert adapted_cfg.variant == "mech-60" and adapted_cfg.base_model == "tiny-llama"

    # Before = the same weights and the same (incomplete-request) system prompt, untrained: training
    # is then the only difference (the prompt alone changes a tiny model's answers).
    untrained = dataclasses.replace(model_config("tiny-llama"), system_prompt=adapted_cfg.system_prompt)
    before = measure(load_decoder(untrained, max_new_tokens=MAX_NEW), REQUESTS)
    after = measure(load_decoder(adapted_cfg, max_new_tokens=MAX_NEW), REQUESTS)
    print(f"early-draft agreement {before[0]} -> {after[0]} tokens; residual forwards {before[1]} -> {after[1]}")
    assert after[0] > before[0], (before, after)
    assert after[1] < before[1], (before, after)
