"""The bidirectional family's plug-in: its weight loader (in-project :class:`BidirLM` for LLaDA / Dream, tiny
stand-ins, hub code only on opt-in) and decoder builder, named together as ``FAMILY`` (the face's ``DESCRIPTOR`` imports it
when asked)."""

from __future__ import annotations

import logging
from typing import Any

from streamgen.config import ConfigError, ModelConfig
from streamgen.decoding.family import FamilyPlugin
from streamgen.families.autoregressive import decoder as autoregressive
from streamgen.families.bidirectional.decoder import BidirectionalDecoder
from streamgen.families.bidirectional.model import BIDIR_ARCHS
from streamgen.families.bidirectional.sampler import bidir_settings_from
from streamgen.families.bidirectional.settings import check
from streamgen.models.rope import cast_keeping_rope_float32
from streamgen.models.weights import LoadedModel, ModelLoadError, load_model_and_tokenizer, torch_dtype

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# The family: its weight loader and decoder (streamgen.families.registry lists FAMILY)
# --------------------------------------------------------------------------------------------


def _checkpoint_arch(cfg: ModelConfig) -> str:
    arch = cfg.tiny_arch if cfg.source == "tiny" else dict(cfg.decoding).get("style", "llada")
    return str(arch)


def load_weights(cfg: ModelConfig, device: str = "cpu") -> LoadedModel:
    """Tiny llada/dream → in-project :class:`BidirLM`; a tiny llama/qwen3/gemma3 → a full-mask stand-in;
    a hub id or folder → the checkpoint mapped into :class:`BidirLM` (hub code only with
    ``trust_remote_code: true``)."""
    from streamgen.families.bidirectional.checkpoint import (
        load_bidir_checkpoint,
        load_checkpoint_tokenizer,
        resolve_checkpoint_folder,
    )
    from streamgen.families.bidirectional.model import CheckpointError, tiny_bidir_model
    from streamgen.models.tokenizers import tiny_tokenizer

    if cfg.source == "scripted":  # streamgen.models.scripted, with bidirectional attention
        from streamgen.models.weights import load_scripted

        return load_scripted(cfg, device, bidirectional=True)
    arch = _checkpoint_arch(cfg)
    dtype = torch_dtype(cfg.dtype)
    if cfg.source == "tiny" and arch in BIDIR_ARCHS:
        tok = tiny_tokenizer()
        mask = int(dict(cfg.decoding).get("mask_token_id") or len(tok) - 1)
        vocab = max(len(tok), mask + 1)  # a mask id past the tokenizer's: never produced from text
        model = tiny_bidir_model(arch, cfg.seed, vocab, mask_token_id=mask,  # type: ignore[arg-type]
                                 eos_token_id=tok.eos_token_id)
        return LoadedModel(cast_keeping_rope_float32(model, device=device, dtype=dtype).eval(), tok)
    if cfg.source == "tiny" or cfg.trust_remote_code:
        if cfg.trust_remote_code:
            log.warning("model %s: trust_remote_code is on: running the hub's modeling code", cfg.name)
            return _load_remote(cfg, device, dtype)
        return load_model_and_tokenizer(cfg, device)
    if cfg.source not in ("hub", "local"):
        raise ConfigError([f"model {cfg.name}: bidirectional checkpoints load from source hub or local, not {cfg.source}"])
    if arch not in BIDIR_ARCHS:
        raise ConfigError([f"model {cfg.name}: decoding.style={arch!r} must be llada or dream"])
    folder = resolve_checkpoint_folder(cfg.path, cfg.revision, cfg.source)
    try:
        model = load_bidir_checkpoint(arch, folder, dtype=dtype, device=device)  # type: ignore[arg-type]
    except CheckpointError as exc:
        raise ModelLoadError([f"model {cfg.name}: {exc}"], "checkpoint does not fit its config") from exc
    return LoadedModel(model, load_checkpoint_tokenizer(folder))


def _load_remote(cfg: ModelConfig, device: str, dtype: Any) -> LoadedModel:
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cfg.path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    model = AutoModel.from_pretrained(cfg.path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code,
                                      dtype=dtype)
    return LoadedModel(model.to(device).eval(), tok)


def build_decoder(cfg: ModelConfig, model: Any, tokenizer: Any, device: str,
                  max_new_tokens: int) -> BidirectionalDecoder:
    """A bidirectional decoder over loaded weights; an autoregressive one renders and meters for it."""
    text = autoregressive.build_decoder(cfg, model, tokenizer, device, max_new_tokens)
    return BidirectionalDecoder(model, tokenizer, bidir_settings_from(dict(cfg.decoding)),
                                max_new_tokens=max_new_tokens, device=device, text=text)




FAMILY = FamilyPlugin("bidirectional", build_decoder, load_weights, check)
"""LLaDA / Dream: in-project checkpoints (:func:`load_weights`), masked diffusion verified in one pass."""
