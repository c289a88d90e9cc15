"""The scripted DiffusionGemma: transformers' encoder + decoder halves answering by design (its script from
:mod:`streamgen.models.scripted`), so every canvas's step count is known by hand (docs/diffusion.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from streamgen.models.scripted import Script, _cached, _distribution, _Output, _script, _scripted_answer
from streamgen.models.tokenizers import tiny_tokenizer

SCRIPTED_CANVAS = 4  # the scripted DiffusionGemma's canvas_length: a 7-token answer spans two canvases


@dataclass(frozen=True)
class ScriptedDGConfig:
    """What the DiffusionGemma decoder and transformers' ``DynamicCache(config=...)`` read: one
    full-attention layer, a window no request reaches."""

    vocab_size: int
    eos_token_id: int
    canvas_length: int = SCRIPTED_CANVAS
    max_position_embeddings: int = 4096
    sliding_window: int = 4096
    layer_types: tuple[str, ...] = ("full_attention",)
    model_type: str = "scripted_diffusion_gemma"

    @property
    def per_layer_config(self) -> tuple[ScriptedDGConfig, ...]:
        return (self,) * len(self.layer_types)

    def get_text_config(self, decoder: bool = False) -> ScriptedDGConfig:
        return self


class _DGEncoder(torch.nn.Module):
    """The encoder half: writes (token, position) pairs into the cache, as keys and values."""

    def forward(self, input_ids: torch.Tensor, cache: Any, position_ids: torch.Tensor, **_: Any) -> None:
        fed = torch.stack([input_ids.float(), position_ids.float()], -1)[:, None]
        cache.update(fed, fed, 0)

    @staticmethod
    def create_masks_for_generate(**_: Any) -> None:
        return None  # predictions depend on the request and the position only: nothing to mask


class _DGDecoder(torch.nn.Module):
    """The decoder half: canvas position ``P + j`` predicts answer position ``j`` (no shift), whatever the
    canvas holds; the request is read from the cache."""

    def __init__(self, script: Script, eos_id: int, mask_id: int) -> None:
        super().__init__()
        self.script, self.eos_id, self.mask_id = script, eos_id, mask_id
        self.embed_tokens = torch.nn.Embedding(1, 1)  # carries the dtype the self-conditioning logits take

    def forward(self, decoder_input_ids: torch.Tensor, cache: Any, decoder_position_ids: torch.Tensor,
                **_: Any) -> torch.Tensor:
        past = _cached(cache, decoder_input_ids.shape[0])
        assert past is not None, "scripted DiffusionGemma: the decoder reads the request from the encoder cache"
        rows = []
        for b in range(decoder_input_ids.shape[0]):
            start, answer = _scripted_answer(self.script, past[b, 0], self.eos_id)
            rows.append(torch.stack([_distribution(self.script, answer, int(q) - start, self.mask_id)
                                     for q in decoder_position_ids[b].tolist()]))
        return torch.stack(rows).to(decoder_input_ids.device)

    @staticmethod
    def create_diffusion_decoder_attention_mask(**_: Any) -> None:
        return None


class _DGHalves(torch.nn.Module):
    """``model.model``: the two halves, named as transformers names them."""

    encoder: _DGEncoder
    decoder: _DGDecoder

    def __init__(self, encoder: _DGEncoder, decoder: _DGDecoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder


class ScriptedDiffusionGemma(torch.nn.Module):
    """A scripted DiffusionGemma (encoder + decoder halves, ``model.model.encoder`` / ``.decoder`` as in
    transformers); the argmax of every canvas position is its scripted token from the first step, so
    with a stopping rule on stability alone every canvas takes ``stability_threshold + 1`` steps."""

    model: _DGHalves

    def __init__(self, script: Script, mask_token_id: int) -> None:
        super().__init__()
        from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
            DiffusionGemmaGenerationConfig,
        )

        eos = int(tiny_tokenizer().eos_token_id)
        self.config = ScriptedDGConfig(len(tiny_tokenizer()), eos)
        self.generation_config = DiffusionGemmaGenerationConfig(eos_token_id=eos)
        self.model = _DGHalves(_DGEncoder(), _DGDecoder(script, eos, int(mask_token_id)))

    @property
    def dtype(self) -> torch.dtype:
        return self.model.decoder.embed_tokens.weight.dtype

    def _prepare_generation_config(self, generation_config: Any, **kwargs: Any) -> Any:
        """transformers' own merge (the mixin's method only reads ``self.generation_config``)."""
        from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
            DiffusionGemmaGenerationMixin as Mixin,
        )

        # duck-typed: the method reads nothing of the mixin but ``self.generation_config``
        return Mixin._prepare_generation_config(self, generation_config, **kwargs)  # type: ignore[arg-type]

    def forward(self, decoder_input_ids: torch.Tensor, cache: Any, decoder_position_ids: torch.Tensor,
                **_: Any) -> _Output:
        return _Output(self.model.decoder(decoder_input_ids=decoder_input_ids, cache=cache,
                                          decoder_position_ids=decoder_position_ids))


def scripted_diffusion_gemma(behaviour: str, *, mask_token_id: int) -> ScriptedDiffusionGemma:
    """The scripted DiffusionGemma named ``behaviour`` (a key of :data:`SCRIPTS`), in eval mode."""
    return ScriptedDiffusionGemma(_script(behaviour), mask_token_id).eval()
