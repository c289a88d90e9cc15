"""In-project LLaDA / Dream forwards: checkpoint names load, and the forward matches an independent
reference computation written here in plain torch (full attention, RoPE, RMSNorm, SwiGLU)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from streamgen.families.bidirectional.checkpoint import load_bidir_checkpoint
from streamgen.families.bidirectional.model import (
    BidirLM,
    CheckpointError,
    load_mapped_state_dict,
    map_parameter_name,
    tiny_spec,
)

VOCAB = 50


def _llada_checkpoint(spec, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """A random state dict with LLaDA's own (OLMo-style) parameter names."""
    h, f, v = spec.hidden_size, spec.intermediate_size, spec.vocab_size
    r = lambda *s: torch.randn(*s, generator=gen) * 0.3  # noqa: E731
    sd = {"model.transformer.wte.weight": r(v, h), "model.transformer.ln_f.weight": 1 + r(h),
          "model.transformer.ff_out.weight": r(v, h)}
    for i in range(spec.num_layers):
        b = f"model.transformer.blocks.{i}."
        sd.update({b + "attn_norm.weight": 1 + r(h), b + "ff_norm.weight": 1 + r(h),
                   b + "q_proj.weight": r(h, h), b + "k_proj.weight": r(h, h), b + "v_proj.weight": r(h, h),
                   b + "attn_out.weight": r(h, h), b + "ff_proj.weight": r(f, h), b + "up_proj.weight": r(f, h),
                   b + "ff_out.weight": r(h, f)})
    return sd


def _dream_checkpoint(spec, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """A random state dict with Dream's (Qwen2-style) parameter names, biases on q/k/v, GQA."""
    h, f, v = spec.hidden_size, spec.intermediate_size, spec.vocab_size
    kv = spec.num_kv_heads * (h // spec.num_heads)
    r = lambda *s: torch.randn(*s, generator=gen) * 0.3  # noqa: E731
    sd = {"model.embed_tokens.weight": r(v, h), "model.norm.weight": 1 + r(h), "lm_head.weight": r(v, h)}
    for i in range(spec.num_layers):
        b = f"model.layers.{i}."
        sd.update({b + "input_layernorm.weight": 1 + r(h), b + "post_attention_layernorm.weight": 1 + r(h),
                   b + "self_attn.q_proj.weight": r(h, h), b + "self_attn.q_proj.bias": r(h),
                   b + "self_attn.k_proj.weight": r(kv, h), b + "self_attn.k_proj.bias": r(kv),
                   b + "self_attn.v_proj.weight": r(kv, h), b + "self_attn.v_proj.bias": r(kv),
                   b + "self_attn.o_proj.weight": r(h, h), b + "mlp.gate_proj.weight": r(f, h),
                   b + "mlp.up_proj.weight": r(f, h), b + "mlp.down_proj.weight": r(h, f)})
    return sd


# ---- an independent reference forward (plain torch, written from the architecture description) ----

def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, theta):  # x: (heads, L, d); rotate-half convention
    d, n = x.shape[-1], x.shape[-2]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def _reference_logits(arch, spec, sd, ids):
    g = lambda k: sd[k]  # noqa: E731
    if arch == "llada":
        names = dict(emb="model.transformer.wte.weight", norm="model.transformer.ln_f.weight",
                     head="model.transformer.ff_out.weight")
        blk = lambda i, k: sd[f"model.transformer.blocks.{i}.{k}.weight"]  # noqa: E731
        keys = dict(n1="attn_norm", n2="ff_norm", q="q_proj", k="k_proj", v="v_proj", o="attn_out",
                    gate="ff_proj", up="up_proj", down="ff_out")
        bias = lambda i, k: 0.0  # noqa: E731
    else:
        names = dict(emb="model.embed_tokens.weight", norm="model.norm.weight", head="lm_head.weight")
        blk = lambda i, k: sd[f"model.layers.{i}.{k}.weight"]  # noqa: E731
        keys = dict(n1="input_layernorm", n2="post_attention_layernorm", q="self_attn.q_proj",
                    k="self_attn.k_proj", v="self_attn.v_proj", o="self_attn.o_proj", gate="mlp.gate_proj",
                    up="mlp.up_proj", down="mlp.down_proj")
        bias = lambda i, k: sd[f"model.layers.{i}.{k}.bias"]  # noqa: E731
    H, KV = spec.num_heads, spec.num_kv_heads
    d = spec.hidden_size // H
    x = g(names["emb"])[ids]
    L = x.shape[0]
    for i in range(spec.num_layers):
        h = _rms(x, blk(i, keys["n1"]), spec.rms_norm_eps)
        q = (h @ blk(i, keys["q"]).T + bias(i, keys["q"])).view(L, H, d).transpose(0, 1)
        k = (h @ blk(i, keys["k"]).T + bias(i, keys["k"])).view(L, KV, d).transpose(0, 1)
        v = (h @ blk(i, keys["v"]).T + bias(i, keys["v"])).view(L, KV, d).transpose(0, 1)
        q, k = _rope(q, spec.rope_theta), _rope(k, spec.rope_theta)
        k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1)  # no mask: full attention
        x = x + (att @ v).transpose(0, 1).reshape(L, -1) @ blk(i, keys["o"]).T
        h = _rms(x, blk(i, keys["n2"]), spec.rms_norm_eps)
        x = x + (torch.nn.functional.silu(h @ blk(i, keys["gate"]).T) * (h @ blk(i, keys["up"]).T)) @ blk(i, keys["down"]).T
    return _rms(x, g(names["norm"]), spec.rms_norm_eps) @ g(names["head"]).T


@pytest.mark.parametrize("arch", ["llada", "dream"])
def test_checkpoint_names_load_and_forward_matches_reference(arch):
    torch.manual_seed(0)
    spec = tiny_spec(arch, VOCAB, hidden_size=32, intermediate_size=48, num_heads=4,
                     num_kv_heads=4 if arch == "llada" else 2, rope_theta=10000.0)
    sd = (_llada_checkpoint if arch == "llada" else _dream_checkpoint)(spec, torch.Generator().manual_seed(1))
    model = BidirLM(spec).eval()
    load_mapped_state_dict(model, sd)
    ids = torch.tensor([[3, 17, 5, 42, 8, 0, 11]])
    with torch.no_grad():
        got = model(ids).logits[0]
    want = _reference_logits(arch, spec, sd, ids[0])
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()


def test_forward_is_bidirectional():
    """Changing the last token changes the first position's logits (no causal mask)."""
    spec = tiny_spec("llada", VOCAB, hidden_size=32, intermediate_size=48)
    model = BidirLM(spec).eval()
    a = torch.tensor([[1, 2, 3, 4]])
    b = torch.tensor([[1, 2, 3, 9]])
    with torch.no_grad():
        assert not torch.allclose(model(a).logits[0, 0], model(b).logits[0, 0])


def test_unknown_or_missing_names_raise():
    spec = tiny_spec("llada", VOCAB, hidden_size=32, intermediate_size=48)
    with pytest.raises(CheckpointError, match="att_proj"):
        map_parameter_name("llada", "model.transformer.blocks.0.att_proj.weight")
    sd = _llada_checkpoint(spec, torch.Generator().manual_seed(0))
    del sd["model.transformer.ln_f.weight"]
    with pytest.raises(CheckpointError, match="model.norm.weight"):
        load_mapped_state_dict(BidirLM(spec), sd)


def test_load_checkpoint_folder(tmp_path):
    """A folder with a LLaDA config.json and safetensors loads without any hub code."""
    from safetensors.torch import save_file

    raw = {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "mlp_hidden_size": 48,
           "vocab_size": VOCAB, "embedding_size": VOCAB, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
           "max_sequence_length": 256, "block_type": "llama", "include_bias": False, "mask_token_id": 49,
           "eos_token_id": 48}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    spec = tiny_spec("llada", VOCAB, hidden_size=32, intermediate_size=48, rope_theta=10000.0)
    sd = _llada_checkpoint(spec, torch.Generator().manual_seed(2))
    save_file(sd, str(tmp_path / "model.safetensors"))
    model = load_bidir_checkpoint("llada", tmp_path, dtype=torch.float32)
    ids = torch.tensor([[4, 5, 6]])
    with torch.no_grad():
        got = model(ids).logits[0]
    assert torch.allclose(got, _reference_logits("llada", spec, sd, ids[0]), atol=1e-4)
    assert model.spec.mask_token_id == 49


def test_dream_folder_and_custom_code_tokenizer_load_without_hub_code(tmp_path):
    """A Dream-style folder (Qwen2 config keys, tokenizer_config pointing at custom code) loads: the
    model by name mapping, the tokenizer from tokenizer.json, with its chat template."""
    from safetensors.torch import save_file

    from streamgen.families.bidirectional.checkpoint import load_checkpoint_tokenizer
    from streamgen.models.tokenizers import tiny_tokenizer

    raw = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 48, "vocab_size": VOCAB, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
           "max_position_embeddings": 256, "mask_token_id": 49, "eos_token_id": 48}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    spec = tiny_spec("dream", VOCAB, hidden_size=32, intermediate_size=48, num_kv_heads=2, rope_theta=10000.0,
                     rms_norm_eps=1e-6)
    sd = _dream_checkpoint(spec, torch.Generator().manual_seed(3))
    save_file(sd, str(tmp_path / "model.safetensors"))
    model = load_bidir_checkpoint("dream", tmp_path, dtype=torch.float32)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits[0], _reference_logits("dream", spec, sd, ids[0]), atol=1e-4)

    tiny_tokenizer().save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "tokenizer_config.json").read_text())
    meta.update(tokenizer_class="DreamTokenizer", auto_map={"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]})
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(meta))
    tok = load_checkpoint_tokenizer(tmp_path)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    assert tok("def add(a, b):")["input_ids"] == tiny_tokenizer()("def add(a, b):")["input_ids"]
    assert tok.eos_token == "<|im_end|>"


def test_tokenizer_from_vocab_and_merges(tmp_path):
    """No tokenizer.json, only Qwen2-style vocab.json + merges.txt and a custom-code config."""
    from streamgen.families.bidirectional.checkpoint import load_checkpoint_tokenizer
    from streamgen.models.tokenizers import tiny_tokenizer

    ref = tiny_tokenizer()
    model = json.loads(ref.backend_tokenizer.to_str())["model"]
    (tmp_path / "vocab.json").write_text(json.dumps(model["vocab"]))
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "DreamTokenizer", "eos_token": "<|im_end|>",
        "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "added_tokens_decoder": {str(ref.convert_tokens_to_ids(t)): {"content": t} for t in special}}))
    tok = load_checkpoint_tokenizer(tmp_path)
    text = "def add(a, b): return a + b<|im_end|>"  # Qwen2's pre-tokenizer splits runs of spaces differently
    assert tok(text)["input_ids"] == ref(text)["input_ids"]
    assert tok.eos_token_id == ref.eos_token_id
