"""A multimodal Gemma-3 checkpoint (google/gemma-3-*-it layout) loads as the text-only Gemma3ForCausalLM:
no vision parameters, the conditional model's logits on text, and the vision tower's tensors never read.

The fixture is a tiny random ``Gemma3ForConditionalGeneration`` (tiny text + tiny SigLIP config) written
in the hub's layout: three safetensors shards and ``model.safetensors.index.json`` with the names the real
google/gemma-3-12b-it index uses (``language_model.model.*``, ``vision_tower.vision_model.*``,
``multi_modal_projector.*``, no ``lm_head``: tied). That transformers itself reads this layout back into
the conditional model with nothing missing or left over is checked too, so the fixture's names are the
ones the real loader expects, not ones made up here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from streamgen.config import ModelConfig
from streamgen.models import checkpoint_io
from streamgen.models.tokenizers import tiny_tokenizer
from streamgen.models.weights import ModelLoadError, load_model_and_tokenizer, tiny_config

# The real index's prefixes (transformers-4 names) ← this transformers' module names.
HUB_NAMES = (("model.language_model.", "language_model.model."), ("model.vision_tower.", "vision_tower.vision_model."),
             ("model.multi_modal_projector.", "multi_modal_projector."))
# Gemma-3's chat template in short: no system role, <start_of_turn>user / model turns.
GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
                  "else 'user' }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
                  "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
TEXT_IDS = torch.tensor([[3, 17, 42, 8, 99, 23, 5, 61]])


def full_model() -> torch.nn.Module:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    vocab = len(tiny_tokenizer())
    text = tiny_config("gemma3", vocab).to_dict()
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    cfg = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=vocab - 1,
                       boi_token_index=vocab - 3, eoi_token_index=vocab - 2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Gemma3ForConditionalGeneration(cfg).eval()


def hub_name(name: str) -> str | None:
    for ours, hub in HUB_NAMES:
        if name.startswith(ours):
            return hub + name[len(ours):]
    return None  # lm_head: tied to the embeddings, absent from the hub files


def save_hub_layout(model: torch.nn.Module, folder: Path) -> dict[str, str]:
    """Three shards: language half, language rest + projector, vision tower alone; the index; config;
    a tokenizer carrying Gemma's chat template. Returns the index's weight map."""
    tensors = {hub_name(k): v.contiguous() for k, v in model.state_dict().items() if hub_name(k)}
    language = sorted(k for k in tensors if k.startswith("language_model."))
    shards = {"model-00001-of-00003.safetensors": language[: len(language) // 2],
              "model-00002-of-00003.safetensors": language[len(language) // 2:] + [
                  k for k in tensors if k.startswith("multi_modal_projector.")],
              "model-00003-of-00003.safetensors": [k for k in tensors if k.startswith("vision_tower.")]}
    weight_map = {}
    for file, names in shards.items():
        save_file({k: tensors[k] for k in names}, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(names, file))
    (folder / checkpoint_io.INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    model.config.to_json_file(folder / "config.json")
    tok = tiny_tokenizer()
    tok.chat_template = GEMMA_TEMPLATE
    tok.save_pretrained(folder)
    return weight_map


@pytest.fixture(scope="module")
def reference() -> torch.nn.Module:
    return full_model()


@pytest.fixture(scope="module")
def hub_folder(reference: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("gemma3-mm")
    return folder, save_hub_layout(reference, folder)


class ReadRecorder:
    """Stands in for ``safe_open`` in streamgen.models.checkpoint_io: records every tensor whose data is read,
    the shard it was read from and the device it was read to."""

    def __init__(self) -> None:
        self.read: list[str] = []
        self.read_from: set[tuple[str, str]] = set()

    def __call__(self, file: str, framework: str, device: str = "cpu") -> object:
        real, recorder = safe_open(file, framework=framework, device=device), self

        class Handle:
            def __enter__(self) -> Handle:
                self.h = real.__enter__()
                return self

            def __exit__(self, *exc: object) -> None:
                real.__exit__(*exc)

            def keys(self) -> list[str]:
                return self.h.keys()

            def get_slice(self, name: str) -> object:
                return self.h.get_slice(name)  # the header's shape; the data is not read

            def get_tensor(self, name: str) -> torch.Tensor:
                recorder.read.append(name)
                recorder.read_from.add((Path(file).name, device))
                return self.h.get_tensor(name)

        return Handle()


def local(folder: Path, dtype: str = "float32") -> ModelConfig:
    return ModelConfig(name="gemma3-mm", family="autoregressive", source="local", path=str(folder), dtype=dtype)


def test_the_fixture_is_the_layout_transformers_reads(reference: torch.nn.Module, hub_folder) -> None:  # type: ignore[no-untyped-def]
    from transformers import Gemma3ForConditionalGeneration

    folder, weight_map = hub_folder
    assert {k.split(".")[0] for k in weight_map} == {"language_model", "vision_tower", "multi_modal_projector"}
    assert any(k.startswith("vision_tower.vision_model.encoder.layers.0.") for k in weight_map)
    again, info = Gemma3ForConditionalGeneration.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        assert torch.equal(again(TEXT_IDS).logits, reference(TEXT_IDS).logits)


def test_a_multimodal_gemma3_loads_as_the_text_model_without_reading_the_vision_tower(
        reference: torch.nn.Module, hub_folder, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    folder, weight_map = hub_folder
    recorder = ReadRecorder()
    monkeypatch.setattr(checkpoint_io, "safe_open", recorder)
    with caplog.at_level("INFO", logger="streamgen.models.weights"):
        model = load_model_and_tokenizer(local(folder)).model

    assert type(model).__name__ == "Gemma3ForCausalLM"
    assert not [n for n, _ in model.named_parameters() if "vision" in n or "multi_modal" in n]
    language_numel = sum(p.numel() for n, p in reference.named_parameters() if n.startswith("model.language_model."))
    assert sum(p.numel() for p in model.parameters()) == language_numel  # lm_head shares the embeddings
    assert model.lm_head.weight is model.model.embed_tokens.weight
    # The intermediate fact: only language-model tensors were read, each once, to the load's device, and
    # nothing was read from the vision shard (only its header, to list its names).
    language = sorted(k for k in weight_map if k.startswith("language_model."))
    assert sorted(recorder.read) == language
    assert recorder.read_from == {("model-00001-of-00003.safetensors", "cpu"),
                                  ("model-00002-of-00003.safetensors", "cpu")}
    assert "multimodal Gemma-3" in caplog.text and "text model only" in caplog.text
    with torch.no_grad():
        assert torch.equal(model(TEXT_IDS).logits, reference(TEXT_IDS).logits)


def test_the_bf16_text_model_holds_the_checkpoint_rounded_once(reference: torch.nn.Module, hub_folder) -> None:  # type: ignore[no-untyped-def]
    model = load_model_and_tokenizer(local(hub_folder[0], "bfloat16")).model
    assert model.dtype == torch.bfloat16
    want = reference.model.language_model.layers[1].mlp.down_proj.weight.to(torch.bfloat16)
    assert torch.equal(model.model.layers[1].mlp.down_proj.weight, want)
    assert model.model.rotary_emb.full_attention_inv_freq.dtype == torch.float32  # computed, not cast


def test_transformers5_module_names_load_too(reference: torch.nn.Module, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint saved under this transformers' module names (``model.language_model.*``, with an
    explicit ``lm_head.weight``) loads the same text model; the tied ``lm_head`` is not read."""
    save_file({k: v.clone() for k, v in reference.state_dict().items()}, str(tmp_path / "model.safetensors"))
    reference.config.to_json_file(tmp_path / "config.json")
    tiny_tokenizer().save_pretrained(tmp_path)
    recorder = ReadRecorder()
    monkeypatch.setattr(checkpoint_io, "safe_open", recorder)
    model = load_model_and_tokenizer(local(tmp_path)).model
    assert recorder.read and all(k.startswith("model.language_model.") for k in recorder.read)  # no lm_head
    with torch.no_grad():
        assert torch.equal(model(TEXT_IDS).logits, reference(TEXT_IDS).logits)


def test_the_chat_template_and_decoder_work_on_the_text_model(hub_folder) -> None:  # type: ignore[no-untyped-def]
    from streamgen.families.registry import load_decoder

    decoder = load_decoder(local(hub_folder[0]), max_new_tokens=3)
    ids = decoder.render([{"role": "user", "content": "Add two numbers."}])
    assert decoder.tokenizer.decode(ids).endswith("<start_of_turn>user\nAdd two numbers.<end_of_turn>\n"
                                                  "<start_of_turn>model\n")
    assert len(decoder.generate([{"role": "user", "content": "Add two numbers."}]).token_ids) <= 3


def test_a_missing_language_tensor_is_one_message_naming_it(reference: torch.nn.Module, tmp_path: Path) -> None:
    tensors = {hub_name(k): v.contiguous() for k, v in reference.state_dict().items() if hub_name(k)}
    del tensors["language_model.model.norm.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    reference.config.to_json_file(tmp_path / "config.json")
    tiny_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=r"model\.norm\.weight.*config\.json belongs to these safetensors"):
        load_model_and_tokenizer(local(tmp_path))
