"""Rotary (RoPE) frequency buffers stay float32 whatever dtype a model is cast to.

``transformers`` builds every rotary module's ``inv_freq`` (and ``original_inv_freq``; Gemma-3 has one
pair per layer type, ``<type>_inv_freq``) in float32, and ``from_pretrained`` keeps them so. A later
``model.to(dtype=torch.bfloat16)`` rounds them like any floating buffer — ``[1.0, 0.3164, 0.1001,
0.0317]`` at head dimension 128 — and at position ~1,000 the rounded frequencies put the rotation
radians off, so the logits drift far past bf16 noise (docs/diffusion.md, "RoPE precision"). The
official LLaDA and Dream code compute their frequencies in float32 at any model dtype.

Two ways in, one definition of what is kept:

* :class:`Float32RopeBuffers`, a mixin for rotary modules the project builds itself (``BidirLM``): its
  ``_apply`` puts the float32 values back after ANY cast (``.to``, ``.half``, ``.bfloat16``), whichever
  ancestor the cast was called on, because ``nn.Module._apply`` recurses through every child.
* :func:`cast_keeping_rope_float32` for models transformers builds (the tiny and scripted paths):
  the same snapshot → cast → restore around one ``model.to(device, dtype)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


def is_rope_buffer(name: str) -> bool:
    """Whether buffer ``name`` holds rotary frequencies (``inv_freq``, ``original_inv_freq``, ``<type>_inv_freq``)."""
    return name.rsplit(".", 1)[-1].endswith("inv_freq")


def float32_rope_buffers(module: nn.Module) -> dict[str, torch.Tensor]:
    """The rotary frequency buffers of ``module`` and its children, by dotted name, as float32 tensors."""
    return {name: buf.float() for name, buf in module.named_buffers() if is_rope_buffer(name)}


def restore_float32_rope(module: nn.Module, kept: dict[str, torch.Tensor]) -> None:
    """Put ``kept`` (from :func:`float32_rope_buffers`) back as float32, each on its buffer's current device."""
    for name, value in kept.items():
        owner_name, _, attr = name.rpartition(".")
        owner = module.get_submodule(owner_name)
        now = getattr(owner, attr)
        if now.dtype != torch.float32:
            setattr(owner, attr, value.to(device=now.device))


class Float32RopeBuffers(nn.Module):
    """Mixin for a rotary module: its frequency buffers stay float32 through every cast.

    Overriding ``_apply`` (rather than casting by hand where the model is loaded) covers every later
    ``.to()``, ``.half()`` or ``.bfloat16()`` of the module or of any module holding it; a buffer whose
    values were already rounded could not be repaired afterwards, so they are kept before the cast.
    """

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:
        kept = float32_rope_buffers(self)
        out = super()._apply(fn, recurse)
        restore_float32_rope(self, kept)
        return out


def cast_keeping_rope_float32(model: M, *, device: Any = None, dtype: torch.dtype | None = None) -> M:
    """``model.to(device=device, dtype=dtype)`` with every rotary frequency buffer left float32."""
    kept = float32_rope_buffers(model)
    model = model.to(device=device, dtype=dtype)
    restore_float32_rope(model, kept)
    return model
