"""The DiffusionGemma family's plug-in: its weight loader (transformers' block-diffusion model, tiny and scripted
stand-ins) and decoder builder, named together as ``FAMILY`` (the face's ``DESCRIPTOR`` imports it when asked)."""

from __future__ import annotations

from typing import Any

import torch

from streamgen.config import ConfigError, ModelConfig
from streamgen.decoding.family import FamilyPlugin
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder, require_chat_template
from streamgen.families.diffusion_gemma.decoder import DiffusionGemmaDecoder, _eos_ids, dg_settings_from
from streamgen.models.hub_cache import local_folder
from streamgen.models.rope import cast_keeping_rope_float32
from streamgen.models.weights import (
    LoadedModel,
    ModelLoadError,
    not_cached_line,
    strict_from_pretrained,
    torch_dtype,
)

# --------------------------------------------------------------------------------------------
# The family: its weight loader and decoder (streamgen.families.registry lists FAMILY)
# --------------------------------------------------------------------------------------------


def load_weights(cfg: ModelConfig, device: str = "cpu") -> LoadedModel:
    """Tiny → a seeded random ``DiffusionGemmaForBlockDiffusion`` with the offline tokenizer; scripted →
    ``families/diffusion_gemma/scripted.py``; hub id or folder → ``DiffusionGemmaForBlockDiffusion.from_pretrained``
    (native transformers, no hub code)."""
    from streamgen.models.tokenizers import tiny_tokenizer

    dtype = torch_dtype(cfg.dtype)
    if cfg.source == "scripted":  # families/diffusion_gemma/scripted.py: answers by design
        from streamgen.families.diffusion_gemma.scripted import scripted_diffusion_gemma

        tok = tiny_tokenizer()  # no mask token in the model: the id only gets probability 0
        scripted = scripted_diffusion_gemma(cfg.path, mask_token_id=len(tok) - 1)
        return LoadedModel(cast_keeping_rope_float32(scripted, device=device, dtype=dtype), tok)
    if cfg.source == "tiny":
        tok = tiny_tokenizer()
        model = tiny_diffusion_gemma(cfg.seed, len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        return LoadedModel(cast_keeping_rope_float32(model, device=device, dtype=dtype).eval(), tok)
    if cfg.source not in ("hub", "local"):
        raise ConfigError([f"model {cfg.name}: diffusion_gemma loads from source hub, local or tiny, not {cfg.source}"])
    from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion

    path = local_folder(cfg.path) if cfg.source == "local" else cfg.path
    try:
        tok = AutoTokenizer.from_pretrained(path, revision=cfg.revision)
        model = strict_from_pretrained(DiffusionGemmaForBlockDiffusion, path, cfg, dtype=dtype,
                                       revision=cfg.revision or "main")
    except OSError as exc:
        raise ModelLoadError([not_cached_line(cfg, path, exc)], "model not found") from exc
    return LoadedModel(model.to(device).eval(), tok)  # type: ignore[arg-type]  # transformers stub quirk


def build_decoder(cfg: ModelConfig, model: Any, tokenizer: Any, device: str,
                  max_new_tokens: int) -> DiffusionGemmaDecoder:
    """A DiffusionGemma decoder over loaded weights; an autoregressive one renders and meters for it."""
    settings = dg_settings_from(dict(cfg.decoding))
    require_chat_template(cfg, tokenizer)
    tc = model.config.get_text_config(decoder=True)
    text = AutoregressiveDecoder(model, tokenizer, max_new_tokens=max_new_tokens, device=device,
                                 max_context=cfg.max_context or tc.max_position_embeddings,
                                 chat_template_kwargs=cfg.chat_template_kwargs, system_prompt=cfg.system_prompt,
                                 eos_token_ids=_eos_ids(tc, tokenizer))
    return DiffusionGemmaDecoder(model, tokenizer, settings, max_new_tokens=max_new_tokens, device=device, text=text)


TINY_CANVAS = 8
_TINY_TEXT: dict[str, Any] = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, global_head_dim=16, max_position_embeddings=4096, initializer_range=0.1,
    # one sliding and one global layer, with a window short enough that test requests cross it
    sliding_window=24, layer_types=["sliding_attention", "full_attention"],
    num_experts=4, top_k_experts=2, moe_intermediate_size=32, bos_token_id=None,
)
_TINY_VISION: dict[str, Any] = dict(model_type="gemma4_vision", hidden_size=32, intermediate_size=64,
                                    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=16)


def tiny_config(vocab_size: int, **overrides: Any) -> Any:
    """A ``DiffusionGemmaConfig`` at hidden 64, 2 layers (MoE, 4 experts), canvas 8, tiny vision tower."""
    from transformers import DiffusionGemmaConfig

    canvas = int(overrides.pop("canvas_length", TINY_CANVAS))
    text = {**_TINY_TEXT, "vocab_size": vocab_size, **overrides}
    return DiffusionGemmaConfig(text_config=text, vision_config=dict(_TINY_VISION), canvas_length=canvas)


def tiny_diffusion_gemma(seed: int, vocab_size: int, **overrides: Any) -> Any:
    """A seeded random-weight ``DiffusionGemmaForBlockDiffusion`` (fp32, eval); the global RNG is untouched."""
    from transformers import DiffusionGemmaForBlockDiffusion

    cfg = tiny_config(vocab_size, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DiffusionGemmaForBlockDiffusion(cfg)
    return model.eval()


FAMILY = FamilyPlugin("diffusion_gemma", build_decoder, load_weights)
"""DiffusionGemma: transformers' block diffusion (:func:`load_weights`), encoder + decoder calls metered."""
