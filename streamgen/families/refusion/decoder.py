"""ReFusion: slot-based masked diffusion on a causal model, with an autoregressive verifier.

One set of causal weights plays two roles (docs/diffusion.md): fed the mask token, the logits
at a position predict THAT position (a masked-diffusion "plan"); fed clean tokens, the logits at
``i-1`` predict token ``i`` (an autoregressive "verifier"). Committed tokens sit in the KV cache in
*generation order* with RoPE positions equal to their original answer index, so their KV is exact.

One round over the masked slots of the current block:

1. plan: one forward over every masked slot (mask ids, original positions) on top of the committed
   cache; draft = argmax per position; a slot's confidence is its first token's. Choose the slots
   above ``slot_threshold``, else the single most confident one.
2. verify: one forward over the chosen drafts in position order; shifted probabilities; a slot's
   first token always passes, the others need ``> token_threshold``; cumulative acceptance. Fully
   covered leading slots are committed with the KV of this pass.
3. infill (only when no slot was covered): per chosen slot, in parallel as a batch, alternate a
   prediction forward (unverified positions masked) and a verification forward until every position
   is verified; the token after the last verified one always passes, so each pair makes progress.

EOS in an accepted run ends the answer there; the answer is the committed tokens sorted by position.
Every model call goes through :class:`ForwardMeter`. Streaming (``ReFusionSession.step``): one
causal verify forward over request + draft (positional order, its EOS included), accept the leading
run, then the remaining positions are masked slots again; a fully accepted finished draft is the
answer, confirmed by one plan/verify round. The residual minimum is 3 forwards (docs/diffusion.md).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any

import torch

from streamgen.acceptance_rules import AcceptanceRule
from streamgen.config import ConfigError, ModelConfig
from streamgen.decoding.base import Family, Generation, StepResult, common_prefix_length
from streamgen.decoding.family import FamilyPlugin
from streamgen.decoding.host import verification_from_probs
from streamgen.decoding.over_text import OverText
from streamgen.decoding.verification import Verification, accepted_length, draft_is_complete
from streamgen.families.autoregressive import decoder as autoregressive
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.families.refusion.settings import (  # noqa: F401 (re-exported: the decoder's settings)
    DEVIATIONS,
    REFERENCE_DEFAULTS,
    ReFusionSettings,
    SlotGeometry,
    check,
    settings_from,
    slot_geometry,
    with_benchmark,
)
from streamgen.families.refusion.slots import KV, SlotEngine, SlotState, StopAt
from streamgen.requests.chat import Message

log = logging.getLogger(__name__)

REFUSION_MASK_TOKEN = "<|mask|>"  # id 151670 in GSAI-ML/ReFusion


# --------------------------------------------------------------------------------------------
# Decoder and stream session
# --------------------------------------------------------------------------------------------


def causal_verification(logits: torch.Tensor, prompt_len: int, draft: Sequence[int]) -> Verification:
    """Scores of ``draft`` from ONE causal forward over prompt + draft: logits at ``i-1`` score token ``i``."""
    n = len(draft)
    probs = logits[prompt_len - 1:prompt_len - 1 + n].float().softmax(-1)
    return verification_from_probs(probs, draft)


class ReFusionDecoder(OverText):
    """Slot-based diffusion decoding with an autoregressive verifier, behind the Decoder protocol."""

    family: Family = "refusion"
    min_residual_forwards = 3  # verify + one plan/verify round, always (docs/diffusion.md)

    def __init__(self, model: Any, tokenizer: Any, settings: ReFusionSettings, *, max_new_tokens: int = 256,
                 device: str = "cpu", text: AutoregressiveDecoder | None = None) -> None:
        # The AR decoder supplies request rendering, the context check and the meter.
        self.text = text or AutoregressiveDecoder(model, tokenizer, max_new_tokens=max_new_tokens, device=device)
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        self.max_new_tokens = int(max_new_tokens)
        geo = slot_geometry(settings, max_new_tokens)
        self.gen_length, self.block_length = geo.gen_length, geo.block_length
        self.meter = self.text.meter
        self.eos_ids = refusion_eos_ids(tokenizer, settings, self.text.eos_token_ids)
        self.mask_id = resolve_mask_id(tokenizer, settings.mask_token_id)
        self.engine = SlotEngine(model, settings, self.mask_id, self.eos_ids, self.meter, torch.device(device),
                                 block_length=self.block_length)

    def for_benchmark(self, benchmark: str) -> ReFusionDecoder:
        """A decoder with ``per_benchmark[benchmark]`` applied (same model and meter)."""
        settings = with_benchmark(self.settings, benchmark)
        if settings is self.settings:
            return self
        return ReFusionDecoder(self.model, self.tokenizer, settings,
                               max_new_tokens=self.max_new_tokens, device=str(self.engine.device), text=self.text)

    def _generation(self, state: SlotState, span: Any) -> Generation:
        tokens = state.tokens(self.gen_length)
        finished = state.eos_pos is not None and not state.stopped
        return Generation(tuple(tokens), self.decode_text(tokens), finished, span.wall_s, span.meter, None,
                          state.stopped)

    def _stop(self) -> StopAt | None:
        return self.stop_length if self.text.stops else None

    @torch.inference_mode()
    def generate(self, messages: Sequence[Message]) -> Generation:
        """Base run: the whole request from scratch (the first plan forward is also the prefill)."""
        with self.meter.span() as span:  # rendering counts, as in every family (docs/accounting.md)
            state = self.start(messages)  # no reuse: the base run decodes from scratch
            self.engine.decode(state, self.gen_length, self._stop())
        return self._generation(state, span)

    @torch.inference_mode()
    def score(self, messages: Sequence[Message], draft: Sequence[int],
              reuse: SlotState | None = None) -> tuple[Verification, SlotState]:
        """ONE causal verify forward over request + draft (positional order); the returned state holds
        the KV of the request and the whole draft (crop it to what is accepted). ``reuse``: a state
        whose request KV is reused up to the common token prefix (only the rest is fed)."""
        state = self.start(messages, reuse)
        logits, cache, head = self.engine.forward(state, [list(draft)], [list(range(len(draft)))], "verify_stream")
        state.kv = KV.from_cache(cache, 0, len(state.prompt) + len(draft))
        return causal_verification(logits[0], head, draft), state

    def start(self, messages: Sequence[Message], reuse: SlotState | None = None) -> SlotState:
        """A state for ``messages`` holding ``reuse``'s request KV up to the common token prefix; at least
        the request's last token is always fed again (its logits score the first draft token)."""
        state = SlotState(self.text.render(messages))
        self.text.check_fits(len(state.prompt), self.gen_length)
        if reuse is not None:
            keep = min(common_prefix_length(reuse.prompt, state.prompt), len(state.prompt) - 1, reuse.kv.length)
            state.kv = reuse.kv.crop(keep)
        return state

    def open_stream(self) -> ReFusionSession:
        return ReFusionSession(self)


class ReFusionSession:
    """One example's stream run: verify (1 forward) → accept the leading run → re-mask the rest."""

    def __init__(self, decoder: ReFusionDecoder) -> None:
        self.decoder = decoder
        self.last: SlotState | None = None  # the previous step's request and its KV (prefix reuse)

    @torch.inference_mode()
    def step(self, messages: Sequence[Message], draft: Sequence[int], rule: AcceptanceRule) -> StepResult:
        d = self.decoder
        with d.meter.span() as span:
            positions = d.content(draft)
            verification, accepted = None, 0
            if positions:
                verification, state = d.score(messages, positions, reuse=self.last)
                accepted = accepted_length(positions, verification, rule)
                state.kv = state.kv.crop(len(state.prompt) + accepted)
                state.accept(positions[:accepted], d.eos_ids)
            else:
                state = d.start(messages, self.last)
            if draft_is_complete(positions, accepted, d.eos_ids, d.gen_length, stop=d.stop_length(positions)):
                if d.text.stops:
                    state.end_at_stop(d.stop_length)  # a kept stop string ends the answer, as a kept EOS does
                d.engine.confirm(state, accepted)  # the draft is the answer; one round emits it
            else:
                d.engine.decode(state, d.gen_length, d._stop())
        self.last = SlotState(state.prompt, state.kv.crop(len(state.prompt)))
        answer = d._generation(state, span)
        extra = {} if verification is None else {"verify_median_prob": verification.median_prob or 0.0}
        return StepResult(len(positions), accepted, len(answer.token_ids) - accepted, answer, extra)

    def close(self) -> None:
        self.last = None



def resolve_mask_id(tokenizer: Any, configured: int | None) -> int:
    """The mask token id: ``decoding.mask_token_id`` if set, else the tokenizer's ``<|mask|>``."""
    if configured is not None:
        return int(configured)
    for cand in (getattr(tokenizer, "mask_token_id", None), tokenizer.convert_tokens_to_ids(REFUSION_MASK_TOKEN)):
        if isinstance(cand, int) and cand != getattr(tokenizer, "unk_token_id", None):
            return cand
    raise ConfigError([f"the tokenizer has no {REFUSION_MASK_TOKEN} token: set decoding.mask_token_id in the "
                       "model YAML (151670 for GSAI-ML/ReFusion)"])


def refusion_eos_ids(tokenizer: Any, settings: ReFusionSettings, every_eos: Collection[int]) -> frozenset[int]:
    """The ids that end an answer: the tokenizer's ``eos_token_id`` (the official code's one EOS) plus
    ``eos_token_ids``; ``stop_on_every_eos`` adds every EOS id the tokenizer and model configs name."""
    ids = {int(t) for t in settings.eos_token_ids}
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        ids.add(int(tokenizer.eos_token_id))
    if settings.stop_on_every_eos or not ids:
        ids |= {int(t) for t in every_eos}
    return frozenset(ids)




def build_decoder(cfg: ModelConfig, model: Any, tokenizer: Any, device: str, max_new_tokens: int) -> ReFusionDecoder:
    """A ReFusion decoder over loaded weights (ReFusion loads as a Qwen3); an autoregressive one renders and
    meters for it."""
    text = autoregressive.build_decoder(cfg, model, tokenizer, device, max_new_tokens)
    return ReFusionDecoder(model, tokenizer, settings_from(dict(cfg.decoding)), max_new_tokens=max_new_tokens,
                           device=device, text=text)


FAMILY = FamilyPlugin("refusion", build_decoder, check=check)
"""ReFusion: weights load as a Qwen3 (the shared loader); slot diffusion with a causal verifier."""
