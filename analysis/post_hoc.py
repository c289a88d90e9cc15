"""The post-hoc typing evaluation over arrays: every replayed example under every rate and policy at once.

:func:`streamgen.policies.evaluate` replays one example's steps under one policy; at study scale
(10^5 examples × rates × policies) those are millions of Python calls. Here one *lane* is one
(example, rate); a policy's schedule rule advances every lane one step per iteration with numpy, so
the loop runs as many times as the longest example has steps, not once per step of every example.
Each operation is the one :mod:`streamgen.policies` performs, in the same order and in float64, so
the figures equal ``evaluate``'s exactly (``tests/test_post_hoc.py`` checks this against the
per-example evaluator on generated timelines). Arrivals must not decrease within an example (a
prefix never arrives before a shorter one; :func:`post_hoc_lanes` checks it).

Steps are flat arrays in example order (an example's steps consecutive, in step order); ``offsets``
gives where each example starts (length ``examples + 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streamgen.policies import Policy

__all__ = ["LaneOutcome", "StepColumns", "arrivals_at", "post_hoc_lanes"]

_NULL = -1  # request_tokens / cached_tokens not recorded


@dataclass(frozen=True)
class StepColumns:
    """The recorded steps, flat, with ``offsets[e]:offsets[e + 1]`` the steps of example ``e``."""

    offsets: np.ndarray  # int64, examples + 1
    wall_s: np.ndarray  # float64
    forwards: np.ndarray  # int64 (the rest too)
    tokens_fed: np.ndarray
    draft_tokens_in: np.ndarray
    accepted_tokens: np.ndarray
    generated_tokens: np.ndarray
    cached_tokens: np.ndarray  # _NULL where not recorded
    prefix_chars: np.ndarray
    pasted_chars: np.ndarray
    sentence_ends: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclass(frozen=True)
class LaneOutcome:
    """Per lane: what :class:`~streamgen.policies.PolicyOutcome` says, and ``failed`` where the policy
    changes work and the lane has no cost model (``evaluate`` raises ValueError there)."""

    wait_s: np.ndarray
    backlog_s: np.ndarray
    keeps_up: np.ndarray
    skipped: np.ndarray
    modelled: np.ndarray
    failed: np.ndarray


def arrivals_at(steps: StepColumns, rate: float, sentence_pause_s: float, paste_code: bool) -> np.ndarray:
    """Each step's arrival under one typing model (:meth:`streamgen.timeline.TypingModel.arrival`)."""
    typed = steps.prefix_chars - (steps.pasted_chars if paste_code else 0)
    return typed / rate + sentence_pause_s * steps.sentence_ends


def post_hoc_lanes(steps: StepColumns, arrivals: np.ndarray, lane_example: np.ndarray, policy: Policy,
                   a_s: np.ndarray, b_s: np.ndarray) -> LaneOutcome:
    """Replay each lane's example under ``policy`` on its arrivals.

    ``arrivals``: flat, one per (lane, step) in lane order, each lane's block as long as its
    example's steps; ``lane_example``: the example of each lane; ``a_s``/``b_s``: the lane's cost
    model (NaN: none fitted).
    """
    n = steps.lengths[lane_example]
    if np.any(n < 1):
        raise ValueError("an example with no steps cannot be evaluated")
    lanes = len(lane_example)
    base = steps.offsets[lane_example]  # flat index of the lane's step 1 in the step columns
    at = np.concatenate([[0], np.cumsum(n)[:-1]])  # flat index of the lane's step 1 in ``arrivals``
    down = np.diff(arrivals) < 0
    down[at[1:] - 1] = False  # from one lane's last step to the next lane's first
    if down.any():
        raise ValueError("arrivals decrease within an example: a prefix arrived before a shorter one")
    prefix_tokens = np.maximum(0, steps.tokens_fed - steps.draft_tokens_in - (steps.forwards - 1))
    cum = np.concatenate([[0], np.cumsum(prefix_tokens)])  # cum[i]: prefix tokens of flat steps < i
    # Lanes in order of decreasing step count, so the lanes with steps left stay within a leading
    # slice that shrinks as the short ones finish (a latest lane may finish early: it then idles).
    order = np.argsort(-n, kind="stable")
    n, base, at = n[order], base[order], at[order]
    a_s, b_s = a_s[order], b_s[order]
    has_cost = ~np.isnan(a_s)

    last = np.zeros(lanes, np.int64)  # the last step run (0: none)
    free = np.zeros(lanes)
    draft_len = np.zeros(lanes, np.int64)
    chain_modelled = np.zeros(lanes, bool)
    ran = np.zeros(lanes, np.int64)
    start_final = np.zeros(lanes)
    keeps = np.ones(lanes, bool)
    modelled = np.zeros(lanes, bool)
    failed = np.zeros(lanes, bool)
    cap = policy.cap_tokens
    m = lanes  # lanes[:m] hold every lane with steps left
    while m:
        lv = slice(0, m)
        nn, fr, arr0 = n[lv], free[lv], at[lv]
        act = last[lv] < nn  # a lane that has run its last step (latest ends early) stays as it is
        lst = np.minimum(last[lv], nn - 1)  # (its indices kept inside its own steps)
        if policy.name == "latest":
            now = np.maximum(fr, arrivals[arr0 + lst])  # idle until the next segment, if none has arrived
            j = lst + 1
            while True:  # the newest prefix arrived by ``now`` (arrivals do not decrease)
                more = j < nn
                more[more] = arrivals[arr0[more] + j[more]] <= now[more]
                if not more.any():
                    break
                j = j + more
            start = now
        else:
            j = np.minimum((lst // policy.k + 1) * policy.k, nn) if policy.name == "every_k" else lst + 1
            start = np.maximum(fr, arrivals[arr0 + j - 1])
        s = base[lv] + j - 1  # the step's flat index in the step columns
        chained = (lst == j - 1) & ~chain_modelled[lv] & (cap is None)
        draft_in = np.where(chained, steps.draft_tokens_in[s], draft_len[lv])
        after = base[lv] + lst  # step last + 1
        here_c, after_c = steps.cached_tokens[s], steps.cached_tokens[after]
        exact = (here_c != _NULL) & (after_c != _NULL)
        extra = np.where(j == lst + 1, 0, np.where(exact, here_c - after_c, cum[s] - cum[after]))
        acc, gen, fw, fed = (steps.accepted_tokens[s], steps.generated_tokens[s], steps.forwards[s],
                             steps.tokens_fed[s])
        accepted = np.minimum(acc, draft_in)
        answer = acc + gen
        if cap is not None:
            answer = np.where(j == nn, answer, np.minimum(answer, cap))
        generated = np.maximum(0, answer - accepted)
        forwards = np.maximum(1, fw + np.maximum(0, generated - 1) - np.maximum(0, gen - 1))
        tokens = fed + extra + (draft_in - steps.draft_tokens_in[s]) + (forwards - fw)
        changed = (forwards != fw) | (tokens != fed)
        cost = np.where(changed, a_s[lv] * forwards + b_s[lv] * tokens, steps.wall_s[s])
        end = start + cost
        # keeps up: each step before the last ends by the arrival of the step the policy planned next
        planned = np.minimum((j // policy.k + 1) * policy.k, nn) if policy.name == "every_k" else j + 1
        ok = (j >= nn) | (end <= arrivals[arr0 + np.minimum(planned, nn) - 1])
        changed &= act
        failed[lv] |= changed & ~has_cost[lv]
        keeps[lv] &= ok | ~act
        modelled[lv] |= changed
        ran[lv] += act
        start_final[lv] = np.where(act, start, start_final[lv])
        free[lv] = np.where(act, end, fr)
        draft_len[lv] = np.where(act, accepted + generated, draft_len[lv])
        chain_modelled[lv] = np.where(act, changed, chain_modelled[lv])
        last[lv] = np.where(act, j, last[lv])
        running = np.flatnonzero(last[lv] < nn)
        m = int(running[-1]) + 1 if running.size else 0
    final_arrival = arrivals[at + n - 1]
    skipped = n - ran if policy.name == "latest" else np.zeros(lanes, np.int64)
    back = np.empty(lanes, np.int64)
    back[order] = np.arange(lanes)  # to the caller's lane order
    return LaneOutcome((free - final_arrival)[back], (start_final - final_arrival)[back],
                       (keeps & (skipped == 0))[back], skipped[back], modelled[back], failed[back])


def lane_blocks(steps: StepColumns, examples: Sequence[int] | np.ndarray) -> np.ndarray:
    """Flat step indices of the given examples' steps, lane after lane (for gathering arrivals)."""
    ex = np.asarray(examples, np.int64)
    n = steps.lengths[ex]
    first = np.repeat(steps.offsets[ex] - np.concatenate([[0], np.cumsum(n)[:-1]]), n)
    return first + np.arange(int(n.sum()))
