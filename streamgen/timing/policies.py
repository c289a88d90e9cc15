"""Drafting policies: which prefix the device drafts next as segments arrive, and what the user waits.

One schedule rule (:meth:`Policy.next_step`) drives both the post-hoc evaluation over recorded steps
(:func:`evaluate`, no new runs) and the live stream run (:mod:`streamgen.live`), so the two agree by
construction on which steps run and when they start.

Policies (docs/design.md, 'Vocabulary'):

- ``every``: draft at every segment. Step i starts at ``max(t_i, end of step i−1)`` and lasts its
  measured ``wall_s``; nothing is modelled.
- ``latest``: when the device frees up it drafts the newest prefix that has arrived (idle, it waits
  for the next arrival and then takes the newest prefix arrived at that instant, so a pasted block
  that lands with the sentence before it is drafted once, as the whole); a step that has not started
  when a later segment arrives is *skipped*, and the next step verifies the draft of the last step
  that finished. The final step always runs on the submitted text.
- ``every_k``: draft only at every k-th segment (and the last).
- ``cap``: as ``every``, but a speculative draft is never longer than ``cap_tokens`` tokens.

The user's wait is ``end of the last step − t_n``; the backlog is ``start of the last step − t_n``;
an example *keeps up* when every step that ran before the last ended by the arrival of the next
step the policy planned, and no step was skipped (a tie — a step ending exactly when two segments
arrive — still skips one: it does not keep up, as the live rows say). A step whose work differs from the recorded one
(another draft, skipped prefixes, a capped draft) costs what :class:`~streamgen.timing.costmodel.LinearCost`
says, and the outcome is flagged ``modelled`` (docs/timing.md lists the assumptions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamgen.config import POLICIES, ConfigError, TypingConfig
from streamgen.timing.costmodel import LinearCost

__all__ = ["Chain", "Decision", "Policy", "PolicyOutcome", "RunStep", "StepFacts", "Work", "evaluate",
           "policies_of", "skipped_request_tokens"]


@dataclass(frozen=True)
class StepFacts:
    """One recorded stream step (a ``steps`` row) with its arrival time under a typing model."""

    arrival_s: float
    wall_s: float
    forwards: int
    tokens_fed: int
    draft_tokens_in: int
    accepted_tokens: int
    generated_tokens: int
    request_tokens: int | None = None  # tokens of the step's whole rendered request (null: not recorded)
    cached_tokens: int | None = None  # of those, tokens reused from the state the step started from
    chars_deleted: int | None = None  # > 0: the step's text rewrote earlier text (corrections); null: not recorded

    @property
    def prefix_tokens(self) -> int:
        """Request tokens the step's verify forward fed (autoregressive accounting: one verify forward
        feeds new request tokens + the draft, each further forward one token)."""
        return max(0, self.tokens_fed - self.draft_tokens_in - (self.forwards - 1))


@dataclass(frozen=True)
class Decision:
    step: int  # 1-based prefix index to draft next
    start_s: float  # when it starts (≥ the moment the device was free, ≥ its arrival)


@dataclass(frozen=True)
class Policy:
    """A drafting policy; ``k`` for every_k, ``cap_tokens`` for cap."""

    name: str = "every"
    k: int = 2
    cap_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise ConfigError([f"policy {self.name!r} is not one of {POLICIES}"], "bad policy")
        if self.name == "cap" and (self.cap_tokens is None or self.cap_tokens < 1):
            raise ConfigError(["policy cap needs cap_tokens ≥ 1"], "bad policy")
        if self.k < 1:
            raise ConfigError([f"policy every_k needs k ≥ 1, got {self.k}"], "bad policy")

    @property
    def label(self) -> str:
        return {"every_k": f"every_{self.k}", "cap": f"cap_{self.cap_tokens}"}.get(self.name, self.name)

    def planned_after(self, i: int, n: int) -> int:
        """The step the policy means to run after step i, time aside (n: the last step)."""
        if self.name == "every_k":
            return next(j for j in range(i + 1, n + 1) if j % self.k == 0 or j == n)
        return i + 1

    def next_step(self, last: int, free_s: float, arrivals: Sequence[float]) -> Decision:
        """What to draft once the device is free at ``free_s``, ``last`` being the last step run."""
        n = len(arrivals)
        if self.name == "latest":
            now = max(free_s, arrivals[last])  # idle until the next segment arrives, if none has
            return Decision(max(j for j in range(last + 1, n + 1) if arrivals[j - 1] <= now), now)
        j = self.planned_after(last, n)
        return Decision(j, max(free_s, arrivals[j - 1]))


def policies_of(cfg: TypingConfig) -> list[Policy]:
    """The post-hoc policies a typing config lists."""
    return [Policy(name, k=cfg.every_k, cap_tokens=cfg.cap_tokens if name == "cap" else None)
            for name in cfg.policies]


@dataclass(frozen=True)
class RunStep:
    step: int
    start_s: float
    end_s: float
    modelled: bool  # its cost came from the cost model, not the recorded wall_s


@dataclass(frozen=True)
class PolicyOutcome:
    """One example under one policy and typing model."""

    policy: str
    wait_s: float  # end of the last step − arrival of the last segment
    backlog_s: float  # start of the last step − arrival of the last segment
    keeps_up: bool
    ran: tuple[RunStep, ...]
    skipped: tuple[int, ...]  # steps the policy planned but dropped as stale (latest only)

    @property
    def modelled(self) -> bool:
        return any(r.modelled for r in self.ran)


@dataclass(frozen=True)
class Work:
    """One step as a policy runs it: its cost and the draft it leaves."""

    cost_s: float
    answer_tokens: int  # length of the draft this step leaves for the next
    modelled: bool


def _decode_forwards(generated: int) -> int:
    """Forwards after the verify forward to produce ``generated`` tokens: it yields the first itself."""
    return max(0, generated - 1)


def _work(s: StepFacts, draft_in: int, extra_prefix: int, cap: int | None, final: bool,
          cost: LinearCost | None) -> Work:
    """The step's work when it verifies a ``draft_in``-token draft after ``extra_prefix`` skipped tokens.

    Assumes the leading run accepted is the recorded one, shortened to the draft it is given; a
    capped speculative step stops generating once its answer has ``cap`` tokens; a final step
    regenerates whatever its (shorter) draft no longer holds. Forwards: the verify forward yields the
    first generated token, each further token one forward feeding one token (docs/design.md, 'Accounting').
    """
    accepted = min(s.accepted_tokens, draft_in)
    answer = s.accepted_tokens + s.generated_tokens
    if cap is not None and not final:
        answer = min(answer, cap)
    generated = max(0, answer - accepted)
    forwards = max(1, s.forwards + _decode_forwards(generated) - _decode_forwards(s.generated_tokens))
    tokens = s.tokens_fed + extra_prefix + (draft_in - s.draft_tokens_in) + (forwards - s.forwards)
    if (forwards, tokens) == (s.forwards, s.tokens_fed):
        return Work(s.wall_s, accepted + generated, False)
    if cost is None:
        raise ValueError("this policy changes work nobody ran: pass a fitted cost model (streamgen.timing.costmodel)")
    return Work(cost.cost(forwards, tokens), accepted + generated, True)


def skipped_request_tokens(steps: Sequence[StepFacts], last: int, j: int) -> int:
    """Request tokens step ``j`` feeds beyond its recorded ones when it follows step ``last`` (0: none).

    Exact where the rows record ``cached_tokens``: from the state of step ``last`` the request of step
    ``j`` reuses what step ``last + 1`` reused (both requests hold prefix ``last + 1``'s text), so it
    feeds ``cached_j − cached_{last+1}`` more. Older rows: the sum of the skipped steps' request tokens,
    which over-counts the re-fed chat-template suffix and re-tokenised boundaries.

    Corrections (a step in ``last + 1 .. j`` deleted text): step ``last + 1``'s request no longer holds
    step ``j``'s text — a typo step ``last`` sent may be fixed only by step ``j``. The state of step
    ``last`` then keeps the tokens every request since shares with it: at least the fewest any of those
    steps reused (a common prefix along a chain is at least its least link), exactly that when each
    edit fixes a typo (docs/typists.md, "Corrections").
    """
    if j == last + 1:
        return 0
    between = steps[last:j]
    here, after = steps[j - 1].cached_tokens, steps[last].cached_tokens
    if here is not None and after is not None:
        if any(s.chars_deleted for s in between) and all(s.cached_tokens is not None for s in between):
            after = min(int(s.cached_tokens) for s in between)  # type: ignore[arg-type]
        return here - after
    return sum(steps[m - 1].prefix_tokens for m in range(last + 1, j))


@dataclass(frozen=True)
class Chain:
    """What one example's drafting has left so far: the last step run and the draft it produced."""

    last: int = 0  # 0: no step has run
    draft_len: int = 0
    modelled: bool = False  # the last step's work was modelled (its draft is not the recorded one)

    def run(self, steps: Sequence[StepFacts], j: int, cost: LinearCost | None,
            cap: int | None = None) -> tuple[Work, Chain]:
        """Run step ``j`` next: it verifies this chain's draft (recorded work when nothing changed)."""
        s = steps[j - 1]
        chained = self.last == j - 1 and not self.modelled and cap is None
        draft_in = s.draft_tokens_in if chained else self.draft_len
        extra = skipped_request_tokens(steps, self.last, j)
        work = _work(s, draft_in, extra, cap, j == len(steps), cost)
        return work, Chain(j, work.answer_tokens, work.modelled)


def evaluate(steps: Sequence[StepFacts], policy: Policy, cost: LinearCost | None = None) -> PolicyOutcome:
    """Replay one example's recorded steps under ``policy`` on its typing timeline."""
    if not steps:
        raise ValueError("an example with no steps cannot be evaluated")
    arrivals = [s.arrival_s for s in steps]
    n, free, chain = len(steps), 0.0, Chain()
    ran: list[RunStep] = []
    while chain.last < n:
        d = policy.next_step(chain.last, free, arrivals)
        work, chain = chain.run(steps, d.step, cost, policy.cap_tokens)
        free = d.start_s + work.cost_s
        ran.append(RunStep(d.step, d.start_s, free, work.modelled))
    run_ids = {r.step for r in ran}
    planned, i = [], 0
    while i < n:
        i = policy.planned_after(i, n)
        planned.append(i)
    skipped = tuple(j for j in planned if j not in run_ids)
    # a skipped step is checked apart: on a tie the step before it ended exactly at the next arrival
    keeps_up = not skipped and all(r.end_s <= arrivals[policy.planned_after(r.step, n) - 1] for r in ran if r.step < n)
    return PolicyOutcome(policy.label, free - arrivals[-1], ran[-1].start_s - arrivals[-1], keeps_up,
                         tuple(ran), skipped)
