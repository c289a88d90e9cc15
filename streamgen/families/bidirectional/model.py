"""In-project LLaDA and Dream forwards: standard transformers decoder layers with full attention.

LLaDA-8B-Instruct is a LLaMA-style block stack (RMSNorm, SwiGLU, RoPE, no biases, no GQA) with the
causal mask removed; Dream-7B-Instruct is a Qwen2.5 stack (q/k/v biases, GQA) with the causal mask
removed. Neither needs the hub's modeling code: :class:`BidirLM` builds ``LlamaDecoderLayer`` /
``Qwen2DecoderLayer`` modules, switches their attention to non-causal and never passes a mask, so
every position attends to every position. Checkpoints load through a parameter-name mapping
(:func:`map_parameter_name`), so ``trust_remote_code`` stays an explicit per-model opt-in.

What the forward returns is the raw logits at every position; LLaDA's logits at ``i`` predict token
``i`` (no shift), Dream's at ``i`` predict token ``i+1`` (the decoder shifts them, see
``bidirectional.py``).
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import nn

from streamgen.models.rope import Float32RopeBuffers

log = logging.getLogger(__name__)

BidirArch = Literal["llada", "dream"]
BIDIR_ARCHS: tuple[str, ...] = ("llada", "dream")

LLADA_MASK_ID, LLADA_EOS_ID = 126336, 126081
DREAM_MASK_ID, DREAM_EOS_ID = 151666, 151643


class CheckpointError(ValueError):
    """A checkpoint does not match the in-project architecture; the message names the fix."""


@dataclass(frozen=True)
class BidirSpec:
    """Architecture hyperparameters of a bidirectional masked-diffusion LM."""

    arch: BidirArch
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    mask_token_id: int
    eos_token_id: int
    rope_full_precision: bool = True
    """Rotate q and k in float32 at any model dtype, cast back after (LLaDA's ``rope_full_precision``,
    true in LLaDA-8B's config.json and the default of its ModelConfig). Dream's official code rotates
    in the model dtype: False. A no-op in float32."""

    @property
    def attention_bias(self) -> bool:
        return self.arch == "dream"  # Qwen2 q/k/v carry biases; LLaDA-8B has none


@dataclass(frozen=True)
class BidirOutput:
    """Logits of one forward, shape (batch, length, vocab)."""

    logits: torch.Tensor


def _hf_config(spec: BidirSpec) -> Any:
    common: dict[str, Any] = dict(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads, rms_norm_eps=spec.rms_norm_eps,
        max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        eos_token_id=spec.eos_token_id, bos_token_id=None, pad_token_id=None,
    )
    cfg: Any
    if spec.arch == "llada":
        from transformers import LlamaConfig

        cfg = LlamaConfig(attention_bias=False, mlp_bias=False, **common)
    else:
        from transformers import Qwen2Config

        cfg = Qwen2Config(use_sliding_window=False, **common)
    cfg._attn_implementation = _full_precision_attention() if spec.rope_full_precision else "sdpa"
    return cfg


_FP32_ROPE_ATTENTION = "streamgen_sdpa_fp32_rope"


def _sdpa_after_fp32_rope(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          *args: Any, **kwargs: Any) -> Any:
    """SDPA on q and k rotated in float32 (``rope_full_precision``), cast back to the model dtype first.

    With float32 cos/sin (:meth:`BidirLM.forward`), transformers' ``apply_rotary_pos_emb`` already
    rotates in float32 by type promotion — ``q * cos`` with q in bf16 is ``q.float() * cos``, as the
    official LLaDA code writes it — and returns float32 q and k. The attention function is the one
    hook between that rotation and the attention product, so the cast back (LLaDA's ``type_as(q)``)
    happens here; in float32 it is a no-op and the call is plain SDPA.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query.to(value.dtype), key.to(value.dtype), value, *args, **kwargs)


def _full_precision_attention() -> str:
    """The name of :func:`_sdpa_after_fp32_rope` in transformers' attention registry (registered on first use)."""
    from transformers import AttentionInterface

    AttentionInterface.register(_FP32_ROPE_ATTENTION, _sdpa_after_fp32_rope)
    return _FP32_ROPE_ATTENTION


_FLOAT32_ROTARY = {"Float32LlamaRotaryEmbedding": "llada", "Float32Qwen2RotaryEmbedding": "dream"}


@functools.cache
def _float32_rotary(arch: str) -> type:
    """The arch's transformers rotary module, its ``inv_freq`` buffers float32 through every cast.

    A subclass of the rotary module rather than an override on :class:`BidirLM`: ``_apply`` recurses
    through children, so a cast of the whole model, of ``model.model`` or of the rotary module alone
    all keep the frequencies (:mod:`streamgen.models.rope`). Built on first use (transformers' modeling
    modules load lazily here); :func:`__getattr__` finds it by name for pickle.
    """
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

    base = LlamaRotaryEmbedding if arch == "llada" else Qwen2RotaryEmbedding
    return type(f"Float32{base.__name__}", (Float32RopeBuffers, base), {"__module__": __name__})


def __getattr__(name: str) -> Any:
    if name in _FLOAT32_ROTARY:
        return _float32_rotary(_FLOAT32_ROTARY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Backbone(nn.Module):
    """``model.*`` of the HF naming: embeddings, decoder layers, final norm, rotary embedding."""

    def __init__(self, spec: BidirSpec, hf_config: Any) -> None:
        super().__init__()
        from transformers.models.llama import modeling_llama
        from transformers.models.qwen2 import modeling_qwen2

        mod: Any = modeling_llama if spec.arch == "llada" else modeling_qwen2
        prefix = "Llama" if spec.arch == "llada" else "Qwen2"
        Layer, Norm = (getattr(mod, prefix + n) for n in ("DecoderLayer", "RMSNorm"))
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Layer(hf_config, i) for i in range(spec.num_layers))
        for layer in self.layers:
            setattr(layer.self_attn, "is_causal", False)  # noqa: B010  (full attention: no mask, no causal flag)
        self.norm = Norm(spec.hidden_size, eps=spec.rms_norm_eps)
        self.rotary_emb = _float32_rotary(spec.arch)(config=hf_config)


class BidirLM(nn.Module):
    """A bidirectional LM: every position attends to every position; ``forward`` returns logits.

    Parameter names follow the HF Llama/Qwen2 convention (``model.layers.N.self_attn.q_proj.weight``,
    ``lm_head.weight``); :func:`map_parameter_name` translates LLaDA / Dream checkpoint names.
    """

    def __init__(self, spec: BidirSpec) -> None:
        super().__init__()
        self.spec = spec
        self.config = _hf_config(spec)
        self.model = _Backbone(spec, self.config)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if self.spec.rope_full_precision:  # transformers' attention registry is per process: an unpickled model
            _full_precision_attention()    # in a fresh one needs its attention function registered again

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> BidirOutput:
        hidden = self.model.embed_tokens(input_ids)
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        # cos/sin come back in the dtype of the tensor passed: float32 ones make the layers rotate in float32
        rope_dtype = torch.float32 if self.spec.rope_full_precision else hidden.dtype
        pos_emb = self.model.rotary_emb(hidden.new_empty(0, dtype=rope_dtype), position_ids)
        for layer in self.model.layers:
            hidden = layer(hidden, attention_mask=None, position_ids=position_ids, position_embeddings=pos_emb)
        return BidirOutput(self.lm_head(self.model.norm(hidden)))


# --------------------------------------------------------------------------------------------
# Parameter-name mapping
# --------------------------------------------------------------------------------------------

_LLADA_BLOCK = {
    "attn_norm": "input_layernorm", "ff_norm": "post_attention_layernorm",
    "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
    "attn_out": "self_attn.o_proj",
    "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "ff_out": "mlp.down_proj",
}
_LLADA_TOP = {
    "model.transformer.wte.weight": "model.embed_tokens.weight",
    "model.transformer.ln_f.weight": "model.norm.weight",
    "model.transformer.ff_out.weight": "lm_head.weight",
}
_LLADA_BLOCK_RE = re.compile(r"^model\.transformer\.blocks\.(\d+)\.(\w+)\.(weight|bias)$")


def map_parameter_name(arch: BidirArch, name: str) -> str:
    """The in-project name of checkpoint parameter ``name``; raises :class:`CheckpointError` if unknown.

    LLaDA (OLMo-style) → Llama names: ``wte``→``embed_tokens``, ``attn_out``→``o_proj``,
    ``ff_proj``/``up_proj``/``ff_out`` → ``gate_proj``/``up_proj``/``down_proj``, ``ln_f``→``norm``,
    ``transformer.ff_out``→``lm_head``. Dream already uses Qwen2 names (identity).
    """
    if arch == "dream":
        return name
    if name in _LLADA_TOP:
        return _LLADA_TOP[name]
    m = _LLADA_BLOCK_RE.match(name)
    if m and m.group(2) in _LLADA_BLOCK:
        return f"model.layers.{m.group(1)}.{_LLADA_BLOCK[m.group(2)]}.{m.group(3)}"
    raise CheckpointError(f"LLaDA parameter {name!r} has no in-project counterpart: this loader "
                          f"supports the LLaMA-block LLaDA-8B layout (no fused att_proj, no biases); "
                          f"set trust_remote_code: true in the model YAML to run the hub code instead")


def load_mapped_state_dict(model: BidirLM, state_dict: dict[str, torch.Tensor], *, assign: bool = False) -> None:
    """Load a checkpoint state dict with LLaDA / Dream names into ``model`` (strict; all problems at once)."""
    mapped = {map_parameter_name(model.spec.arch, k): v for k, v in state_dict.items()}
    check_checkpoint_fits(model, {k: tuple(v.shape) for k, v in mapped.items()})
    model.load_state_dict(mapped, strict=True, assign=assign)


def check_checkpoint_fits(model: BidirLM, shapes: dict[str, tuple[int, ...]]) -> None:
    """Raise :class:`CheckpointError` listing every in-project parameter name (→ checkpoint shape) that is
    missing, left over or of the wrong shape (all problems at once)."""
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(shapes)), sorted(set(shapes) - set(own))
    wrong = [f"{k}: checkpoint {shape} vs model {tuple(own[k].shape)}"
             for k, shape in shapes.items() if k in own and shape != tuple(own[k].shape)]
    if missing or unexpected or wrong:
        raise CheckpointError(
            f"checkpoint does not fit the {model.spec.arch} architecture built from its config: "
            f"missing {missing[:5]}{'…' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}, "
            f"wrong shapes {wrong[:5]}; check that config.json belongs to these weights")


# --------------------------------------------------------------------------------------------
# Specs: from checkpoint config.json, and tiny random test models
# --------------------------------------------------------------------------------------------


def spec_from_config(arch: BidirArch, raw: dict[str, Any]) -> BidirSpec:
    """A :class:`BidirSpec` from a checkpoint's ``config.json`` (LLaDA: OLMo keys; Dream: Qwen2 keys)."""
    if arch == "llada":
        if raw.get("block_type", "llama") != "llama" or raw.get("include_bias", False):
            raise CheckpointError(f"LLaDA config block_type={raw.get('block_type')!r} include_bias="
                                  f"{raw.get('include_bias')!r}: only the llama block without biases is in-project")
        return BidirSpec(
            arch="llada", vocab_size=int(raw.get("embedding_size") or raw["vocab_size"]),
            hidden_size=raw["d_model"], intermediate_size=raw["mlp_hidden_size"], num_layers=raw["n_layers"],
            num_heads=raw["n_heads"], num_kv_heads=raw.get("n_kv_heads") or raw["n_heads"],
            rope_theta=float(raw.get("rope_theta", 500000.0)), rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
            max_position_embeddings=int(raw.get("max_sequence_length", 4096)),
            mask_token_id=int(raw.get("mask_token_id", LLADA_MASK_ID)),
            eos_token_id=int(raw.get("eos_token_id", LLADA_EOS_ID)),
            rope_full_precision=bool(raw.get("rope_full_precision", True)))
    return BidirSpec(
        arch="dream", vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
        intermediate_size=raw["intermediate_size"], num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"], num_kv_heads=raw.get("num_key_value_heads") or raw["num_attention_heads"],
        rope_theta=float(raw.get("rope_theta", 1e6)), rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(raw.get("max_position_embeddings", 32768)),
        mask_token_id=int(raw.get("mask_token_id", DREAM_MASK_ID)),
        eos_token_id=int(raw.get("eos_token_id", DREAM_EOS_ID)),
        rope_full_precision=False)  # Dream's code rotates in the model dtype (cos/sin cast to it first)


def tiny_spec(arch: BidirArch, vocab_size: int, **overrides: Any) -> BidirSpec:
    """Test-sized spec. Mask and EOS default to the last two ids of the vocabulary."""
    base = BidirSpec(arch=arch, vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_layers=2,
                     num_heads=4, num_kv_heads=4 if arch == "llada" else 2, rope_theta=10000.0,
                     rms_norm_eps=1e-5, max_position_embeddings=1024,
                     mask_token_id=vocab_size - 1, eos_token_id=vocab_size - 2,
                     rope_full_precision=arch == "llada")
    return replace(base, **overrides)


def tiny_bidir_model(arch: BidirArch, seed: int, vocab_size: int, **overrides: Any) -> BidirLM:
    """A seeded random :class:`BidirLM` (deterministic for a given seed and spec)."""
    if arch not in BIDIR_ARCHS:
        raise ValueError(f"tiny bidirectional arch {arch!r}: use one of {BIDIR_ARCHS}")
    spec = tiny_spec(arch, vocab_size, **overrides)
    gen = torch.Generator().manual_seed(seed)
    model = BidirLM(spec)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return model.eval()


def copying_bidir_model(vocab_size: int, *, alpha: float = 3.0, seed: int = 0, **overrides: Any) -> BidirLM:
    """A tiny LLaDA-style model that predicts the token it sees at each position, as trained LLaDA and
    Dream do on visible (unmasked) positions: near-zero layers keep the input embedding in the residual
    stream, and the output layer is the normalised embedding table (×``alpha``). Used to reproduce the
    mechanism of paper §6.5 without trained weights."""
    model = tiny_bidir_model("llada", seed, vocab_size, **overrides)
    with torch.no_grad():
        for name, p in model.model.layers.named_parameters():
            if not name.endswith("norm.weight"):
                p.mul_(0.01)
        emb = model.model.embed_tokens.weight
        model.lm_head.weight.copy_(alpha * emb / emb.norm(dim=-1, keepdim=True))
    return model
