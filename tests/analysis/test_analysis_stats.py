"""Every SQL statistic against an independent numpy computation over the same records.

The reference below works on the PairRecord/StepRecord objects directly (no SQL, no Arrow), with
np.median (linear interpolation, as DuckDB's quantile_cont) and np.mean. Record sets come from
hypothesis: ties, exclusions, errors, a single benchmark, a single model all occur.
"""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from analysis.tables import ResultsNotFoundError, build_tables
from streamgen.results.records import PairRecord, to_table
from tests.support.analysis_fixtures import RecordSet, pair_record, record_sets, write_record_set

KEY = ("model", "benchmark", "acceptance", "tau", "variant", "verifier_mode")
SETTING = ("model", "acceptance", "tau", "variant", "verifier_mode")
HYPO = settings(max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def included(p: PairRecord) -> bool:
    return p.excluded_reason is None and p.error_type is None


def _med(xs: list[float]) -> float | None:
    return float(np.median(np.asarray(xs, dtype=float))) if xs else None


def _mean(xs: Iterable[float]) -> float | None:
    arr = np.asarray(list(xs), dtype=float)
    return float(arr.mean()) if arr.size else None


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x


def kept(p: PairRecord) -> str:
    if p.draft_tokens_final == 0:
        return "no_draft"
    if p.accepted_tokens_final == 0:
        return "none"
    return "all" if p.accepted_tokens_final >= p.draft_tokens_final else "part"


def cell_stats(rows: list[PairRecord]) -> dict[str, float | None]:
    inc = [p for p in rows if included(p)]
    s_fwd = [p.base_forwards / p.residual_forwards for p in inc]
    s_wall = [p.base_wall_s / p.residual_wall_s for p in inc]
    return {
        "n_total": len(rows),
        "n_included": len(inc),
        "n_excluded": sum(p.error_type is None and p.excluded_reason is not None for p in rows),
        "n_error": sum(p.error_type is not None for p in rows),
        "n_benchmarks": len({p.benchmark for p in inc}),
        "base_quality_pct": _pct(_mean(p.base_quality for p in inc)),
        "stream_quality_pct": _pct(_mean(p.stream_quality for p in inc)),
        "median_base_forwards": _med([p.base_forwards for p in inc]),
        "median_residual_forwards": _med([p.residual_forwards for p in inc]),
        "mean_speedup_forwards": _mean(s_fwd),
        "median_speedup_forwards": _med(s_fwd),
        "mean_speedup_wall": _mean(s_wall),
        "median_speedup_wall": _med(s_wall),
    }


def dist_stats(rows: list[PairRecord]) -> dict[str, float | None]:
    inc = [p for p in rows if included(p)]
    s = [p.base_forwards / p.residual_forwards for p in inc]
    wall = [p.base_wall_s / p.residual_wall_s for p in inc]
    att = [p.base_forwards / p.min_residual_forwards for p in inc]
    over = [(p.speculative_forwards + p.residual_forwards) / p.base_forwards for p in inc]
    k = [kept(p) for p in inc]
    base_sum = sum(p.base_forwards for p in inc)
    return {
        "n_included": len(inc),
        **{
            f"share_below_{n}": _mean([x < t for x in s])
            for n, t in (("1x", 1), ("0_9x", 0.9), ("0_8x", 0.8))
        },
        "share_below_1x_wall": _mean([x < 1 for x in wall]),
        "median_speedup_losers": _med([x for x in s if x < 1]),
        **{f"share_keep_{c}": _mean([x == c for x in k]) for c in ("none", "all", "part")},
        "share_no_draft": _mean([x == "no_draft" for x in k]),
        "share_first_draft": _mean([p.stream_is_first_draft for p in inc]),
        "share_one_forward": _mean([p.residual_forwards == 1 for p in inc]),
        "share_at_floor": _mean([p.residual_forwards <= p.min_residual_forwards for p in inc]),
        "median_attainable": _med(att),
        "median_achieved": _med([x / a for x, a in zip(s, att, strict=False)]),
        "mean_overhead": _mean(over),
        "median_overhead": _med(over),
        "share_forwards_removed": (1 - sum(p.residual_forwards for p in inc) / base_sum) if inc else None,
    }


def group(rows: Iterable[PairRecord], cols: tuple[str, ...]) -> dict[tuple, list[PairRecord]]:
    out: dict[tuple, list[PairRecord]] = defaultdict(list)
    for p in rows:
        out[tuple(getattr(p, c) for c in cols)].append(p)
    return out


def reference(pairs: list[PairRecord], stats: Callable, with_macro: bool) -> dict[tuple, dict]:
    """{(scope, *KEY): stats} for benchmark rows, pooled rows and (optionally) macro rows."""
    out: dict[tuple, dict] = {}
    per_bench = {k: stats(rows) for k, rows in group(pairs, KEY).items()}
    out.update({("benchmark", *k): v for k, v in per_bench.items()})
    for k, rows in group(pairs, SETTING).items():
        out[("pooled", k[0], None, *k[1:])] = stats(rows)
        if with_macro:
            members = [v for kk, v in per_bench.items() if (kk[0], *kk[2:]) == k]
            out[("macro", k[0], None, *k[1:])] = _macro(members)
    return out


def _macro(members: list[dict]) -> dict:
    out = {}
    for col in members[0]:
        vals = [m[col] for m in members if m[col] is not None]
        out[col] = (sum(vals) if col.startswith("n_") else _mean(vals)) if vals else None
    return out


def assert_matches(table, expected: dict[tuple, dict], key: tuple[str, ...] = ("scope", *KEY)) -> None:
    rows = table.to_pylist()
    actual = {tuple(r[c] for c in key): r for r in rows}
    assert len(actual) == len(rows), "duplicate keys in the SQL output"
    assert set(actual) == set(expected)
    for k, exp in expected.items():
        for col, want in exp.items():
            got = actual[k][col]
            if want is None or (isinstance(want, float) and math.isnan(want)):
                assert got is None, (k, col, got)
            else:
                assert got == pytest.approx(want, rel=1e-12, abs=1e-12), (k, col, got, want)


def tables_for(records: RecordSet, **write_kw):
    with tempfile.TemporaryDirectory() as tmp:
        write_record_set(Path(tmp), records, **write_kw)
        return build_tables(tmp, threads=1)


@HYPO
@given(record_sets())
def test_every_table_matches_numpy(records: RecordSet) -> None:
    t = tables_for(records)
    expected = reference(records.pairs, cell_stats, with_macro=True)
    assert_matches(t["cells"], {k: v for k, v in expected.items() if k[0] != "macro"})
    assert_matches(t["models"], expected)
    assert_matches(t["distribution"], reference(records.pairs, dist_stats, with_macro=True))
    excl: dict[tuple, dict] = defaultdict(lambda: {"n": 0})
    for p in records.pairs:
        if not included(p):
            kind, reason = ("error", p.error_type) if p.error_type else ("excluded", p.excluded_reason)
            excl[(*(getattr(p, c) for c in KEY), kind, reason)]["n"] += 1
    assert_matches(t["exclusions"], dict(excl), key=(*KEY, "kind", "reason"))
    assert_matches(t["step_summary"], step_reference(records), key=KEY)


def step_reference(records: RecordSet) -> dict[tuple, dict]:
    steps = defaultdict(list)
    for s in records.steps:
        steps[(s.run_id, s.cell_id, s.example_id)].append(s)
    cells: dict[tuple, list] = defaultdict(list)
    for p in filter(included, records.pairs):
        mine = steps.get((p.run_id, p.cell_id, p.example_id))
        if mine:
            cells[tuple(getattr(p, c) for c in KEY)].append((p, mine))
    out = {}
    for k, items in cells.items():
        all_s = [s for _, ss in items for s in ss]
        fin = [s for s in all_s if s.is_final]

        def ratio(ss):
            return (
                (sum(s.accepted_tokens for s in ss) / d)
                if (d := sum(s.draft_tokens_in for s in ss))
                else None
            )  # noqa: E731

        finals = [
            sum(s.forwards for s in ss if s.is_final) if any(s.is_final for s in ss) else None
            for _, ss in items
        ]
        out[k] = {
            "n_examples": len(items),
            "n_steps": len(all_s),
            "mean_steps": _mean(len(ss) for _, ss in items),
            "mean_speculative_forwards": _mean(
                sum(s.forwards for s in ss if not s.is_final) for _, ss in items
            ),
            "accept_ratio_all": ratio(all_s),
            "accept_ratio_final": ratio(fin),
            "n_residual_mismatch": sum(
                f != p.residual_forwards for f, (p, _) in zip(finals, items, strict=False)
            ),
        }
    return out


@HYPO
@given(record_sets())
def test_excluded_and_error_rows_never_enter_statistics(records: RecordSet) -> None:
    """Dropping every non-included row changes the counts and nothing else."""
    kept_only = RecordSet([p for p in records.pairs if included(p)], records.steps)
    if not kept_only.pairs:
        return
    full, clean = tables_for(records), tables_for(kept_only)
    for name in ("models", "distribution", "step_summary"):
        counts = {"n_total", "n_excluded", "n_error"}
        a = [{c: v for c, v in r.items() if c not in counts} for r in full[name].to_pylist()]
        b = [{c: v for c, v in r.items() if c not in counts} for r in clean[name].to_pylist()]
        b_keys = {tuple(r[c] for c in KEY) for r in b}
        kept_rows = [r for r in a if tuple(r[c] for c in KEY) in b_keys]
        assert len(kept_rows) == len(b), name
        for ra, rb in zip(kept_rows, b, strict=True):  # floats: summation order may differ
            assert ra == {
                k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in rb.items()
            }


@HYPO
@given(record_sets())
def test_adaptation_and_tau_sweep_follow_cells(records: RecordSet) -> None:
    t = tables_for(records, with_steps=False, with_runs=False)
    cells = {(r["scope"], *(r[c] for c in KEY)): r for r in t["cells"].to_pylist()}
    expected = {}
    for (scope, model, bench, acc, tau, variant, mode), after in cells.items():
        before = cells.get((scope, model, bench, acc, tau, None, mode))
        if scope == "benchmark" and variant is not None and before is not None:
            expected[("benchmark", model, bench, acc, tau, variant, mode)] = {
                "quality_after_pct": after["stream_quality_pct"],
                "quality_before_pct": before["stream_quality_pct"],
                "median_speedup_after": after["median_speedup_forwards"],
                "median_speedup_before": before["median_speedup_forwards"],
            }
    for k in {(k[1], *k[3:]) for k in expected}:
        members = [v for kk, v in expected.items() if (kk[1], *kk[3:]) == k]
        expected[("macro", k[0], None, *k[1:])] = _macro(members)
    assert_matches(t["adaptation"], expected)
    for r in t["tau_sweep"].to_pylist():
        if r["stream_quality_pct"] is not None:
            assert r["quality_delta_pct"] == pytest.approx(r["stream_quality_pct"] - r["base_quality_pct"])
    assert t["step_summary"].num_rows == 0 and t["run_list"].num_rows == 0


def test_ties_give_interpolated_medians(tmp_path: Path) -> None:
    """Four requests with speedups 1, 2, 2, 4 (a tie) → median 2; two → midpoint."""
    rows = [
        pair_record(example_id=f"e{i}", base_forwards=b, residual_forwards=1)
        for i, b in enumerate([1, 2, 2, 4])
    ]
    rows += [
        pair_record(example_id="x", benchmark="mbpp", base_forwards=3),
        pair_record(example_id="y", benchmark="mbpp", base_forwards=6),
    ]
    write_record_set(tmp_path, RecordSet(rows, []))
    models = {
        (r["scope"], r["benchmark"]): r for r in build_tables(tmp_path, ["models"])["models"].to_pylist()
    }
    assert models[("benchmark", "humaneval")]["median_speedup_forwards"] == 2.0
    assert models[("benchmark", "mbpp")]["median_speedup_forwards"] == 2.25  # (1.5 + 3) / 2
    assert models[("macro", None)]["median_speedup_forwards"] == 2.125
    assert models[("pooled", None)]["median_speedup_forwards"] == 2.0  # of 1, 1.5, 2, 2, 3, 4


def test_missing_results_raise_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsNotFoundError, match="full_grid.py"):
        build_tables(tmp_path)


def test_hive_style_directories_do_not_override_file_columns(tmp_path: Path) -> None:
    """The grid writes pairs/model=<m>/benchmark=<b>/…; values must come from the files."""
    rows = [pair_record(example_id="e0"), pair_record(example_id="e1", benchmark="mbpp")]
    target = tmp_path / "pairs" / "model=NOT-THE-MODEL" / "benchmark=nope" / "shard.parquet"
    target.parent.mkdir(parents=True)
    pq.write_table(to_table(rows, PairRecord), target)
    cells = build_tables(tmp_path, ["cells"], threads=1)["cells"].to_pylist()
    assert {(r["model"], r["benchmark"]) for r in cells if r["scope"] == "benchmark"} == {
        ("m-ar", "humaneval"),
        ("m-ar", "mbpp"),
    }


def test_files_of_an_older_schema_read_missing_columns_as_null(tmp_path: Path) -> None:
    table = to_table([pair_record(example_id="e0")], PairRecord).drop_columns(["variant", "verifier_mode"])
    (tmp_path / "pairs").mkdir()
    pq.write_table(table, tmp_path / "pairs" / "old.parquet")
    (row,) = [
        r
        for r in build_tables(tmp_path, ["cells"], threads=1)["cells"].to_pylist()
        if r["scope"] == "benchmark"
    ]
    assert row["variant"] is None and row["verifier_mode"] is None and row["n_included"] == 1


def test_kept_rule_on_rows_real_decoders_produce(tmp_path: Path) -> None:
    """The SQL ``kept`` rule on rows the decoders really write (scripted models, every family), not on
    hand-made fixtures: constant keeps every draft token, EOS included (accepted == draft), so the
    keep-all share is 100 % and the residual sits at the family floor (LLaDA and Dream too);
    lastsegment keeps none; prefix keeps exactly k, a part. Stale drafts: constant's stream answer is
    its first step's draft (share 1), the others' answers change with the request (share 0)."""
    from jobs.run.rows import outcome_rows
    from streamgen.acceptance_rules import Greedy
    from streamgen.benchmarks import Score
    from streamgen.config import model_config
    from streamgen.families.registry import load_decoder
    from streamgen.models.scripted import SCRIPTS
    from streamgen.stream import StreamRequest, run_pair
    from tests.support.row_support import row_context

    req = StreamRequest("e1", (), ("Write a function that adds two numbers. ", "Use type hints."))
    expect = {"constant": "all", "lastsegment": "none", "prefix": "part"}
    pairs = []
    for family in ("ar", "refusion", "llada", "dream", "dgemma"):
        for behaviour in expect:
            name = f"scripted-{family}-{behaviour}"
            d = load_decoder(model_config(name), max_new_tokens=16)
            ctx = row_context(name, "mbpp")
            pair = outcome_rows(run_pair(d, req, Greedy(), base_first=True), ctx, Score(1.0, "f1"), Score(1.0, "f1")).pair
            accepted = {"all": pair.draft_tokens_final, "none": 0, "part": SCRIPTS["prefix"].k}[expect[behaviour]]
            assert pair.draft_tokens_final == SCRIPTS[behaviour].length + 1  # the previous answer, EOS included
            assert pair.accepted_tokens_final == accepted  # the intermediate facts the rule reads
            assert pair.stream_is_first_draft == (behaviour == "constant")
            pairs.append(pair)
    write_record_set(tmp_path, RecordSet(pairs, []), with_steps=False)
    dist = {r["model"]: r for r in build_tables(tmp_path, threads=1)["distribution"].to_pylist()
            if r["scope"] == "benchmark"}
    for name, row in dist.items():
        behaviour = name.rsplit("-", 1)[1]
        assert row[f"share_keep_{expect[behaviour]}"] == 1.0, (name, row)
        if behaviour == "constant":
            assert row["share_at_floor"] == 1.0, (name, row)
        assert row["share_first_draft"] == (1.0 if behaviour == "constant" else 0.0), (name, row)
    assert len(dist) == 15
