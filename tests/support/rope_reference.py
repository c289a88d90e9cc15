"""A deliberately simple transformer forward with RoPE computed in float32, as the official code does.

The independent side of tests/streamgen/decoding/test_rope_precision.py and bench/bench_rope_precision.py: embeddings,
RMSNorm (normalised in float32, cast back, then scaled), attention, SwiGLU, written here from the
papers' equations and the official code's dtype choices (docs/diffusion.md, "RoPE precision"), reading
the weights by their HF names from a state dict. Nothing of streamgen or of transformers' modeling code
is used. The rotary tables are always float32; ``rotate_fp32`` says where the rotation itself runs:

* True — LLaDA (``rope_full_precision: true``): q and k cast to float32, rotated, cast back.
* False — Dream, and transformers' Llama / Qwen2 / Qwen3: cos and sin cast to the model dtype, the
  rotation in that dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class RefShape:
    """What the reference needs besides the weights."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_eps: float
    rotate_fp32: bool
    causal: bool = False
    qk_norm: bool = False  # Qwen3 (ReFusion): an RMSNorm over each head's q and k before the rotation


def rope_tables(length: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (length, head_dim), float32: angle = position · θ^(−2i/d), halves repeated."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    both = torch.cat((angles, angles), dim=-1)
    return both.cos(), both.sin()


def _half_turn(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, fp32: bool) -> torch.Tensor:
    """RoPE on (batch, heads, length, head_dim): in float32 and cast back, or in ``x``'s dtype."""
    if fp32:
        xf = x.float()
        return (xf * cos + _half_turn(xf) * sin).to(x.dtype)
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return x * c + _half_turn(x) * s


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _heads(x: torch.Tensor, n: int, d: int) -> torch.Tensor:
    return x.view(x.shape[0], x.shape[1], n, d)


def _attention(w: dict[str, torch.Tensor], p: str, x: torch.Tensor, shape: RefShape,
               cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    def proj(name: str, n: int) -> torch.Tensor:
        return _heads(F.linear(x, w[f"{p}self_attn.{name}.weight"], w.get(f"{p}self_attn.{name}.bias")), n,
                      shape.head_dim)

    q, k, v = proj("q_proj", shape.n_heads), proj("k_proj", shape.n_kv_heads), proj("v_proj", shape.n_kv_heads)
    if shape.qk_norm:
        q = rms_norm(q, w[f"{p}self_attn.q_norm.weight"], shape.rms_eps)
        k = rms_norm(k, w[f"{p}self_attn.k_norm.weight"], shape.rms_eps)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q = rotate(q, cos, sin, fp32=shape.rotate_fp32)
    k = rotate(k, cos, sin, fp32=shape.rotate_fp32)
    group = shape.n_heads // shape.n_kv_heads
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal, scale=shape.head_dim ** -0.5)
    return F.linear(out.transpose(1, 2).flatten(2), w[f"{p}self_attn.o_proj.weight"])


def reference_logits(state: dict[str, torch.Tensor], ids: torch.Tensor, shape: RefShape,
                     dtype: torch.dtype) -> torch.Tensor:
    """Logits (batch, length, vocab) as float32 of the model whose HF-named weights are ``state``, run in ``dtype``."""
    w = {k: v.detach().to(dtype) for k, v in state.items() if not k.endswith("inv_freq")}
    cos, sin = rope_tables(ids.shape[1], shape.head_dim, shape.rope_theta)
    with torch.no_grad():
        h = w["model.embed_tokens.weight"][ids]
        for i in range(shape.n_layers):
            p = f"model.layers.{i}."
            h = h + _attention(w, p, rms_norm(h, w[p + "input_layernorm.weight"], shape.rms_eps), shape, cos, sin)
            x = rms_norm(h, w[p + "post_attention_layernorm.weight"], shape.rms_eps)
            gate, up = F.linear(x, w[p + "mlp.gate_proj.weight"]), F.linear(x, w[p + "mlp.up_proj.weight"])
            h = h + F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])
        head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        return F.linear(rms_norm(h, w["model.norm.weight"], shape.rms_eps), head).float()


@dataclass(frozen=True)
class Agreement:
    """How close two logit tensors are over some positions."""

    argmax_equal: int
    positions: int
    max_abs_diff: float


def agreement(a: torch.Tensor, b: torch.Tensor) -> Agreement:
    """Argmax agreement and max |a − b| over every position of (batch, length, vocab) logits."""
    a, b = a.float(), b.float()
    equal = int((a.argmax(-1) == b.argmax(-1)).sum())
    return Agreement(equal, int(a.shape[0] * a.shape[1]), float((a - b).abs().max()))
