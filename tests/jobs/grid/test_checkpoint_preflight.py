"""The pre-flight on scaled-down copies of the six study checkpoints laid out as a Hugging Face cache
(tests/support/checkpoint_cache.py, tests/support/fixtures/checkpoints/): each passes as published, and each kind of
breakage gives its one line (a renamed weight, a missing shard, a wrong mask id, a missing snapshot
with its download command, a gated one with the licence to accept)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from jobs.grid.checkpoint_preflight import preflight
from streamgen.config import model_config
from streamgen.models.checkpoint_facts import causal_lm_expected
from streamgen.models.checkpoint_files import stored_weights
from tests.support.checkpoint_cache import (
    COMMIT,
    STUDY_MODELS,
    fixture,
    scaled_config,
    weight_shapes,
    write_safetensors,
    write_snapshot,
)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


def test_the_written_shards_are_safetensors_files_that_safetensors_reads(tmp_path: Path) -> None:
    from safetensors import safe_open

    shapes = {"a.weight": (3, 5), "b.bias": (7,)}
    write_safetensors(tmp_path / "x.safetensors", shapes)
    with safe_open(str(tmp_path / "x.safetensors"), "pt") as f:
        assert {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()} == shapes
        assert f.get_tensor("b.bias").abs().sum() == 0  # the sparse hole reads as zeros


def test_llada_fixture_carries_the_published_llada_8b_facts() -> None:
    cfg = fixture("llada-8b")["config"]
    assert (cfg["d_model"], cfg["n_layers"], cfg["n_heads"], cfg["n_kv_heads"], cfg["mlp_hidden_size"]) == \
        (4096, 32, 32, 32, 12288)
    assert (cfg["vocab_size"], cfg["mask_token_id"], cfg["eos_token_id"], cfg["rope_theta"]) == \
        (126464, 126336, 126081, 500000.0)
    assert cfg["rope_full_precision"] is True and cfg["block_type"] == "llama"


@pytest.mark.parametrize("model", STUDY_MODELS)
def test_each_study_checkpoint_passes_and_is_pinned_to_its_snapshot(cache: Path, model: str) -> None:
    folder = write_snapshot(cache, model)
    cfg = model_config(model)
    checked = preflight({model: cfg})
    assert checked.problems == []
    assert checked.snapshots == {model: COMMIT}
    assert checked.models[model].revision == COMMIT  # the actors load exactly this snapshot
    fx = fixture(model)
    stored = stored_weights(folder)
    assert len(stored.shapes) == len(weight_shapes(fx, scaled_config(fx)))  # every weight read from the headers
    assert all(s is not None for s in stored.shapes.values()) and not stored.missing_files


def test_gemma3_is_checked_as_its_text_model_with_a_tied_head(cache: Path) -> None:
    """The path taken: the text model's names, lm_head optional (tied), the vision tower an expected extra."""
    folder = write_snapshot(cache, "gemma-3-12b-it")
    expected = causal_lm_expected(folder, trust_remote_code=False)
    assert "lm_head.weight" in expected.optional and expected.extra_prefixes
    assert expected.rename("language_model.model.layers.1.mlp.up_proj.weight") == "model.layers.1.mlp.up_proj.weight"
    assert not any(n.startswith("model.vision_tower") for n in expected.shapes)


@pytest.mark.parametrize(("model", "old", "new"), [
    ("llada-8b", "model.transformer.blocks.1.q_proj.weight", "model.transformer.blocks.1.q_prj.weight"),
    ("qwen3-8b", "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.upproj.weight"),
    ("gemma-3-12b-it", "language_model.model.norm.weight", "language_model.model.final_norm.weight"),
])
def test_a_renamed_weight_is_one_missing_and_one_left_over_line(cache: Path, model: str, old: str, new: str) -> None:
    fx = fixture(model)
    shapes = weight_shapes(fx, scaled_config(fx))
    shapes[new] = shapes.pop(old)
    write_snapshot(cache, model, shapes=shapes)
    problems = preflight({model: model_config(model)}).problems
    assert len(problems) == 2, problems
    assert "1 parameters have no weight" in problems[0] and "1 checkpoint weights map onto no parameter" in problems[1]
    assert new in problems[1] and all(p.startswith(f"model {model}: ") for p in problems)


def test_two_weights_onto_one_parameter_are_named(cache: Path) -> None:
    """One to one: a Gemma-3 checkpoint holding the final norm under both its published name and the name
    transformers 5 gives it (``model.language_model.*``) fills one parameter twice."""
    fx = fixture("gemma-3-12b-it")
    shapes = weight_shapes(fx, scaled_config(fx))
    shapes["model.language_model.norm.weight"] = shapes["language_model.model.norm.weight"]  # both → model.norm
    write_snapshot(cache, "gemma-3-12b-it", shapes=shapes)
    (line,) = preflight({"gemma-3-12b-it": model_config("gemma-3-12b-it")}).problems
    assert "1 parameters get more than one checkpoint weight: model.norm.weight" in line


def test_a_weight_of_another_shape_is_named(cache: Path) -> None:
    fx = fixture("dream-7b")
    shapes = weight_shapes(fx, scaled_config(fx))
    shapes["model.layers.1.mlp.down_proj.weight"] = (64, 95)
    write_snapshot(cache, "dream-7b", shapes=shapes)
    (line,) = preflight({"dream-7b": model_config("dream-7b")}).problems
    assert "another shape" in line and "model.layers.1.mlp.down_proj.weight (64, 95) vs (64, 96)" in line


def test_a_missing_shard_is_named_with_the_fix(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    (folder / "model-00002-of-00005.safetensors").unlink()
    (line,) = preflight({"qwen3-8b": model_config("qwen3-8b")}).problems
    assert "model-00002-of-00005.safetensors" in line and "download it again: hf download Qwen/Qwen3-8B" in line


def test_a_wrong_mask_id_disagrees_with_config_and_tokenizer(cache: Path) -> None:
    write_snapshot(cache, "llada-8b")
    cfg = model_config("llada-8b")
    wrong = dataclasses.replace(cfg, decoding={**dict(cfg.decoding), "mask_token_id": 126335})
    problems = preflight({"llada-8b": wrong}).problems
    assert len(problems) == 2, problems
    assert "mask_token_id 126335 but config.json says mask_token_id 126336" in problems[0]
    assert "126336: '<|mdm_mask|>'" in problems[1]  # the tokenizer's real mask token, named


def test_refusion_mask_id_is_checked_against_the_tokenizer(cache: Path) -> None:
    """ReFusion's config has no mask_token_id: the tokenizer is the only witness."""
    write_snapshot(cache, "refusion-8b")
    cfg = model_config("refusion-8b")
    wrong = dataclasses.replace(cfg, decoding={**dict(cfg.decoding), "mask_token_id": 151669})
    (line,) = preflight({"refusion-8b": wrong}).problems
    assert "151669 is '<|reserved_151669|>'" in line and "151670: '<|mask|>'" in line


def test_an_eos_the_config_does_not_know_is_named(cache: Path) -> None:
    fx = fixture("qwen3-8b")
    write_snapshot(cache, "qwen3-8b", config={**scaled_config(fx), "eos_token_id": 151643})
    (line,) = preflight({"qwen3-8b": model_config("qwen3-8b")}).problems
    assert "EOS '<|im_end|>' is id 151645, not among" in line and "[151643]" in line


def test_a_missing_snapshot_names_the_download_command(cache: Path) -> None:
    (line,) = preflight({"dream-7b": model_config("dream-7b")}).problems
    assert "not in the Hugging Face cache" in line and str(cache) in line
    assert "hf download Dream-org/Dream-v0-Instruct-7B;" in line and "gated" not in line


def test_a_missing_gated_snapshot_says_to_accept_the_licence(cache: Path) -> None:
    (line,) = preflight({"llama-3.1-8b-instruct": model_config("llama-3.1-8b-instruct")}).problems
    assert "hf download meta-llama/Llama-3.1-8B-Instruct" in line
    assert "gated: accept its licence at https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct" in line
    assert "hf auth login" in line


def test_a_pinned_revision_resolves_to_its_own_snapshot_only(cache: Path) -> None:
    write_snapshot(cache, "qwen3-8b")
    cfg = model_config("qwen3-8b")
    assert preflight({"q": dataclasses.replace(cfg, name="q", revision=COMMIT)}).snapshots == {"q": COMMIT}
    (line,) = preflight({"q": dataclasses.replace(cfg, name="q", revision="f" * 40)}).problems
    assert f"hf download Qwen/Qwen3-8B --revision {'f' * 40}" in line


def test_models_without_a_checkpoint_are_left_as_they_are(cache: Path) -> None:
    models = {n: model_config(n) for n in ("tiny-llama", "scripted-ar-prefix", "smollm2")}
    checked = preflight(models)
    assert checked.problems == [] and checked.models == models
    assert checked.snapshots == dict.fromkeys(models)


def test_a_local_folder_is_checked_and_has_no_commit(cache: Path, tmp_path: Path) -> None:
    folder = write_snapshot(cache, "dream-7b")
    cfg = dataclasses.replace(model_config("dream-7b"), source="local", path=str(folder))
    checked = preflight({"dream-7b": cfg})
    assert checked.problems == [] and checked.snapshots == {"dream-7b": None}
    json_path = folder / "config.json"
    json_path.write_text(json.dumps({**json.loads(json_path.read_text()), "block_type": "sequential"}))
    assert preflight({"dream-7b": cfg}).problems == []  # Dream ignores LLaDA's keys: still the same model
