"""Model loading: tiny seeded models, the offline tokenizer, family dispatch, and clear load errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from streamgen.config import FAMILIES, REPO_ROOT, ConfigError, ModelConfig, model_config
from streamgen.decoding.base import Decoder
from streamgen.families import registry as models
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.models import weights
from streamgen.models.tokenizers import tiny_tokenizer

ARCHS = ("llama", "qwen3", "gemma3")


def test_tiny_tokenizer_is_deterministic_chatml_with_eos() -> None:
    a, b = tiny_tokenizer(), tiny_tokenizer()
    assert a.get_vocab() == b.get_vocab() and len(a) == 512
    text = a.apply_chat_template([{"role": "user", "content": "Hi."}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nHi.<|im_end|>\n<|im_start|>assistant\n"
    assert a.convert_ids_to_tokens(a.eos_token_id) == "<|im_end|>"
    ids = a("def add(a, b):\n    return a + b", add_special_tokens=False)["input_ids"]
    assert a.decode(ids) == "def add(a, b):\n    return a + b"
    assert len(ids) < 20  # real merges, not one token per byte


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_model_is_seeded_and_leaves_global_rng_alone(arch: str) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    m1, m2, m3 = weights.tiny_model(arch, seed=5), weights.tiny_model(arch, seed=5), weights.tiny_model(arch, seed=6)
    assert torch.equal(torch.rand(3), expected)
    w1, w2, w3 = (m.get_input_embeddings().weight for m in (m1, m2, m3))
    assert torch.equal(w1, w2) and not torch.equal(w1, w3)
    assert m1.config.num_hidden_layers == 2 and m1.config.vocab_size == len(tiny_tokenizer())
    assert not m1.training


def test_tiny_gemma3_has_a_sliding_window_layer() -> None:
    cfg = weights.tiny_model("gemma3").config
    assert "sliding_attention" in cfg.layer_types and cfg.sliding_window < 64


def test_tiny_model_overrides_apply() -> None:
    m = weights.tiny_model("llama", hidden_size=32, head_dim=8)
    assert m.config.hidden_size == 32


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-gemma3"])
def test_load_decoder_dispatches_tiny_configs(name: str) -> None:
    dec = models.load_decoder(model_config(name), max_new_tokens=4)
    assert isinstance(dec, AutoregressiveDecoder) and dec.family == "autoregressive"
    gen = dec.generate([{"role": "user", "content": "Say hi."}])
    assert 1 <= len(gen.token_ids) <= 4 and gen.forwards == len(gen.token_ids)


def test_registry_lists_every_family_folder_under_its_own_name() -> None:
    from streamgen.sizing.forward_counts import FORWARD_RULES

    # the folders are the names' one source: the config reads each folder's family.yaml (data: it may not import
    # a family), the registry lists each folder's face; a folder without its registry entry, descriptor, plug-in
    # or forward rule fails here, not as a KeyError in a grid's estimate
    folders = tuple(sorted(p.parent.name for p in (REPO_ROOT / "streamgen" / "families").glob("*/family.yaml")))
    assert folders == FAMILIES == tuple(models.DESCRIPTORS) == tuple(models.FAMILIES)
    assert {"autoregressive", "bidirectional", "diffusion_gemma", "refusion"} <= set(FAMILIES)  # the glob found them
    assert tuple(FORWARD_RULES) == FAMILIES
    assert all(d.name == name for name, d in models.DESCRIPTORS.items())
    assert all(plugin.name == name for name, plugin in models.FAMILIES.items())


def test_family_facts_come_from_the_family_folders(tmp_path: Path) -> None:
    from streamgen.config import families

    (tmp_path / "b_family").mkdir()
    (tmp_path / "b_family" / "family.yaml").write_text("verifier_modes: true\ntiny_archs: [x, y]\n"
                                                       "deviations: {zed: null, alpha: false}\n")
    (tmp_path / "a_family").mkdir()
    (tmp_path / "a_family" / "family.yaml").write_text("tiny_archs: [z]\n")
    (tmp_path / "not_a_family").mkdir()  # a folder without family.yaml is no family
    facts = families.read_facts(tmp_path)
    assert [f.name for f in facts] == ["a_family", "b_family"]
    assert facts[0] == families.FamilyFacts("a_family", False, ("z",), {})
    assert facts[1].verifier_modes and facts[1].tiny_archs == ("x", "y")
    assert list(facts[1].deviations.items()) == [("zed", None), ("alpha", False)]  # the order fingerprints see
    (tmp_path / "a_family" / "family.yaml").write_text("verifier_mode: true\n")
    with pytest.raises(ValueError, match=r"a_family/family.yaml: keys are .* fix \['verifier_mode'\]"):
        families.read_facts(tmp_path)
    # the real folders: the facts the config used to spell out as tuples
    assert families.VERIFIER_MODE_FAMILIES == ("bidirectional", "diffusion_gemma")
    assert families.TINY_ARCHS == ("llama", "qwen3", "gemma3", "llada", "dream", "diffusion_gemma")
    assert list(families.DIFFUSION_DEVIATIONS) == ["bidirectional", "refusion"]
    assert set(families.PREFLIGHT_BUILT_FAMILIES) == {"autoregressive", "refusion", "bidirectional"}
    assert set(families.FROM_PRETRAINED_FAMILIES) == {"autoregressive", "refusion", "diffusion_gemma"}
    assert families.DIFFUSION_DEVIATIONS["refusion"] == {
        "block_length": None, "cap_gen_length": False, "stop_on_every_eos": False, "suppress_mask_logit": False}


@pytest.mark.parametrize(("name", "model_class"), [
    ("tiny-llama", "LlamaForCausalLM"), ("tiny-refusion", "Qwen3ForCausalLM"), ("tiny-llada", "BidirLM"),
    ("tiny-diffusiongemma", "DiffusionGemmaForBlockDiffusion")])
def test_each_family_loads_its_own_weights_and_builds_its_decoder(name: str, model_class: str) -> None:
    """load_decoder = the family plug-in's own loader (the model class says which ran) + its builder; a
    benchmark's view of the decoder shares its meter."""
    cfg = model_config(name)
    family = models.model_family(cfg.family)
    loaded = family.load(cfg, "cpu")
    assert type(loaded.model).__name__ == model_class
    dec = models.load_decoder(cfg, max_new_tokens=8)
    assert dec.family == cfg.family == family.name and isinstance(dec, Decoder)
    assert type(dec) is type(family.build_decoder(cfg, loaded.model, loaded.tokenizer, "cpu", 8))
    assert dec.for_benchmark("humaneval").meter is dec.meter  # type: ignore[attr-defined]


def test_unknown_model_name_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match="known are .*smollm2.*tiny-llama"):
        model_config("no-such-model")


def test_unknown_family_and_bad_source_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="family"):
        models.load_decoder(ModelConfig(name="x", family="nope", source="tiny", tiny_arch="llama"))
    with pytest.raises(ConfigError, match="source=hub needs path"):
        weights.load_model_and_tokenizer(ModelConfig(name="x", source="hub"))
    with pytest.raises(ConfigError, match="tiny models are built for"):
        weights.tiny_model("mamba")


def test_missing_local_and_gguf_paths_name_the_fix(tmp_path) -> None:
    with pytest.raises(weights.ModelLoadError, match="does not exist; fix path="):
        weights.load_model_and_tokenizer(ModelConfig(name="x", source="local", path=str(tmp_path / "nope")))
    with pytest.raises(weights.ModelLoadError, match="GGUF file .* does not exist"):
        weights.load_model_and_tokenizer(ModelConfig(name="x", source="gguf", path=str(tmp_path / "a.gguf")))


def test_uncached_hub_id_fails_offline_without_downloading(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    cfg = ModelConfig(name="x", source="hub", path="streamgen-test/definitely-not-cached")
    with pytest.raises(weights.ModelLoadError, match="hf download"):
        weights.load_model_and_tokenizer(cfg)
    assert not any(p.suffix in (".safetensors", ".bin") for p in tmp_path.rglob("*"))


def test_smollm2_gguf_is_found_in_the_installed_package() -> None:
    path = weights.smollm2_gguf_path()
    assert path.name == weights.SMOLLM2_GGUF and path.stat().st_size > 50_000_000


def test_gguf_conversion_is_atomic(monkeypatch, tmp_path) -> None:
    """A conversion that dies half-way leaves neither the target nor a temp folder behind."""
    monkeypatch.setenv("STREAMGEN_CACHE", str(tmp_path))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"not really gguf")

    def dies_half_way(src, out) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed")

    monkeypatch.setattr(weights, "_convert_gguf", dies_half_way)
    with pytest.raises(RuntimeError, match="killed"):
        weights.converted_gguf_folder(gguf)
    assert list((tmp_path / "gguf").iterdir()) == []

    monkeypatch.setattr(weights, "_convert_gguf", lambda src, out: (out / "config.json").write_text("{}"))
    target = weights.converted_gguf_folder(gguf)
    assert (target / "config.json").is_file() and target.parent == tmp_path / "gguf"
    assert [p.name for p in (tmp_path / "gguf").iterdir()] == [target.name]


@pytest.mark.integration
def test_smollm2_loads_from_the_package_and_answers() -> None:
    dec = models.load_decoder(model_config("smollm2"), max_new_tokens=24)
    gen = dec.generate([{"role": "user", "content": "What is the capital of France? Answer in one word."}])
    assert "Paris" in gen.text
    assert os.path.isdir(weights.converted_gguf_folder(weights.smollm2_gguf_path()))

