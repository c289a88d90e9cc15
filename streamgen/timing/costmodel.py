"""The step cost model: wall seconds of a piece of work ≈ a · forwards + b · tokens fed.

Policies that skip steps or cap drafts need the cost of work nobody ran (a prefix verified against
an older draft, a shorter regeneration). Per (model, device) we fit ``wall_s ≈ a·forwards + b·tokens_fed``
by least squares over the recorded steps and base runs (each row is a sum of forwards, so the
per-forward law ``a + b·tokens`` sums to exactly this). Figures computed with it are flagged
``modelled`` wherever they appear (docs/timing.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LinearCost", "fit_cost_model"]


@dataclass(frozen=True)
class LinearCost:
    """``seconds = a_s · forwards + b_s · tokens_fed``; ``n_rows`` and ``r2`` describe the fit."""

    a_s: float  # seconds per forward
    b_s: float  # seconds per token fed
    n_rows: int = 0
    r2: float | None = None

    def cost(self, forwards: int, tokens_fed: int) -> float:
        return self.a_s * forwards + self.b_s * tokens_fed


class CostModelError(ValueError):
    """Too little data to fit a cost model; says what is missing."""


def fit_cost_model(forwards: Sequence[int] | np.ndarray, tokens_fed: Sequence[int] | np.ndarray,
                   wall_s: Sequence[float] | np.ndarray) -> LinearCost:
    """Least-squares fit (no intercept: no forwards, no time) of ``wall_s`` on forwards and tokens fed.

    Coefficients are clipped at 0 (a negative per-token cost is noise, not physics; the other
    coefficient is then refitted alone). Needs at least two rows that are not proportional.
    """
    x = np.column_stack([np.asarray(forwards, float), np.asarray(tokens_fed, float)])
    y = np.asarray(wall_s, float)
    if len(y) < 2 or np.linalg.matrix_rank(x) < 2:
        raise CostModelError(f"cannot fit a cost model from {len(y)} rows: need at least two steps whose "
                             "forwards and tokens fed are not proportional (run more examples)")
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    if coef[0] < 0 or coef[1] < 0:
        keep = 0 if coef[0] >= coef[1] else 1
        coef = np.zeros(2)
        coef[keep] = max(0.0, float(x[:, keep] @ y / (x[:, keep] @ x[:, keep])))
    resid = y - x @ coef
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / total if total > 0 else None
    return LinearCost(float(coef[0]), float(coef[1]), len(y), r2)
