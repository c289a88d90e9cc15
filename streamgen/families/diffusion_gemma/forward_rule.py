"""The DiffusionGemma family's forward rule: the bound (docs/diffusion.md, docs/estimate.md).

Canvases up to the one holding EOS, each 1 encoder call + ``steps`` decoder calls (the stopping rule may end
a canvas earlier: ``steps`` is the bound); a stream step: the verify pair (encoder + decoder), then the
canvases from the first rejected one, or ``s_min`` confirming calls. No torch at import (``dg_shape`` reads
the decoder's settings when called).
"""

from __future__ import annotations

import math

from streamgen.config import ModelConfig
from streamgen.decoding.forwards import Decode, Forwards, Rule

DG_DEFAULT_STEPS = 48  # transformers' DiffusionGemma default max_denoising_steps
DG_HUB_CANVAS = 256  # google/diffusiongemma-26B-A4B-it's canvas_length


def diffusion_gemma(canvas: int, steps: int, s_min: int, d: Decode) -> tuple[Forwards, ...]:
    """DiffusionGemma: canvases up to the answer's end, ``steps`` decoder calls each and an encoder call
    before each (the request before the first, the finished canvas before the others)."""
    canvases = math.ceil(max(d.answer, 1) / canvas)
    if not d.draft:
        return (Forwards(1, d.prompt), Forwards(canvases - 1, canvas), Forwards(canvases * steps, canvas))
    blocks = math.ceil(d.draft / canvas)
    verify = (Forwards(1, d.prompt + d.draft), Forwards(1, blocks * canvas))  # encoder + decoder halves
    if d.accepted >= d.draft:
        return (*verify, Forwards(s_min, canvas))  # the confirming canvas
    left = canvases - d.accepted // canvas  # from the canvas of the first rejected position
    return (*verify, Forwards(left - 1, canvas), Forwards(left * steps, canvas))


def dg_shape(cfg: ModelConfig) -> tuple[int, int, int]:
    """DiffusionGemma's (canvas length, max denoising steps, s_min) for ``cfg`` (docs/diffusion.md)."""
    from streamgen.families.diffusion_gemma.decoder import dg_settings_from
    from streamgen.families.diffusion_gemma.plugin import TINY_CANVAS
    from streamgen.families.diffusion_gemma.scripted import SCRIPTED_CANVAS

    s = dg_settings_from(dict(cfg.decoding))
    steps = int(s.max_denoising_steps or DG_DEFAULT_STEPS)
    s_min = min(int(s.stability_threshold if s.stability_threshold is not None else 1) + 1, steps)
    canvas = {"tiny": TINY_CANVAS, "scripted": SCRIPTED_CANVAS}.get(cfg.source, DG_HUB_CANVAS)
    return canvas, steps, s_min


def rule(cfg: ModelConfig, benchmark: str, budget: int) -> Rule:
    """The rule for one (model, benchmark, answer budget)."""
    canvas, steps, s_min = dg_shape(cfg)  # every canvas assumed to run all its steps: the bound
    return lambda d: diffusion_gemma(canvas, steps, s_min, d)
