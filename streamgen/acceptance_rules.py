"""Acceptance rules: the per-token test that decides which leading draft tokens a verify forward keeps, and
:data:`RULES`, the registry that names them (docs/decoding.md, "Add an acceptance rule").

A rule is one frozen dataclass: ``name`` (its config name), its fields (its parameters, each described by a
:class:`Param` in ``params``: how a grid sweeps it and how a label spells it), :meth:`passes` (the
per-token test) and, by default, a label built from the name and the parameters. Config validation, the
grid's cells, the cell label and fingerprint, the report's labels and every decoder read a rule through
:data:`RULES` and the functions here; nothing else branches on a rule's name.

Two parameter names are also result columns: ``tau`` (the pairs rows' ``tau``) and ``tie_guard`` (their
``tie_guard``). Any other parameter is recorded in the cell's settings and fingerprint as
``acceptance.<name>`` (:func:`extra_params`). A leaf module: it imports nothing from the project, so the
config, the results and the analysis can read it as well as the decoders.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

COLUMN_PARAMS = ("tau", "tie_guard")  # parameters that are pairs/steps columns of their own


@dataclass(frozen=True)
class Param:
    """How a rule's parameter is swept by a grid and spelled in labels.

    ``optional``: False, one cell per grid value (threshold's τ); True, the rule without it plus one more
    cell per value (greedy's tie guard). ``example``: a valid value, for error messages."""

    symbol: str
    example: str
    optional: bool = False


class AcceptanceRule(Protocol):
    """What a decoder asks of a rule: the per-token test, and where a guard refuses to let the verify
    forward decide (only greedy's tie guard does; every other rule answers False)."""

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]

    def passes(self, draft_token: int, argmax_token: int, prob: float, margin: float | None = None) -> bool:
        """``margin``: the verifier's top-1 minus top-2 at this position in dtype spacings (None: unknown)."""
        ...

    def guarded(self, margin: float | None) -> bool:
        """True where the verify forward must not decide this position's token (greedy's tie_guard)."""
        ...

    @property
    def needs_margins(self) -> bool:
        """True when the rule reads top-2 margins, which only autoregressive verifiers report."""
        ...


class TieGuardUnsupported(ValueError):
    """``tie_guard`` was asked of a verifier that reports no top-2 margins (only autoregressive ones do)."""


class PerToken:
    """The defaults of a per-token rule with no guard: mix in before declaring ``name``, ``params``,
    the fields and :meth:`passes`."""

    needs_margins = False

    def guarded(self, margin: float | None) -> bool:
        return False


def _check_probability(value: float | None, rule: str, param: str = "tau") -> None:
    if value is None or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{param}={value!r} is outside [0, 1]: {rule} acceptance needs {param} in [0, 1] "
                         f"(a probability), e.g. {param}=0.9")


@dataclass(frozen=True)
class Greedy:
    """A draft token passes if it equals the verifier's argmax at its position (lossless for AR in exact
    arithmetic). With ``tie_guard`` = g (dtype spacings), it must also beat the runner-up by more than g:
    at a near tie the verify forward's rounding does not decide, a one-token decode step does."""

    name: ClassVar[str] = "greedy"
    params: ClassVar[Mapping[str, Param]] = MappingProxyType({"tie_guard": Param("guard", "1", optional=True)})
    tie_guard: float | None = None

    def __post_init__(self) -> None:
        if self.tie_guard is not None and not (math.isfinite(self.tie_guard) and self.tie_guard >= 0):
            raise ValueError(f"tie_guard={self.tie_guard!r} must be a finite number of spacings ≥ 0, e.g. 1")

    @property
    def needs_margins(self) -> bool:
        return self.tie_guard is not None

    def passes(self, draft_token: int, argmax_token: int, prob: float, margin: float | None = None) -> bool:
        return draft_token == argmax_token and not self.guarded(margin)

    def guarded(self, margin: float | None) -> bool:
        """True where the guard refuses to let the verify forward decide (margin within the guard)."""
        if self.tie_guard is None:
            return False
        if margin is None:
            raise TieGuardUnsupported("tie_guard needs the verifier's top-2 margins, which only autoregressive "
                                      "decoders report: drop tie_guards for this model")
        return margin <= self.tie_guard


@dataclass(frozen=True)
class Threshold(PerToken):
    """A draft token passes if the verifier's probability for it is at least ``tau`` (lossy).

    ``tau`` is a probability in [0, 1] (docs/accounting.md, "Acceptance threshold τ"): τ = 0 accepts
    every token (even one whose probability underflows to 0); 0 < τ < 1 accepts ``p >= τ``, with ``p``
    the fp32 softmax of fp32 logits; τ = 1 accepts nothing. A true softmax never reaches 1, but fp32
    rounds it to exactly 1.0 once the logit margin passes ~16.6, so ``p >= 1`` would accept confident
    tokens of trained models: τ = 1 is defined as the limit, "keep nothing", instead."""

    name: ClassVar[str] = "threshold"
    params: ClassVar[Mapping[str, Param]] = MappingProxyType({"tau": Param("τ", "0.9")})
    table_name: ClassVar[str] = ""  # the report's tables say "τ=0.9": τ alone names the rule there
    tau: float = 0.5

    def __post_init__(self) -> None:
        _check_probability(self.tau, "threshold")

    def passes(self, draft_token: int, argmax_token: int, prob: float, margin: float | None = None) -> bool:
        return self.tau < 1.0 and prob >= self.tau


# The registry: a rule's config name → its class. Adding a rule is its class plus one line here.
RULES: Mapping[str, type[AcceptanceRule]] = MappingProxyType({rule.name: rule for rule in (
    Greedy,
    Threshold,
)})


class UnknownRule(ValueError):
    """A config names an acceptance rule that is not in :data:`RULES`."""


def rule_class(name: str) -> type[AcceptanceRule]:
    """The registered class of rule ``name``; :class:`UnknownRule` naming the registered ones otherwise."""
    if name not in RULES:
        raise UnknownRule(f"acceptance={name!r} is not a registered rule: use acceptance=greedy or one of "
                          f"{tuple(RULES)}")
    return RULES[name]


def make_rule(name: str, params: Mapping[str, float | None] | None = None) -> AcceptanceRule:
    """Rule ``name`` with ``params`` (None values left at the rule's default); ValueError naming the fix
    for an unknown rule, a parameter it does not take, a required one missing, or a value out of range."""
    cls = rule_class(name)
    given = {k: float(v) for k, v in (params or {}).items() if v is not None}
    if unknown := sorted(set(given) - set(cls.params)):
        takes = ", ".join(cls.params) or "no parameters"
        raise ValueError(f"acceptance={name} takes {takes}, not {', '.join(unknown)}: drop "
                         f"{', '.join(unknown)} or choose a rule that takes it")
    for key, spec in cls.params.items():
        if key not in given and not spec.optional:
            raise ValueError(f"acceptance={name} needs {key}=<value>, e.g. {key}={spec.example}")
    return cls(**given)  # type: ignore[call-arg]


def sweep(name: str, values: Mapping[str, Sequence[float]]) -> list[AcceptanceRule]:
    """The rules a grid lists for ``name``: one per combination of its required parameters' values, then,
    per optional parameter, one more per value (greedy, then greedy guard=g for each g)."""
    cls = rule_class(name)
    base: list[dict[str, float]] = [{}]
    for key, spec in cls.params.items():
        if not spec.optional:
            base = [{**b, key: float(v)} for b in base for v in values.get(key, ())]
    rules = [make_rule(name, b) for b in base]
    for key, spec in cls.params.items():
        if spec.optional:
            rules += [make_rule(name, {**b, key: float(v)}) for b in base for v in values.get(key, ())]
    return rules


def rule_params(rule: AcceptanceRule) -> dict[str, Any]:
    """The rule's parameters by name (its dataclass fields), None where unset."""
    return {f.name: getattr(rule, f.name) for f in dataclasses.fields(rule)}  # type: ignore[arg-type]


def column_param(rule: AcceptanceRule, key: str) -> float | None:
    """The rule's ``tau`` or ``tie_guard`` as its result column holds it (None: the rule has none)."""
    assert key in COLUMN_PARAMS, key
    return rule_params(rule).get(key)


def extra_params(rule: AcceptanceRule) -> dict[str, Any]:
    """The rule's parameters that have no result column of their own (recorded as ``acceptance.<name>``)."""
    return {k: v for k, v in rule_params(rule).items() if k not in COLUMN_PARAMS and v is not None}


def _spelled(name: str, values: Mapping[str, Any], *, table: bool) -> str:
    cls = RULES.get(name)
    params: Mapping[str, Param] = cls.params if cls else {"tau": Param("τ", "0.9")}  # an unregistered name
    head = getattr(cls, "table_name", name) if table else name
    parts = [head] + [f"{spec.symbol}={values[k]:g}" for k, spec in params.items() if values.get(k) is not None]
    return " ".join(p for p in parts if p)


def rule_label(rule: AcceptanceRule) -> str:
    """The rule as a cell's name spells it: ``greedy``, ``greedy guard=4``, ``threshold τ=0.9``."""
    return _spelled(rule.name, rule_params(rule), table=False)


def column_label(acceptance: str, tau: float | None = None, tie_guard: float | None = None, *,
                 table: bool = False) -> str:
    """A rule's label from the result rows' ``acceptance``, ``tau`` and ``tie_guard`` columns (other
    parameters are not columns: the analysis's settings tag names them). ``table``: the report's shorter
    spelling, where a rule may leave its name out (threshold's ``τ=0.9``)."""
    return _spelled(acceptance, {"tau": tau, "tie_guard": tie_guard}, table=table)
