"""The official LLaDA and Dream denoising procedures, knob by knob: settings, buffer geometry, the
number of positions revealed at each step, and which positions a step reveals.

Read from ML-GSAI/LLaDA ``generate.py`` and the Dream-v0 hub folder's ``generation_utils.py``
(``DreamGenerationMixin._sample``); reimplemented here, no code copied. docs/diffusion.md lists every
knob, where a setting comes from, and the project's remaining differences (each a named option below,
off unless a config turns it on). Greedy decoding only (temperature 0: the study decodes greedily).

- **Geometry.** ``gen_length`` answer positions, cut into blocks of ``block_length`` (LLaDA's
  semi-autoregressive blocks; one block by default, as Dream-v0 has none); ``steps`` denoising steps
  in all, ``steps / blocks`` per block. Both divisions must be exact (the official code asserts it).
- **Every step is one forward** over request + the whole buffer, also a step that reveals nothing.
- **How many.** LLaDA precomputes a block's counts from its masked count ``m`` at the block's start:
  ``⌊m/s⌋`` each, one more for the first ``m mod s`` steps. Dream recounts the masked positions ``n``
  at every step and reveals ``int(n · (1 − s/t))`` over ``linspace(1, eps, steps + 1)``, all of them at
  the last step (float32, as torch computes it).
- **Which.** The argmax over the whole vocabulary (a position whose argmax is the mask stays masked)
  at every masked position up to the current block's end — earlier blocks' leftovers and mask ids in
  the *request* too (the official samplers treat every mask id in the sequence as masked). Ranked by
  confidence: LLaDA's softmax probability of the argmax (after the optional ``logits_inf_ids`` /
  ``confidence_inf_ids``, the eval scripts' ``logits_eos_inf`` / ``confidence_eos_eot_inf``); Dream's
  ``maskgit_plus`` (top probability), ``topk_margin`` (top1 − top2) or ``entropy`` (Σ p·log(p + 1e-10)),
  each over the distribution left after ``top_p`` and ``top_k`` filtering (``diffusion_generate``
  inherits ``top_k = 50`` from transformers' config defaults when the caller passes none). Ties: the
  lower position first.
- **Every block is filled**, also after an EOS; the answer is cut at its first EOS afterwards.
- **A stream step's refill** (an extension the official code never meets: its blocks all start fully
  masked) keeps the official per-position rate: a block with ``m`` of its ``B`` positions masked runs
  ``ceil(m · steps_per_block / B)`` steps (:func:`refill_steps`), with the style's own counts over those
  steps. ``full_block_refill: true`` (the earlier behaviour) runs every step of such a block.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from streamgen.decoding.host import to_host
from streamgen.families.bidirectional.settings import (  # noqa: F401 (re-exported: the sampler's settings)
    DEVIATIONS,
    DREAM_TOP_K,
    REMASKING,
    STYLES,
    VERIFIER_MODES,
    BidirSettings,
    Geometry,
    bidir_settings_from,
    geometry,
    llada_transfer_counts,
    refill_steps,
    settings_problems,
    with_benchmark,
)


def dream_transfer_count(masked: int, step: int, steps: int, eps: float) -> int:
    """Dream's count at ``step`` with ``masked`` positions masked now: ``int(n (1 − s/t))``, all at the last
    step; computed in float32 on ``linspace(1, eps, steps + 1)`` exactly as the official code does."""
    if step == steps - 1:
        return masked
    ts = torch.linspace(1, eps, steps + 1)
    t, s = ts[step], ts[step + 1]
    n = torch.tensor(masked, dtype=torch.int64) / 1  # the official mask_index.sum() / batch: float32
    return int(n * (1 - s / t))


def _top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    order = logits.sort(-1, descending=True)
    cum = order.values.softmax(-1).cumsum(-1)
    drop = cum > top_p
    drop[..., 1:] = drop[..., :-1].clone()  # the token that crosses top_p stays
    drop[..., 0] = False
    remove = torch.zeros_like(drop).scatter(-1, order.indices, drop)
    return logits.masked_fill(remove, torch.finfo(logits.dtype).min)


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    k = min(k, logits.shape[-1])
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)


def proposals(rows: torch.Tensor, s: BidirSettings, mask_id: int) -> tuple[list[int], list[float]]:
    """For logits ``rows`` (candidates × vocab, already aligned to their positions): each candidate's
    token (argmax) and confidence, as the official sampler of ``s.style`` computes them."""
    rows = rows.clone()
    if s.suppress_mask_logit:
        rows[:, mask_id] = float("-inf")
    if s.style == "llada":
        if s.logits_inf_ids:
            rows[:, list(s.logits_inf_ids)] = float("-inf")
        x0 = rows.argmax(-1)
        if s.confidence_inf_ids:
            rows[:, list(s.confidence_inf_ids)] = float("-inf")
        conf = rows.softmax(-1).gather(-1, x0[:, None])[:, 0]
        return _host(x0, conf)
    if s.top_p is not None and s.top_p < 1:
        rows = _top_p(rows, s.top_p)
    if s.confidence_top_k is not None:
        rows = _top_k(rows, s.confidence_top_k)
    probs = rows.softmax(-1)
    top, x0 = probs.max(-1)
    if s.alg == "topk_margin":
        two = probs.topk(2, -1).values
        top = two[:, 0] - two[:, 1]
    elif s.alg == "entropy":
        top = (probs * (probs + 1e-10).log()).sum(-1)
    return _host(x0, top)


def _host(x0: torch.Tensor, confidence: torch.Tensor) -> tuple[list[int], list[float]]:
    """Tokens and confidences as Python values, in one device→host transfer."""
    tokens, conf = to_host(x0, confidence)
    return [int(t) for t in tokens], conf


def choose(candidates: Sequence[int], confidence: Sequence[float], k: int) -> list[int]:
    """The ``k`` most confident candidates (indices into ``candidates``); ties: the lower position first."""
    order = sorted(range(len(candidates)), key=lambda i: (-confidence[i], candidates[i]))
    return order[:k]
