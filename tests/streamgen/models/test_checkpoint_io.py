"""The in-project bidirectional checkpoint loader reads straight to the device, one tensor at a time:
each checkpoint tensor is read once (``safe_open(device=...)``), cast to the target dtype and assigned;
no full state dict is ever built in host memory (``safetensors.torch.load_file`` is never called)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from streamgen.families.bidirectional.checkpoint import load_bidir_checkpoint
from streamgen.families.bidirectional.model import CheckpointError, tiny_spec
from streamgen.models import checkpoint_io
from tests.streamgen.families.test_bidir_models import VOCAB, _llada_checkpoint, _reference_logits
from tests.streamgen.models.test_gemma3_text import ReadRecorder

LLADA_CONFIG = {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "mlp_hidden_size": 48,
                "vocab_size": VOCAB, "embedding_size": VOCAB, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                "max_sequence_length": 256, "block_type": "llama", "include_bias": False, "mask_token_id": 49,
                "eos_token_id": 48}
SPEC = tiny_spec("llada", VOCAB, hidden_size=32, intermediate_size=48, rope_theta=10000.0)


def sharded_checkpoint(folder: Path, sd: dict[str, torch.Tensor]) -> None:
    """``sd`` in two shards plus the index, as hub checkpoints are written."""
    names = sorted(sd)
    weight_map = {}
    for i, part in enumerate((names[::2], names[1::2]), start=1):
        file = f"model-0000{i}-of-00002.safetensors"
        save_file({k: sd[k] for k in part}, str(folder / file))
        weight_map.update(dict.fromkeys(part, file))
    (folder / checkpoint_io.INDEX_FILE).write_text(json.dumps({"weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(LLADA_CONFIG))


@pytest.fixture
def no_full_host_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    import safetensors.torch

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("load_file builds the whole state dict in host memory")

    monkeypatch.setattr(safetensors.torch, "load_file", refuse)


def test_a_bf16_checkpoint_loads_in_float32_tensor_by_tensor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             no_full_host_copy: None) -> None:
    sd = {k: v.to(torch.bfloat16) for k, v in _llada_checkpoint(SPEC, torch.Generator().manual_seed(5)).items()}
    sharded_checkpoint(tmp_path, sd)
    recorder = ReadRecorder()
    monkeypatch.setattr(checkpoint_io, "safe_open", recorder)
    model = load_bidir_checkpoint("llada", tmp_path, dtype=torch.float32, device="cpu")

    assert sorted(recorder.read) == sorted(sd)  # every tensor read once, nothing read twice
    assert {device for _, device in recorder.read_from} == {"cpu"}  # read to the load's device
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    # RoPE's inv_freq computed on the device in float32 by the module, never rounded through bf16.
    half = torch.arange(0, 8, 2, dtype=torch.float32) / 8  # head_dim 32/4 = 8
    assert torch.equal(model.model.rotary_emb.inv_freq, 1.0 / (10000.0 ** half))
    ids = torch.tensor([[4, 5, 6, 7]])
    upcast = {k: v.float() for k, v in sd.items()}
    with torch.no_grad():
        assert torch.allclose(model(ids).logits[0], _reference_logits("llada", SPEC, upcast, ids[0]), atol=1e-4)


def test_a_float32_checkpoint_is_rounded_once_per_tensor_to_bf16(tmp_path: Path, no_full_host_copy: None) -> None:
    sd = _llada_checkpoint(SPEC, torch.Generator().manual_seed(6))
    sharded_checkpoint(tmp_path, sd)
    model = load_bidir_checkpoint("llada", tmp_path, dtype=torch.bfloat16, device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert torch.equal(model.model.layers[1].mlp.down_proj.weight,
                       sd["model.transformer.blocks.1.ff_out.weight"].to(torch.bfloat16))


def test_a_shard_the_index_names_but_the_folder_lacks_names_the_fix(tmp_path: Path) -> None:
    sharded_checkpoint(tmp_path, _llada_checkpoint(SPEC, torch.Generator().manual_seed(7)))
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002.*hf download"):
        load_bidir_checkpoint("llada", tmp_path, dtype=torch.float32)


def test_a_tensor_that_does_not_fit_is_refused_before_any_tensor_is_read(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    sd = _llada_checkpoint(SPEC, torch.Generator().manual_seed(8))
    sd["model.transformer.ln_f.weight"] = torch.ones(SPEC.hidden_size + 1)  # the shape read from the header
    sharded_checkpoint(tmp_path, sd)
    recorder = ReadRecorder()
    monkeypatch.setattr(checkpoint_io, "safe_open", recorder)
    with pytest.raises(CheckpointError, match=r"model\.norm\.weight: checkpoint \(33,\) vs model \(32,\)"):
        load_bidir_checkpoint("llada", tmp_path, dtype=torch.float32)
    assert recorder.read == []


def test_a_transformers_folder_is_loaded_onto_the_device_by_from_pretrained(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers places each tensor on ``device_map``'s device as it reads it; ``.to(device)`` after
    ``from_pretrained`` would first build the whole model in host memory."""
    from transformers import AutoModelForCausalLM

    from streamgen.config import ModelConfig
    from streamgen.models.tokenizers import tiny_tokenizer
    from streamgen.models.weights import load_model_and_tokenizer, tiny_model

    tiny_model("llama").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    calls: list[dict[str, object]] = []
    real = AutoModelForCausalLM.from_pretrained

    def recording(*args: object, **kwargs: object) -> object:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", recording)
    cfg = ModelConfig(name="tiny-folder", family="autoregressive", source="local", path=str(tmp_path),
                      dtype="bfloat16")
    model = load_model_and_tokenizer(cfg, "cpu").model
    assert [c["device_map"] for c in calls] == [{"": "cpu"}]
    assert model.dtype == torch.bfloat16 and model.device.type == "cpu"
