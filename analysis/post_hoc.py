"""The post-hoc typing evaluation over arrays: every replayed example under every rate and policy at once.

:func:`streamgen.timing.policies.evaluate` replays one example's steps under one policy; at study scale
(10^5 examples × rates × policies) those are millions of Python calls. Here one *lane* is one
(example, rate); a policy's schedule rule advances every lane one step per iteration with numpy, so
the loop runs as many times as the longest example has steps, not once per step of every example.
Each operation is the one :mod:`streamgen.timing.policies` performs, in the same order and in float64, so
the figures equal ``evaluate``'s exactly (``tests/analysis/test_post_hoc.py`` checks this against the
per-example evaluator on generated timelines). Arrivals must not decrease within an example (a
prefix never arrives before a shorter one; :func:`post_hoc_lanes` checks it).

Steps are flat arrays in example order (an example's steps consecutive, in step order); ``offsets``
gives where each example starts (length ``examples + 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streamgen.timing.policies import Policy

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
    chars_deleted: np.ndarray | None = None  # > 0: the step rewrote earlier text (corrections); None: none did
    correction_keys: np.ndarray | None = None  # keystrokes spent on corrections up to each step, cumulative

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclass(frozen=True)
class LaneOutcome:
    """Per lane: what :class:`~streamgen.timing.policies.PolicyOutcome` says, and ``failed`` where the policy
    changes work and the lane has no cost model (``evaluate`` raises ValueError there)."""

    wait_s: np.ndarray
    backlog_s: np.ndarray
    keeps_up: np.ndarray
    skipped: np.ndarray
    modelled: np.ndarray
    failed: np.ndarray


def arrivals_at(steps: StepColumns, rate: float, sentence_pause_s: float, paste_code: bool) -> np.ndarray:
    """Each step's arrival under one typing model (:meth:`streamgen.timing.timeline.TypingModel.arrival`); a
    correction's keystrokes (backspaces and retyped characters) take typing time like any other."""
    typed = steps.prefix_chars - (steps.pasted_chars if paste_code else 0)
    if steps.correction_keys is not None:
        typed = typed + steps.correction_keys
    return typed / rate + sentence_pause_s * steps.sentence_ends


def _kept_after_rewrites(steps: StepColumns, after: np.ndarray, step_at: np.ndarray, cached_after: np.ndarray,
                         exact: np.ndarray) -> np.ndarray:
    """``skipped_request_tokens``'s corrections rule over arrays: where a step in ``after..step_at`` (flat,
    inclusive) deleted text and every one recorded its cached tokens, the fewest of them; else ``cached_after``."""
    if steps.chars_deleted is None or not (steps.chars_deleted > 0).any():
        return cached_after
    least, rewrote, recorded = cached_after.copy(), np.zeros(len(after), bool), exact.copy()
    for d in range(int((step_at - after).max(initial=0)) + 1):
        idx = np.minimum(after + d, step_at)
        inside = after + d <= step_at
        least = np.where(inside, np.minimum(least, steps.cached_tokens[idx]), least)
        rewrote |= inside & (steps.chars_deleted[idx] > 0)
        recorded &= ~inside | (steps.cached_tokens[idx] != _NULL)
    return np.where(rewrote & recorded, least, cached_after)


def post_hoc_lanes(steps: StepColumns, arrivals: np.ndarray, lane_example: np.ndarray, policy: Policy,
                   a_s: np.ndarray, b_s: np.ndarray) -> LaneOutcome:
    """Replay each lane's example under ``policy`` on its arrivals.

    ``arrivals``: flat, one per (lane, step) in lane order, each lane's block as long as its
    example's steps; ``lane_example``: the example of each lane; ``a_s``/``b_s``: the lane's cost
    model (NaN: none fitted).

    Names: lanes are sorted by decreasing step count, so the ``live`` ones (steps left) are the leading
    ``live_lanes``; in each round every live lane runs the step ``chosen`` by the policy after the
    ``last_done`` one; ``rec_*`` are that step's recorded facts, which the cost model rescales where
    the policy changed the draft the step verifies.
    """
    lane_steps = steps.lengths[lane_example]
    if np.any(lane_steps < 1):
        raise ValueError("an example with no steps cannot be evaluated")
    lanes = len(lane_example)
    first_step = steps.offsets[lane_example]  # flat index of the lane's step 1 in the step columns
    # flat index of the lane's step 1 in ``arrivals``
    first_arrival = np.concatenate([[0], np.cumsum(lane_steps)[:-1]])
    down = np.diff(arrivals) < 0
    down[first_arrival[1:] - 1] = False  # from one lane's last step to the next lane's first
    if down.any():
        raise ValueError("arrivals decrease within an example: a prefix arrived before a shorter one")
    prefix_tokens = np.maximum(0, steps.tokens_fed - steps.draft_tokens_in - (steps.forwards - 1))
    prefix_cum = np.concatenate([[0], np.cumsum(prefix_tokens)])  # [i]: prefix tokens of flat steps < i
    # Lanes in order of decreasing step count, so the lanes with steps left stay within a leading
    # slice that shrinks as the short ones finish (a latest lane may finish early: it then idles).
    order = np.argsort(-lane_steps, kind="stable")
    lane_steps, first_step, first_arrival = lane_steps[order], first_step[order], first_arrival[order]
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
    live_lanes = lanes  # lanes[:live_lanes] hold every lane with steps left
    while live_lanes:
        live = slice(0, live_lanes)
        live_steps, live_free, live_first_arrival = lane_steps[live], free[live], first_arrival[live]
        # a lane that has run its last step (latest ends early) stays as it is
        active = last[live] < live_steps
        last_done = np.minimum(last[live], live_steps - 1)  # (its indices kept inside its own steps)
        if policy.name == "latest":
            # idle until the next segment, if none has arrived
            now = np.maximum(live_free, arrivals[live_first_arrival + last_done])
            chosen = last_done + 1
            while True:  # the newest prefix arrived by ``now`` (arrivals do not decrease)
                more = chosen < live_steps
                more[more] = arrivals[live_first_arrival[more] + chosen[more]] <= now[more]
                if not more.any():
                    break
                chosen = chosen + more
            start = now
        else:
            chosen = (np.minimum((last_done // policy.k + 1) * policy.k, live_steps) if policy.name == "every_k"
                      else last_done + 1)
            start = np.maximum(live_free, arrivals[live_first_arrival + chosen - 1])
        step_at = first_step[live] + chosen - 1  # the step's flat index in the step columns
        chained = (last_done == chosen - 1) & ~chain_modelled[live] & (cap is None)
        draft_in = np.where(chained, steps.draft_tokens_in[step_at], draft_len[live])
        after = first_step[live] + last_done  # step last + 1
        cached_here, cached_after = steps.cached_tokens[step_at], steps.cached_tokens[after]
        exact = (cached_here != _NULL) & (cached_after != _NULL)
        cached_after = _kept_after_rewrites(steps, after, step_at, cached_after, exact)
        extra = np.where(chosen == last_done + 1, 0,
                         np.where(exact, cached_here - cached_after, prefix_cum[step_at] - prefix_cum[after]))
        rec_accepted, rec_generated = steps.accepted_tokens[step_at], steps.generated_tokens[step_at]
        rec_forwards, rec_fed = steps.forwards[step_at], steps.tokens_fed[step_at]  # as recorded
        accepted = np.minimum(rec_accepted, draft_in)
        answer = rec_accepted + rec_generated
        if cap is not None:
            answer = np.where(chosen == live_steps, answer, np.minimum(answer, cap))
        generated = np.maximum(0, answer - accepted)
        forwards = np.maximum(1, rec_forwards + np.maximum(0, generated - 1) - np.maximum(0, rec_generated - 1))
        tokens = rec_fed + extra + (draft_in - steps.draft_tokens_in[step_at]) + (forwards - rec_forwards)
        changed = (forwards != rec_forwards) | (tokens != rec_fed)
        cost = np.where(changed, a_s[live] * forwards + b_s[live] * tokens, steps.wall_s[step_at])
        end = start + cost
        # keeps up: each step before the last ends by the arrival of the step the policy planned next
        planned = (np.minimum((chosen // policy.k + 1) * policy.k, live_steps) if policy.name == "every_k"
                   else chosen + 1)
        ok = (chosen >= live_steps) | (end <= arrivals[live_first_arrival + np.minimum(planned, live_steps) - 1])
        changed &= active
        failed[live] |= changed & ~has_cost[live]
        keeps[live] &= ok | ~active
        modelled[live] |= changed
        ran[live] += active
        start_final[live] = np.where(active, start, start_final[live])
        free[live] = np.where(active, end, live_free)
        draft_len[live] = np.where(active, accepted + generated, draft_len[live])
        chain_modelled[live] = np.where(active, changed, chain_modelled[live])
        last[live] = np.where(active, chosen, last[live])
        running = np.flatnonzero(last[live] < live_steps)
        live_lanes = int(running[-1]) + 1 if running.size else 0
    final_arrival = arrivals[first_arrival + lane_steps - 1]
    skipped = lane_steps - ran if policy.name == "latest" else np.zeros(lanes, np.int64)
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
