"""analysis/sql/divergence.sql: the greedy divergence table, on pair rows whose figures are set by hand.

Every expected number is computed here from the rows' fields; the bootstrap interval is checked against
its defining properties (degenerate data → a point; otherwise it brackets the mean and sits near a plain
numpy percentile bootstrap), and for being the same on every run.
"""

from __future__ import annotations

import statistics

import numpy as np

from analysis.tables import table_over_pairs
from streamgen.results.records import PairRecord, to_table
from tests.support.analysis_fixtures import pair_record


def _pair(i: int, *, diff: int | None, margin: float | None = None, draft: bool | None = None,
          after: int | None = None, dq: float = 0.0, guard: float | None = None, **kw: object) -> PairRecord:
    return pair_record(example_id=f"e{i}", first_diff_token=diff, base_margin_at_diff=margin,
                       stream_margin_at_diff=margin, diff_from_draft=draft, draft_tokens_after_diff=after,
                       base_quality=0.5, stream_quality=0.5 + dq, tie_guard=guard,
                       numerics='{"dtype":"bfloat16"}', **kw)


def _table(pairs: list[PairRecord]) -> list[dict]:
    return table_over_pairs(to_table(pairs, PairRecord), "divergence").to_pylist()


def test_counts_margins_draft_share_and_quality_difference() -> None:
    dqs = [-0.3, -0.1, 0.0, -0.2, 0.1, -0.4]
    margins = [0.0, 1.0, 2.0, 1.0, 8.0, 0.0]
    drafts = [True, True, False, True, False, True]
    pairs = [_pair(i, diff=3 + i, margin=m, draft=d, after=5 if d else 0, dq=q)
             for i, (m, d, q) in enumerate(zip(margins, drafts, dqs, strict=True))]
    pairs += [_pair(10 + i, diff=None) for i in range(4)]  # equal answers
    pairs += [_pair(20, diff=1, margin=0.0, error_type="X"), _pair(21, diff=1, margin=0.0, acceptance="threshold",
                                                                  tau=0.9)]  # never counted
    [row] = _table(pairs)
    assert (row["dtype"], row["n"], row["equal"], row["diverged"]) == ("bfloat16", 10, 4, 6)
    assert row["equality_rate"] == 0.4
    assert row["margin_p50"] == statistics.median(margins)
    assert row["near_tie_le1"] == sum(m <= 1 for m in margins) / 6
    assert row["near_tie_le4"] == sum(m <= 4 for m in margins) / 6
    assert row["draft_branch_share"] == sum(drafts) / 6 and row["draft_after_mean"] == 5 * sum(drafts) / 6
    assert abs(row["dq_mean"] - statistics.mean(dqs)) < 1e-12
    assert abs(row["dq_all"] - sum(dqs) / 10) < 1e-12
    assert row["dq_lo"] <= row["dq_mean"] <= row["dq_hi"]
    rng = np.random.default_rng(0)
    boot = np.array(dqs)[rng.integers(0, 6, size=(20000, 6))].mean(axis=1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    spread = float(np.std(dqs))
    assert abs(row["dq_lo"] - lo) < 0.25 * spread and abs(row["dq_hi"] - hi) < 0.25 * spread
    assert _table(pairs) == [row]  # the same interval on every run


def test_constant_differences_give_a_point_interval_and_guards_are_rows_of_their_own() -> None:
    pairs = [_pair(i, diff=2, margin=1.0, draft=True, after=1, dq=-0.25) for i in range(5)]
    pairs += [_pair(i, diff=None, guard=1.0) for i in range(5)]
    plain, guarded = _table(pairs)
    assert plain["tie_guard"] is None and guarded["tie_guard"] == 1.0
    assert plain["dq_lo"] == plain["dq_hi"] == plain["dq_mean"] == -0.25
    assert guarded["equality_rate"] == 1.0 and guarded["dq_mean"] is None and guarded["dq_lo"] is None
