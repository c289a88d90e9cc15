"""Scripted models: tiny torch modules whose answers and probabilities are designed, not trained.

Random-weight models give no draft token a probability above a few percent, so they never keep a
draft; real small models rarely end a short answer. A scripted model makes every path of the stream
procedure reachable and its cost computable by hand (docs/design.md, 'Vocabulary'): the answer to a request is a
designed token sequence ``answer(r)`` ending in EOS, where ``r`` is the rendered request's length in
bytes, and the model puts probability ``prob(j)`` on ``answer(r)[j]`` at answer position ``j`` (the
rest spread evenly over the other tokens; the mask token always gets 0).

What a position predicts depends only on the request and the position, never on the answer tokens
already in place, so the model is exactly self-consistent:

- **causal** (family ``autoregressive`` and ``refusion``): logits at position ``q`` predict answer
  position ``q + 1 - P`` (``P`` = where the answer starts); a mask token at an answer position
  predicts that position itself (ReFusion's plan pass). Keys/values are the token ids and positions,
  kept in the transformers cache the decoders pass, so cache reuse, rollback and ReFusion's
  generation-order KV all work as with a real model.
- **bidirectional** (family ``bidirectional``): LLaDA style, position ``P + j`` predicts answer
  position ``j`` (no shift), whatever sits in the buffer; Dream style (``shifted``), position
  ``P + j - 1`` does (the decoder's one-position shift brings it back to ``P + j``).
- **block diffusion** (family ``diffusion_gemma``): the encoder half writes (token, position) pairs
  into the cache; the decoder half's canvas position ``P + j`` predicts answer position ``j`` (no
  shift), whatever the canvas holds, reading the request from the cache.

Behaviours (``SCRIPTS``; the model YAML names one as ``source: scripted``, ``path: <behaviour>``):
``constant`` the same answer for every request; ``lastsegment`` every token depends on ``r``, so a
draft written before the last segment loses its first token (unless that segment's byte length is a
multiple of ``len(POOL)``); ``prefix`` ``k`` fixed tokens, then a tail that depends on ``r``;
``calibrated`` the constant answer with set probabilities ``probs`` per position.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

import torch

from streamgen.config import ConfigError
from streamgen.models.tokenizers import tiny_tokenizer

ASSISTANT_HEADER = "<|im_start|>assistant\n"  # the tiny tokenizer's ChatML generation prompt
DEFAULT_PROB = 0.999


@dataclass(frozen=True)
class Script:
    """One behaviour: ``length`` content tokens then EOS; ``k`` fixed leading tokens (``prefix``);
    ``probs[j]`` the probability of answer token ``j`` (``calibrated``; others get ``DEFAULT_PROB``)."""

    behaviour: str
    length: int = 6
    k: int = 0
    probs: tuple[float, ...] = ()
    text: str = ""  # set: the answer is this text's tokens, whatever the request (``length`` unused)

    def content(self, request_bytes: int) -> list[int]:
        """The answer's content tokens (EOS excluded) for a request of ``request_bytes`` bytes."""
        if self.text:
            return text_tokens(self.text)
        pool, r = pool_tokens(), request_bytes
        fixed = [pool[j] for j in range(self.length)]
        moving = [pool[(r + j) % len(pool)] for j in range(self.length)]
        if self.behaviour in ("constant", "calibrated"):
            return fixed
        if self.behaviour == "lastsegment":
            return moving
        return fixed[: self.k] + moving[: self.length - self.k]  # prefix

    def prob(self, j: int) -> float:
        """Set probabilities, else ``DEFAULT_PROB`` falling by 1e-4 per position (to 0.989 at 100), so
        an earlier position is always strictly more confident: diffusion decoders then pick the
        leftmost of otherwise tied slots or positions, whatever the float rounding of the softmax."""
        return self.probs[j] if j < len(self.probs) else DEFAULT_PROB - 1e-4 * min(j, 100)


SCRIPTS: dict[str, Script] = {
    "constant": Script("constant"),
    "lastsegment": Script("lastsegment"),
    "prefix": Script("prefix", k=3),
    "calibrated": Script("calibrated", probs=(0.99, 0.95, 0.8, 0.6, 0.3, 0.9, 0.97)),
}
"""behaviour → its script (tests derive expected counts from these fields)."""


@functools.lru_cache(maxsize=1)
def pool_tokens() -> tuple[int, ...]:
    """Answer tokens: the tiny tokenizer's purely alphabetic tokens, by id (193 of them)."""
    tok = tiny_tokenizer()
    ids = sorted(i for i in tok.get_vocab().values() if i >= len(tok.all_special_ids))
    return tuple(i for i in ids if i != len(tok) - 1 and re.fullmatch(r"[A-Za-z]+", tok.decode([i])))


@functools.lru_cache(maxsize=8)
def text_tokens(text: str) -> list[int]:
    """``text`` in the tiny tokenizer's tokens (a :class:`Script` with ``text``: e.g. an answer that runs on
    into the next few-shot question, as a base model does, for the stop-string tests)."""
    return list(tiny_tokenizer()(text, add_special_tokens=False)["input_ids"])


@functools.lru_cache(maxsize=1)
def _token_bytes() -> tuple[int, ...]:
    """Byte length of every token (byte-level BPE: one symbol per byte; specials by their text)."""
    tok = tiny_tokenizer()
    return tuple(len(tok.convert_ids_to_tokens(i)) for i in range(len(tok)))


@functools.lru_cache(maxsize=1)
def _vocab_size() -> int:
    return len(tiny_tokenizer())  # built once: a fresh tokenizer per logits row cost ~5 ms each


@functools.lru_cache(maxsize=1)
def _header() -> tuple[int, ...]:
    return tuple(tiny_tokenizer()(ASSISTANT_HEADER, add_special_tokens=False)["input_ids"])


def request_bytes(request: list[int]) -> int:
    """``r``: the rendered request's length in bytes (template included)."""
    sizes = _token_bytes()
    return sum(sizes[t] for t in request)


def answer_start(tokens: list[int]) -> int:
    """``P``: the position right after the last assistant header (the answer's first position)."""
    h = _header()
    for end in range(len(tokens), len(h) - 1, -1):
        if tuple(tokens[end - len(h):end]) == h:
            return end
    raise ValueError("scripted model: no assistant header in the context (render with the tiny ChatML template)")


@dataclass(frozen=True)
class ScriptedConfig:
    """What decoders read from ``model.config``."""

    model_type: str
    vocab_size: int
    eos_token_id: int
    max_position_embeddings: int = 4096


@dataclass
class _Output:
    logits: torch.Tensor


class ScriptedLM(torch.nn.Module):
    """A scripted causal or bidirectional LM (see the module docstring); one call = one forward."""

    def __init__(self, script: Script, *, bidirectional: bool, mask_token_id: int, shifted: bool = False) -> None:
        super().__init__()
        tok = tiny_tokenizer()
        self.script, self.bidirectional, self.mask_id = script, bidirectional, int(mask_token_id)
        self.shifted = bidirectional and shifted
        self.eos_id = int(tok.eos_token_id)
        self.vocab = max(len(tok), self.mask_id + 1)  # a mask id past the tokenizer's: never produced from text
        kind = ("dream" if self.shifted else "llada") if bidirectional else "scripted"
        self.config = ScriptedConfig(kind, self.vocab, self.eos_id)
        self.generation_config = None
        self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)  # carries device and dtype

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None, cache: Any = None,
                use_cache: bool = False, logits_to_keep: int = 0, attention_mask: Any = None,
                **_: Any) -> _Output:
        batch, n = input_ids.shape
        past = _cached(cache, batch)
        if position_ids is None:
            start = past.shape[2] if past is not None else 0
            position_ids = torch.arange(start, start + n, device=input_ids.device).expand(batch, n)
        fed = torch.stack([input_ids.float(), position_ids.float()], -1)[:, None]  # (batch, 1, n, 2)
        if cache is not None and use_cache:
            cache.update(fed, fed, 0)
        rows = [self._row_logits(past, fed, b) for b in range(batch)]
        logits = torch.stack(rows).to(input_ids.device)
        return _Output(logits[:, -logits_to_keep:] if logits_to_keep else logits)

    def _row_logits(self, past: torch.Tensor | None, fed: torch.Tensor, b: int) -> torch.Tensor:
        pairs = fed[b, 0] if past is None else torch.cat([past[b, 0], fed[b, 0]])
        start, answer = _scripted_answer(self.script, pairs, self.eos_id)
        out = []
        for t, q in fed[b, 0].tolist():
            if self.bidirectional:
                unshifted = not self.shifted
            else:
                unshifted = int(t) == self.mask_id and q >= start
            j = int(q) - start + (0 if unshifted else 1)
            out.append(_distribution(self.script, answer, j, self.mask_id, self.vocab))
        return torch.stack(out)


def _scripted_answer(script: Script, pairs: torch.Tensor, eos_id: int) -> tuple[int, list[int]]:
    """``(P, answer(r) + EOS)`` for the context whose (token, position) ``pairs`` are known: the contiguous
    run of positions from 0 is the context, its last assistant header ends the request."""
    by_pos = {int(p): int(t) for t, p in pairs.tolist()}
    prefix: list[int] = []
    while len(prefix) in by_pos:
        prefix.append(by_pos[len(prefix)])
    start = answer_start(prefix)
    return start, script.content(request_bytes(prefix[:start])) + [eos_id]


def _distribution(script: Script, answer: list[int], j: int, mask_id: int, vocab: int | None = None) -> torch.Tensor:
    """Log-probabilities at answer position ``j``: ``prob(j)`` on the scripted token, the rest evenly
    (mask: 0); past the answer's end, EOS."""
    j = max(j, 0)
    vocab = vocab or _vocab_size()
    token = answer[j] if j < len(answer) else answer[-1]
    p = script.prob(j)
    row = torch.full((vocab,), math.log((1 - p) / (vocab - 2)))
    row[token] = math.log(p)
    row[mask_id] = float("-inf")
    return row


def _cached(cache: Any, batch: int) -> torch.Tensor | None:
    layers = getattr(cache, "layers", None) or ()
    if not layers or getattr(layers[0], "keys", None) is None or layers[0].keys.numel() == 0:
        return None
    keys = layers[0].keys
    return keys.expand(batch, -1, -1, -1) if keys.shape[0] != batch else keys


def scripted_model(behaviour: str, *, bidirectional: bool, mask_token_id: int, shifted: bool = False) -> ScriptedLM:
    """The scripted model named ``behaviour`` (a key of :data:`SCRIPTS`), in eval mode; ``shifted``: a
    Dream-style bidirectional model (logits at ``i - 1`` predict position ``i``)."""
    return ScriptedLM(_script(behaviour), bidirectional=bidirectional, mask_token_id=mask_token_id,
                      shifted=shifted).eval()


def _script(behaviour: str) -> Script:
    if behaviour not in SCRIPTS:
        raise ConfigError([f"scripted behaviour {behaviour!r} unknown: set path= to one of {sorted(SCRIPTS)}"])
    return SCRIPTS[behaviour]
