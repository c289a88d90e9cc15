"""KV-cached greedy decoding, one-forward draft verification and cache rollback (transformers 5).

Accounting (docs/design.md, 'Accounting'; docs/accounting.md): the base run costs 1 prefill forward (which yields the
first answer token) + 1 forward per further token. A stream step costs 1 verify forward over
(request tokens not already cached + draft), which yields the accepted prefix AND the next token,
+ 1 forward per further token; a fully accepted draft that ends in EOS (or at a benchmark's stop string,
``streamgen.decoding.stops``) costs exactly 1 forward.

The KV cache is a :class:`transformers.DynamicCache` built *without* the model config, so every layer
(Gemma-3's sliding-window layers included) keeps full-length keys and values and can be rolled back
to any length; the attention masks still apply the sliding window (docs/traps.md).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from streamgen.acceptance_rules import AcceptanceRule
from streamgen.config import ConfigError, ModelConfig
from streamgen.decoding.base import Family, Generation, StepResult, common_prefix_length
from streamgen.decoding.family import FamilyPlugin
from streamgen.decoding.host import to_host
from streamgen.decoding.meter import ForwardMeter, device_synchronizer
from streamgen.decoding.numerics import margin_in_spacings
from streamgen.decoding.stops import StopStrings
from streamgen.decoding.verification import Verification, accepted_length, cut_draft, draft_is_complete
from streamgen.requests.chat import Message, render_plain

log = logging.getLogger(__name__)


class RequestTooLongError(ConfigError):
    """The rendered request plus the answer budget does not fit the model's context."""


class CacheRollbackError(RuntimeError):
    """A cache layer cannot be rolled back to the requested length (internal invariant broken)."""


# --------------------------------------------------------------------------------------------
# Cache helpers
# --------------------------------------------------------------------------------------------


def new_cache() -> Any:
    """A full-length DynamicCache (no config: sliding-window layers keep everything, so rollback works)."""
    from transformers import DynamicCache

    return DynamicCache()


def rollback(cache: Any, keep_tokens: int) -> None:
    """Drop cached positions so that exactly the first ``keep_tokens`` remain.

    transformers 5's ``crop`` takes only a negative count (``crop(-k)`` removes k tokens); a positive
    value raises, and ``crop(0)`` must not be relied on. Sliding-window layers past their window can
    only be rolled back when they recorded their past; otherwise this raises instead of corrupting.
    """
    length = cache.get_seq_length()
    if not 0 <= keep_tokens <= length:
        raise CacheRollbackError(f"cannot keep {keep_tokens} tokens of a cache holding {length}")
    remove = length - keep_tokens
    if remove == 0:
        return
    for layer in getattr(cache, "layers", ()):
        window = getattr(layer, "sliding_window", None)
        if window is not None and length >= window and not getattr(layer, "record_past", False):
            raise CacheRollbackError(
                "a sliding-window cache layer past its window cannot be rolled back: build the cache "
                "with streamgen.families.autoregressive.decoder.new_cache() (full layers) or call "
                "cache.activate_past_recording() before the forward"
            )
    cache.crop(-remove)
    if cache.get_seq_length() != keep_tokens:
        raise CacheRollbackError(f"rollback left {cache.get_seq_length()} tokens, expected {keep_tokens}")


@dataclass
class KVState:
    """A KV cache and the token ids it covers (``cache.get_seq_length() == len(ids)`` always)."""

    cache: Any = field(default_factory=new_cache)
    ids: list[int] = field(default_factory=list)

    def rollback(self, keep_tokens: int) -> None:
        rollback(self.cache, keep_tokens)
        del self.ids[keep_tokens:]


# --------------------------------------------------------------------------------------------
# The decoder
# --------------------------------------------------------------------------------------------


class AutoregressiveDecoder:
    """Greedy KV-cached decoding for a transformers causal LM, behind the :class:`Decoder` protocol."""

    family: Family = "autoregressive"
    min_residual_forwards = 1

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 256, device: str = "cpu",
                 max_context: int | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                 eos_token_ids: Sequence[int] | None = None, meter: ForwardMeter | None = None,
                 system_prompt: str | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.device = torch.device(device)
        self.max_context = int(max_context or getattr(model.config, "max_position_embeddings", 0) or 0) or None
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.eos_token_ids = frozenset(eos_token_ids if eos_token_ids is not None else _eos_ids(model, tokenizer))
        self.meter = meter or ForwardMeter(sync=device_synchronizer(device))
        self.system_prompt = system_prompt  # prepended when the messages carry no system turn
        # the dtype the forward computes logits in (margins are in its spacing; docs/numerics.md)
        self.logits_dtype = next(iter(model.parameters()), torch.zeros(())).dtype
        self.stops = StopStrings()  # none: answers end at EOS or the budget (with_stop_strings)

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return self.stops.strings

    def with_stop_strings(self, strings: Sequence[str]) -> AutoregressiveDecoder:
        """This decoder (same weights, settings and meter) ending every answer, base and stream alike, after
        the token that completes one of ``strings`` (``streamgen.decoding.stops``; docs/accounting.md)."""
        if tuple(s for s in strings if s) == self.stop_strings:
            return self
        twin = copy.copy(self)
        twin.stops = StopStrings(strings, twin.decode_raw)
        return twin

    # -- request rendering ---------------------------------------------------------------------

    def render(self, messages: Sequence[Message]) -> list[int]:
        """Token ids of the chat-templated request, ending with the assistant header (without a chat
        template: BOS + :func:`streamgen.requests.chat.render_plain`)."""
        if self.system_prompt and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        # base models have no template: a plain transcript after the BOS token (streamgen.requests.chat.render_plain)
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return [*([bos] if bos is not None else []),
                *self.tokenizer(render_plain(messages), add_special_tokens=False)["input_ids"]]

    def count_request_tokens(self, messages: Sequence[Message]) -> int:
        return len(self.render(messages))

    def decode_text(self, token_ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=True))

    def decode_raw(self, token_ids: Sequence[int]) -> str:
        """The text with special tokens kept: what stop strings are matched on, as lm-eval's stop criteria
        decode (a special token such as ``<|im_start|>`` in ``until`` stops there too)."""
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=False))

    def check_fits(self, request_tokens: int, answer_tokens: int | None = None) -> None:
        """Raise :class:`RequestTooLongError` if request + answer budget (a diffusion family: its answer
        buffer, ``answer_tokens``) exceed the context."""
        answer = self.max_new_tokens if answer_tokens is None else int(answer_tokens)
        if self.max_context and request_tokens + answer > self.max_context:
            raise RequestTooLongError(
                [f"the request is {request_tokens} tokens and the answer budget {answer}, "
                 f"but the model's context is {self.max_context}: use a shorter request, lower "
                 "max_new_tokens (a diffusion model: decoding.gen_length), or a model with more context"],
                "request too long")

    # -- model calls ---------------------------------------------------------------------------

    def forward(self, state: KVState, feed: Sequence[int], keep_logits: int, kind: str) -> torch.Tensor:
        """ONE metered model call feeding ``feed`` on top of ``state``; logits of the last positions."""
        input_ids = torch.tensor([list(feed)], dtype=torch.long, device=self.device)
        with self.meter.call(kind, len(feed)):
            out = self.model(input_ids=input_ids, cache=state.cache, use_cache=True, logits_to_keep=keep_logits)
        state.ids.extend(int(t) for t in feed)
        return out.logits[0].float()

    def continue_greedy(self, state: KVState, answer: list[int], margins: list[float]) -> list[int]:
        """Decode one token per forward after ``answer`` (whose last token is not yet cached); each
        token's top-2 margin (dtype spacings) is appended to ``margins``."""
        while not self.has_ended(answer):
            logits = self.forward(state, answer[-1:], 1, "decode")
            host = rows_to_host(logits[-1:], (), self.logits_dtype)
            answer.append(host.argmax[0])
            margins.extend(host.margins)
        return answer

    def has_ended(self, answer: Sequence[int]) -> bool:
        """Whether ``answer`` (non-empty, with no stop string before its last token) is complete: it ends
        in EOS, fills the budget, or its last token completes a stop string."""
        return answer[-1] in self.eos_token_ids or len(answer) >= self.max_new_tokens or self.stops.ends(answer)

    def truncate_draft(self, draft: Sequence[int]) -> list[int]:
        """The draft cut after its first EOS, to the answer budget and after the token completing its first
        stop string (an answer never extends past them)."""
        cut = cut_draft(draft, self.eos_token_ids, self.max_new_tokens, keep_eos=True)
        stop = self.stops.length(cut)
        return cut if stop is None else cut[:stop]

    def content(self, draft: Sequence[int]) -> list[int]:
        """The draft positions a verify pass scores (the name the diffusion families use: the §6.5 probe)."""
        return self.truncate_draft(draft)

    @torch.inference_mode()
    def score(self, messages: Sequence[Message], draft: Sequence[int]) -> tuple[Verification, KVState]:
        """ONE causal verify forward over request + ``draft`` in a fresh cache (no stream state): row j is
        the distribution before draft[j]. What a stream step's verify computes, for the §6.5 probe."""
        request = self.render(messages)
        self.check_fits(len(request), len(draft))
        state = KVState()
        logits = self.forward(state, [*request, *draft], len(draft) + 1, "verify")
        return rows_to_host(logits, draft, self.logits_dtype).verification(len(draft)), state

    def is_finished(self, answer: Sequence[int]) -> bool:
        return bool(answer) and answer[-1] in self.eos_token_ids

    def _generation(self, answer: list[int], span: Any, margins: Sequence[float]) -> Generation:
        finished = self.is_finished(answer)
        text = self.decode_text(answer[:-1] if finished else answer)  # EOS is never part of the text
        stopped = not finished and self.stops.ends(answer)
        return Generation(tuple(answer), text, finished, span.wall_s, span.meter, tuple(margins[: len(answer)]),
                          stopped)

    # -- Decoder protocol ----------------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, messages: Sequence[Message]) -> Generation:
        """Base run: prefill the whole request in a fresh cache, then greedy decode (no reuse)."""
        with self.meter.span() as span:  # rendering counts: the user waits through it too
            request = self.render(messages)
            self.check_fits(len(request))
            state = KVState()
            logits = self.forward(state, request, 1, "prefill")
            host = rows_to_host(logits[-1:], (), self.logits_dtype)
            margins = host.margins
            answer = self.continue_greedy(state, host.argmax, margins)
        return self._generation(answer, span, margins)

    def open_stream(self) -> AutoregressiveSession:
        return AutoregressiveSession(self)

    def for_benchmark(self, benchmark: str) -> AutoregressiveDecoder:
        """No per-benchmark settings: the decoder itself."""
        del benchmark
        return self


class RowsOnHost(NamedTuple):
    """What a forward's logits rows are read for, as Python values (moved in one transfer)."""

    argmax: list[int]  # every row
    margins: list[float]  # every row: top-1 minus top-2 in dtype spacings (empty without a dtype)
    probs: list[float]  # draft position j < len(draft): row j's probability of draft[j]

    def verification(self, n: int) -> Verification:
        """The verification of an ``n``-token draft (rows 0..n-1)."""
        margins = tuple(self.margins[:n]) if self.margins else None
        return Verification(tuple(self.argmax[:n]), tuple(self.probs), margins)


def rows_to_host(logits: torch.Tensor, draft: Sequence[int], dtype: torch.dtype | None) -> RowsOnHost:
    """Every row's argmax (and, with the forward's ``dtype``, its top-2 margin in spacings of it) and the
    draft tokens' probabilities, in ONE device→host transfer, not one per row or token.

    Row j of ``logits`` is the distribution *before* draft[j]; rows past the draft (the bonus row) give
    argmax and margin only."""
    rows = logits[: len(draft)]
    idx = torch.tensor(list(draft), dtype=torch.long, device=rows.device)
    probs = torch.softmax(rows, dim=-1).gather(1, idx[:, None])[:, 0]
    top2 = logits.float().topk(2, dim=-1).values if dtype is not None else logits[:0, :2]
    top, first, second, picked = to_host(logits.argmax(-1), top2[:, 0], top2[:, 1], probs)
    margins = [margin_in_spacings(a, b, dtype) for a, b in zip(first, second, strict=True)] if dtype else []
    return RowsOnHost([int(t) for t in top], margins, picked)


def verification_from_logits(logits: torch.Tensor, draft: Sequence[int],
                             margins: Sequence[float] | None = None) -> Verification:
    """Per draft position j: the argmax and the draft token's probability, from logits row j (and its
    top-2 margin in dtype spacings, ``margins[j]``, when given).

    ``logits`` has ``len(draft) + 1`` rows; row j is the distribution *before* draft[j].
    """
    if not draft:
        return Verification((), (), () if margins is not None else None)
    host = rows_to_host(logits[: len(draft)], draft, None)
    return Verification(tuple(host.argmax), tuple(host.probs),
                        tuple(margins[: len(draft)]) if margins is not None else None)


class AutoregressiveSession:
    """One example's stream run: keeps the KV cache of (request + draft) across segment arrivals."""

    def __init__(self, decoder: AutoregressiveDecoder) -> None:
        self.decoder = decoder
        self.state = KVState()
        self.last_verification: Verification | None = None

    def _reuse_prefix(self, request: Sequence[int]) -> int:
        """Roll the cache back to its longest common prefix with ``request`` (at least 1 token fed)."""
        cached = common_prefix_length(request, self.state.ids)
        cached = min(cached, len(request) - 1)  # the last request token's logits predict draft[0]
        self.state.rollback(cached)
        return cached

    @torch.inference_mode()
    def step(self, messages: Sequence[Message], draft: Sequence[int], rule: AcceptanceRule) -> StepResult:
        dec = self.decoder
        with dec.meter.span() as span:  # the same kinds of work as the base run's span
            draft = dec.truncate_draft(draft)
            request = dec.render(messages)
            dec.check_fits(len(request))
            cached = self._reuse_prefix(request)
            feed = request[cached:] + draft
            logits = dec.forward(self.state, feed, len(draft) + 1, "verify" if draft else "prefill")
            host = rows_to_host(logits, draft, dec.logits_dtype)  # the forward's one transfer
            row_margins, verification = host.margins, host.verification(len(draft))
            accepted = accepted_length(draft, verification, rule)
            answer, margins = draft[:accepted], row_margins[:accepted]
            guarded = False
            if not draft_is_complete(draft, accepted, dec.eos_token_ids, dec.max_new_tokens,
                                     stop=dec.stops.length(draft)):
                guarded = bool(draft) and rule.guarded(row_margins[accepted])  # no draft: prefill decides
                self._next_token(request, answer, margins, host.argmax[accepted], row_margins[accepted], guarded)
                answer = dec.continue_greedy(self.state, answer, margins)
        self.last_verification = verification
        extra = {"cached_prefix_tokens": float(cached), "request_tokens": float(len(request)),
                 "verify_tokens_fed": float(len(feed)), "tie_guarded": float(guarded)}
        if verification.median_prob is not None:
            extra["verify_median_prob"] = verification.median_prob
        return StepResult(len(draft), accepted, len(answer) - accepted, dec._generation(answer, span, margins),
                          extra)

    def _next_token(self, request: Sequence[int], answer: list[int], margins: list[float], row_argmax: int,
                    row_margin: float, guarded: bool) -> None:
        """The token after the accepted run: the verify row's argmax (the bonus token), or, where the
        rule's tie guard covers that row's margin, a one-token forward's, as a decode step would choose
        it (one more forward; docs/numerics.md). Leaves the cache holding request + ``answer[:-1]``."""
        dec, keep = self.decoder, len(request) + len(answer)
        if not guarded:
            self.state.rollback(keep)
            answer.append(row_argmax)
            margins.append(row_margin)
            return
        self.state.rollback(keep - 1)  # re-feed the last accepted token (or the request's last) alone
        last = answer[-1] if answer else int(request[-1])
        logits = dec.forward(self.state, [last], 1, "decode")
        host = rows_to_host(logits[-1:], (), dec.logits_dtype)
        answer.append(host.argmax[0])
        margins.extend(host.margins)

    def close(self) -> None:
        self.state = KVState()


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, getattr(model.config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    if not ids:
        raise ConfigError(["the tokenizer and model define no EOS token: set eos_token on the tokenizer"])
    return ids


def require_chat_template(cfg: ModelConfig, tokenizer: Any) -> None:
    """Refuse a hub / local checkpoint whose tokenizer has no chat template unless its YAML says
    ``chat_template_required: false``: its requests would otherwise become a plain transcript without a
    word (the pre-flight says the same before a run: streamgen.models.checkpoint_tokens)."""
    if cfg.source in ("hub", "local") and cfg.chat_template_required and not getattr(tokenizer, "chat_template", None):
        raise ConfigError([f"model {cfg.name}: the tokenizer of {cfg.path} has no chat template; download the "
                           "instruct checkpoint's tokenizer files again, or set chat_template_required: false in "
                           f"configs/models/{cfg.name}.yaml for a base model"], "no chat template")


def build_decoder(cfg: ModelConfig, model: Any, tokenizer: Any, device: str,
                  max_new_tokens: int) -> AutoregressiveDecoder:
    """An autoregressive decoder over loaded weights, with ``cfg``'s context, chat template and system prompt."""
    require_chat_template(cfg, tokenizer)
    return AutoregressiveDecoder(model, tokenizer, max_new_tokens=max_new_tokens, device=device,
                                 max_context=cfg.max_context, chat_template_kwargs=cfg.chat_template_kwargs,
                                 system_prompt=cfg.system_prompt)


FAMILY = FamilyPlugin("autoregressive", build_decoder)
"""Autoregressive: any causal LM the shared loader reads; greedy decoding, one-forward verify."""
