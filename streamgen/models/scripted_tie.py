"""The near-tie scripted model: a controlled bfloat16-style flip between verify and decode, by design.

A causal scripted model (``streamgen.models.scripted``; ``configs/models/scripted-ar-neartie.yaml``) whose
answer is ``fixed[:T]``, then a *branch* token at answer position ``T``, then a 3-token tail that
depends only on the branch token in place, then EOS. With ``r`` the rendered request's byte length:

- ``r`` odd: the branch token is ``Y``, clearly (probability ``DEFAULT_PROB``).
- ``r`` even: ``X`` and ``Y`` tie up to one float32 spacing, and a **seam** decides which side: in a
  forward fed one token (a decode step) ``X`` is one spacing above ``Y``; in a forward fed several (a
  prefill or a verify pass) ``Y`` is one spacing above ``X``. That is the shape of the flip bfloat16
  kernels cause, made exact: the margin is 1 spacing either way.
- after ``Y`` the tail is ``TAIL_Y``, after anything else ``TAIL_X``.

So for a two-segment request whose first prefix has odd ``r`` and whose complete request has even ``r``:
the draft (written for the prefix) holds ``Y`` and ``TAIL_Y``; the base run decodes ``X`` at ``T`` (a
decode step) and then ``TAIL_X``; the final verify pass prefers ``Y`` by one spacing, so plain greedy
keeps the whole draft — the stream follows the draft branch. ``tie_guard`` ≥ 1 refuses ``Y`` (margin
1 ≤ guard), a one-token forward picks ``X``, and the stream answer equals the base answer.
"""

from __future__ import annotations

import math

import torch

from streamgen.models.scripted import (
    DEFAULT_PROB,
    Script,
    ScriptedLM,
    _vocab_size,
    answer_start,
    pool_tokens,
    request_bytes,
)

NEAR_TIE = "neartie"  # the model YAML's path
TIE_AT = 2  # answer position of the branch token (> 0: the base run decodes it in a one-token forward)
TIE_PROB = 0.45  # each of X and Y at a tie


def branch_tokens() -> tuple[int, int]:
    """(X, Y): the decode step's and the verify pass's choice at a tie."""
    pool = pool_tokens()
    return pool[10], pool[11]


def tail(branch: int) -> tuple[int, ...]:
    """The 3 content tokens after the branch token ``branch``."""
    pool = pool_tokens()
    return tuple(pool[30:33]) if branch == branch_tokens()[1] else tuple(pool[20:23])


def is_tie(r: int) -> bool:
    """A request of ``r`` bytes puts X and Y within one spacing of each other."""
    return r % 2 == 0


def answer(r: int, *, one_token_forwards: bool) -> list[int]:
    """The answer (content, no EOS) a run decoding position ``TIE_AT`` in a one-token forward (True) or a
    multi-token one (False) produces for a request of ``r`` bytes."""
    x, y = branch_tokens()
    branch = x if is_tie(r) and one_token_forwards else y
    return [pool_tokens()[j] for j in range(TIE_AT)] + [branch, *tail(branch)]


class NearTieLM(ScriptedLM):
    """The near-tie model (module docstring): a :class:`ScriptedLM` with its own rows."""

    def __init__(self, mask_token_id: int) -> None:
        super().__init__(Script(NEAR_TIE, length=TIE_AT + 4), bidirectional=False, mask_token_id=mask_token_id)

    def _row_logits(self, past: torch.Tensor | None, fed: torch.Tensor, b: int) -> torch.Tensor:
        pairs = fed[b, 0] if past is None else torch.cat([past[b, 0], fed[b, 0]])
        by_pos = {int(p): int(t) for t, p in pairs.tolist()}
        context: list[int] = []
        while len(context) in by_pos:  # the contiguous run of positions from 0
            context.append(by_pos[len(context)])
        start = answer_start(context)
        r = request_bytes(context[:start])
        multi = fed.shape[2] > 1
        return torch.stack([self._row(int(q) + 1 - start, r, by_pos, start, multi) for _, q in fed[b, 0].tolist()])

    def _row(self, j: int, r: int, by_pos: dict[int, int], start: int, multi: bool) -> torch.Tensor:
        vocab, pool = _vocab_size(), pool_tokens()
        x, y = branch_tokens()
        if j == TIE_AT and is_tie(r):
            row = torch.full((vocab,), math.log((1 - 2 * TIE_PROB) / (vocab - 3)))
            top = torch.tensor(math.log(TIE_PROB))
            below = torch.nextafter(top, torch.tensor(-math.inf))  # one float32 spacing under
            row[x], row[y] = (below, top) if multi else (top, below)
            row[self.mask_id] = float("-inf")
            return row
        if j < TIE_AT:
            token = pool[max(j, 0)]
        elif j == TIE_AT:
            token = y
        else:
            rest = [*tail(by_pos.get(start + TIE_AT, x)), self.eos_id]
            token = rest[min(j - TIE_AT - 1, len(rest) - 1)]
        row = torch.full((vocab,), math.log((1 - DEFAULT_PROB) / (vocab - 2)))
        row[token] = math.log(DEFAULT_PROB)
        row[self.mask_id] = float("-inf")
        return row


def near_tie_model(mask_token_id: int) -> NearTieLM:
    """The near-tie scripted model, in eval mode."""
    return NearTieLM(mask_token_id).eval()
