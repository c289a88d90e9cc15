"""RoPE in float32 at any model dtype (issue 37, item 1; docs/diffusion.md "RoPE precision").

The in-project LLaDA and Dream forwards in bf16, at positions past 1,024 with head dimension 128 and
the real rope θ, against tests/support/rope_reference.py: a simple forward written independently, with the
rotary tables in float32 and the rotation where each family's official code puts it. And the
frequency buffers' dtype and values after every kind of cast, for BidirLM and the tiny HF paths.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from streamgen.config import ModelConfig, model_config
from streamgen.families.bidirectional import plugin as bidirectional
from streamgen.families.bidirectional.checkpoint import load_bidir_checkpoint
from streamgen.families.bidirectional.model import BidirLM, spec_from_config, tiny_bidir_model
from streamgen.families.diffusion_gemma import plugin as diffusion_gemma
from streamgen.models.rope import is_rope_buffer
from streamgen.models.weights import load_model_and_tokenizer
from tests.support.rope_reference import RefShape, agreement, reference_logits

HEAD_DIM = 128
THETA = {"llada": 5e5, "dream": 1e6}  # LLaDA-8B's and Dream-7B's config.json
LENGTH, ANSWER = 1088, slice(1024, 1088)  # 64 answer positions after 1,024 request tokens


def _inv_freq_formula(theta: float, dim: int = HEAD_DIM) -> torch.Tensor:
    """θ^(−2i/d) computed in float32, as every official rotary module computes it."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def _long_context_model(arch: str) -> BidirLM:
    """Width, depth and vocabulary shrunk; head dimension 128 and rope θ as the real checkpoint."""
    return tiny_bidir_model(arch, seed=0, vocab_size=96, hidden_size=2 * HEAD_DIM, intermediate_size=256,  # type: ignore[arg-type]
                            num_heads=2, num_kv_heads=2 if arch == "llada" else 1,  # Dream: GQA as Qwen2
                            rope_theta=THETA[arch], max_position_embeddings=2048)


def _shape(model: BidirLM) -> RefShape:
    s = model.spec
    return RefShape(n_layers=s.num_layers, n_heads=s.num_heads, n_kv_heads=s.num_kv_heads, head_dim=HEAD_DIM,
                    rope_theta=s.rope_theta, rms_eps=s.rms_norm_eps, rotate_fp32=s.arch == "llada")


@pytest.mark.parametrize("arch", ["llada", "dream"])
def test_bf16_logits_equal_the_float32_rope_reference_past_1024(arch: str) -> None:
    model = _long_context_model(arch)
    assert model.spec.rope_full_precision is (arch == "llada")  # the rotation path each family takes
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 94, (1, LENGTH), generator=torch.Generator().manual_seed(1))
    ref32 = reference_logits(state, ids, _shape(model), torch.float32)
    ref16 = reference_logits(state, ids, _shape(model), torch.bfloat16)
    with torch.no_grad():
        ours32 = model(ids).logits
        model = model.to(torch.bfloat16)
        assert model.model.rotary_emb.inv_freq.dtype == torch.float32
        ours16 = model(ids).logits.float()
    # the reference is this model: equal in float32 (else a bf16 comparison would prove nothing)
    torch.testing.assert_close(ours32[:, ANSWER], ref32[:, ANSWER], rtol=1e-5, atol=1e-5)
    noise = agreement(ref16[:, ANSWER], ref32[:, ANSWER])  # the reference's own bf16-vs-fp32 gap
    ours = agreement(ours16[:, ANSWER], ref32[:, ANSWER])
    assert noise.max_abs_diff > 0.0 and noise.argmax_equal >= 48, noise  # bf16 noise, measured, sane
    assert ours.max_abs_diff <= noise.max_abs_diff and ours.argmax_equal >= noise.argmax_equal, (ours, noise)
    # same ops in the same dtypes as the official code, so bit-identical to its bf16 run
    same = agreement(ours16[:, ANSWER], ref16[:, ANSWER])
    assert same.max_abs_diff == 0.0, (same, noise)


@pytest.mark.parametrize("cast", ["to_bf16", "half", "bfloat16_of_backbone", "to_fp16_of_rotary_alone"])
def test_bidirlm_inv_freq_stays_float32_through_every_cast(cast: str) -> None:
    model = _long_context_model("llada")
    {"to_bf16": lambda: model.to(dtype=torch.bfloat16), "half": model.half,
     "bfloat16_of_backbone": model.model.bfloat16,
     "to_fp16_of_rotary_alone": lambda: model.model.rotary_emb.to(torch.float16)}[cast]()
    if cast != "to_fp16_of_rotary_alone":  # the cast happened
        assert model.model.embed_tokens.weight.dtype in (torch.bfloat16, torch.float16)
    rot = model.model.rotary_emb
    for name in ("inv_freq", "original_inv_freq"):
        buf = getattr(rot, name)
        assert buf.dtype == torch.float32, (name, buf.dtype)
        assert torch.equal(buf, _inv_freq_formula(THETA["llada"])), name


def test_checkpoint_folder_loads_in_bf16_with_float32_inv_freq(tmp_path) -> None:
    from safetensors.torch import save_file

    model = _long_context_model("dream")
    s = model.spec
    (tmp_path / "config.json").write_text(json.dumps({
        "vocab_size": s.vocab_size, "hidden_size": s.hidden_size, "intermediate_size": s.intermediate_size,
        "num_hidden_layers": s.num_layers, "num_attention_heads": s.num_heads,
        "num_key_value_heads": s.num_kv_heads, "rope_theta": s.rope_theta, "rms_norm_eps": s.rms_norm_eps,
        "max_position_embeddings": 2048, "mask_token_id": 95, "eos_token_id": 94}))
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if not is_rope_buffer(k)},
              str(tmp_path / "model.safetensors"))
    loaded = load_bidir_checkpoint("dream", tmp_path, dtype=torch.bfloat16)
    assert loaded.lm_head.weight.dtype == torch.bfloat16
    assert loaded.model.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(loaded.model.rotary_emb.inv_freq, _inv_freq_formula(THETA["dream"]))


def test_rope_full_precision_is_read_from_llada_config() -> None:
    llada = {"d_model": 256, "n_heads": 2, "n_layers": 1, "mlp_hidden_size": 256, "vocab_size": 96}
    assert spec_from_config("llada", llada).rope_full_precision is True  # the official ModelConfig default
    assert spec_from_config("llada", {**llada, "rope_full_precision": True}).rope_full_precision is True
    assert spec_from_config("llada", {**llada, "rope_full_precision": False}).rope_full_precision is False
    dream = {"vocab_size": 96, "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 1,
             "num_attention_heads": 2}
    assert spec_from_config("dream", dream).rope_full_precision is False


def _rope_buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: b for n, b in model.named_buffers() if is_rope_buffer(n)}


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3"])
def test_tiny_hf_models_keep_float32_rope_in_bf16(arch: str) -> None:
    fp32 = load_model_and_tokenizer(ModelConfig(name="t", source="tiny", tiny_arch=arch)).model
    bf16 = load_model_and_tokenizer(ModelConfig(name="t", source="tiny", tiny_arch=arch, dtype="bfloat16")).model
    assert bf16.lm_head.weight.dtype == torch.bfloat16
    before, after = _rope_buffers(fp32), _rope_buffers(bf16)
    assert len(after) >= 2 and after.keys() == before.keys()  # inv_freq + original_inv_freq (per layer type)
    for name, buf in after.items():
        assert buf.dtype == torch.float32, (arch, name)
        assert torch.equal(buf, before[name]), (arch, name)
    if arch == "llama":
        assert torch.equal(after["model.rotary_emb.inv_freq"], _inv_freq_formula(fp32.config.rope_parameters["rope_theta"],
                                                                                   fp32.config.head_dim))


def test_tiny_bidirectional_and_diffusion_gemma_paths_keep_float32_rope() -> None:
    llada = bidirectional.load_weights(replace(model_config("tiny-llada"), dtype="bfloat16")).model
    dgemma = diffusion_gemma.load_weights(replace(model_config("tiny-diffusiongemma"), dtype="bfloat16")).model
    for model in (llada, dgemma):
        buffers = _rope_buffers(model)
        assert buffers and next(model.parameters()).dtype == torch.bfloat16
        assert all(b.dtype == torch.float32 for b in buffers.values()), {n: b.dtype for n, b in buffers.items()}


def test_a_pickled_model_keeps_its_float32_rotary_and_attention_function() -> None:
    """Ray may ship a model to another process: the rotary class is found by name, and the attention
    function is registered again (removed here first, as in a fresh process)."""
    import pickle

    from transformers import AttentionInterface

    model = _long_context_model("llada").to(torch.bfloat16)
    ids = torch.randint(0, 94, (1, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = model(ids).logits
    blob = pickle.dumps(model)
    AttentionInterface._global_mapping.pop(model.config._attn_implementation)
    loaded = pickle.loads(blob)
    assert type(loaded.model.rotary_emb).__name__ == "Float32LlamaRotaryEmbedding"
    assert loaded.model.rotary_emb.inv_freq.dtype == torch.float32
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, expected)
