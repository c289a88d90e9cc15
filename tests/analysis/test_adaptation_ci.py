"""analysis/sql/adaptation_ci.sql: Table 3 with paired bootstrap intervals, on synthetic pairs rows.

The point statistics are compared with the plain-Python reference below (one readable formula per
metric) on hypothesis-generated plain and adapted cells in which some examples are excluded, failed
or missing on one side only. The intervals are not re-implemented (the same index rule in Python
would only repeat the SQL); they are checked against properties any paired, stratified percentile
bootstrap has: lo <= hi; a point when every paired difference is the same number (0 for identical
sides, exactly +1 for one more residual forward everywhere, the mean of the benchmarks' constants for
the macro row); brackets the difference on well-behaved data; the same on every run; about half as
wide for four times the examples.
"""

from __future__ import annotations

import random
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.report import write_report
from analysis.tables import build_tables
from streamgen.results.records import PairRecord
from tests.analysis.test_analysis_stats import HYPO
from tests.support.analysis_fixtures import RecordSet, pair_record, write_record_set

KEYS = ("model", "benchmark", "acceptance", "tau", "variant", "verifier_mode", "settings_tag")
METRICS = (
    "preserved_share", "kept_whole_share", "one_forward_share", "mean_residual_forwards",
    "mean_residual_wall_s", "median_speedup_forwards", "median_speedup_wall", "stream_quality_pct",
)
SETTINGS = (("greedy", None), ("threshold", 0.5))
POISON = dict(base_forwards=10**6, residual_forwards=1, residual_wall_s=1e-3, accepted_tokens_final=10**6,
              draft_tokens_final=10**6, stream_quality=1.0)  # excluded / error rows: a leak shows


def _pair(benchmark: str, variant: str | None, i: int, *, status: str = "included",
          setting: tuple[str, float | None] = SETTINGS[0], **fields: object) -> PairRecord:
    acceptance, tau = setting
    extra = {"included": {}, "excluded": {"excluded_reason": "single_segment", **POISON},
             "error": {"error_type": "RuntimeError", **POISON}}[status]
    return pair_record(benchmark=benchmark, variant=variant, acceptance=acceptance, tau=tau,
                       cell_id=f"{benchmark}|{acceptance}|{tau}|{variant}", example_id=f"e{i:04d}",
                       **{**fields, **extra})


def _table(pairs: Sequence[PairRecord]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_record_set(Path(tmp), RecordSet(list(pairs), []), with_steps=False, with_runs=False)
        return build_tables(root, ["adaptation_ci"], threads=1)["adaptation_ci"].to_pylist()


def _by_key(rows: list[dict]) -> dict[tuple, dict]:
    return {(r["scope"], *(r[k] for k in KEYS)): r for r in rows}


# --------------------------------------------------------------------------------------------
# The reference: paired examples and each metric's formula, in plain Python
# --------------------------------------------------------------------------------------------


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _side_stats(rows: list[PairRecord]) -> dict[str, float | None]:
    drafts = sum(r.draft_tokens_final for r in rows)
    return {
        "preserved_share": sum(r.accepted_tokens_final for r in rows) / drafts if drafts else None,
        "kept_whole_share": _mean([float(0 < r.draft_tokens_final <= r.accepted_tokens_final) for r in rows]),
        "one_forward_share": _mean([float(r.residual_forwards == 1) for r in rows]),
        "mean_residual_forwards": _mean([r.residual_forwards for r in rows]),
        "mean_residual_wall_s": _mean([r.residual_wall_s for r in rows]),
        "median_speedup_forwards": statistics.median(r.base_forwards / r.residual_forwards for r in rows),
        "median_speedup_wall": statistics.median(r.base_wall_s / r.residual_wall_s for r in rows),
        "stream_quality_pct": 100 * _mean([r.stream_quality for r in rows]),
    }


def _cell_stats(pairs: list[tuple[PairRecord, PairRecord]]) -> dict[str, float | None]:
    plain = _side_stats([p for p, _ in pairs])
    adapted = _side_stats([a for _, a in pairs])
    out: dict[str, float | None] = {"n": len(pairs)}
    for m in METRICS:
        out[f"{m}_plain"], out[f"{m}_adapted"] = plain[m], adapted[m]
        both = plain[m] is not None and adapted[m] is not None
        out[f"{m}_diff"] = adapted[m] - plain[m] if both else None
    return out


def reference(pairs: Sequence[PairRecord]) -> dict[tuple, dict]:
    """(scope, *KEYS) → every point column, from the rows' fields."""
    included = {(p.model, p.benchmark, p.acceptance, p.tau, p.variant, p.verifier_mode, p.example_id): p
                for p in pairs if p.excluded_reason is None and p.error_type is None}
    cells: dict[tuple, list[tuple[PairRecord, PairRecord]]] = {}
    for (model, bench, acc, tau, variant, mode, example), adapted in included.items():
        plain = included.get((model, bench, acc, tau, None, mode, example))
        if variant is not None and plain is not None:
            cells.setdefault(("benchmark", model, bench, acc, tau, variant, mode, None), []).append((plain, adapted))
    out = {key: _cell_stats(rows) for key, rows in cells.items()}
    settings_of = {(k[1], *k[3:]) for k in out}
    for model, acc, tau, variant, mode, tag in settings_of:
        members = [v for k, v in out.items() if k[0] == "benchmark" and (k[1], *k[3:]) == (model, acc, tau, variant, mode, tag)]
        macro = {c: _mean([m[c] for m in members if m[c] is not None]) for c in members[0] if c != "n"}
        out[("macro", model, None, acc, tau, variant, mode, tag)] = {**macro, "n": sum(m["n"] for m in members)}
    return out


# --------------------------------------------------------------------------------------------
# Generated plain and adapted cells
# --------------------------------------------------------------------------------------------

_STATUS = ("included", "included", "included", "excluded", "error", "missing")


@st.composite
def _values(draw: st.DrawFn) -> dict:
    draft = draw(st.sampled_from([0, 1, 4, 8]))
    return dict(
        draft_tokens_final=draft,
        accepted_tokens_final=draw(st.sampled_from(sorted({0, draft // 2, draft}))),
        base_forwards=draw(st.sampled_from([1, 2, 4, 8, 12])),
        residual_forwards=draw(st.sampled_from([1, 2, 3, 4, 8])),
        base_wall_s=draw(st.sampled_from([0.5, 1.0, 2.0])),
        residual_wall_s=draw(st.sampled_from([0.25, 0.5, 1.0, 2.5])),
        stream_quality=draw(st.sampled_from([0.0, 0.5, 1.0])),
    )


@st.composite
def adapted_sets(draw: st.DrawFn) -> list[PairRecord]:
    """Plain and adapted cells over 1–3 benchmarks and 1–2 settings; every side of every example is
    included, excluded, an error or missing on its own."""
    benchmarks = draw(st.lists(st.sampled_from(["humaneval", "mbpp", "chat"]), min_size=1, max_size=3, unique=True))
    chosen = draw(st.lists(st.sampled_from(SETTINGS), min_size=1, max_size=2, unique=True))
    pairs = []
    for bench in benchmarks:
        for setting in chosen:
            for i in range(draw(st.integers(1, 8))):
                for variant in (None, "lora"):
                    status = draw(st.sampled_from(_STATUS))
                    if status != "missing":
                        pairs.append(_pair(bench, variant, i, status=status, setting=setting, **draw(_values())))
    return pairs


@HYPO
@given(adapted_sets())
def test_point_statistics_equal_the_python_reference(pairs: list[PairRecord]) -> None:
    got = _by_key(_table(pairs))
    want = reference(pairs)
    assert sorted(got, key=str) == sorted(want, key=str)
    for key, expected in want.items():
        row = got[key]
        for column, value in expected.items():
            assert row[column] == (value if value is None else pytest.approx(value, rel=1e-9, abs=1e-12)), (key, column)
        for m in METRICS:
            if row[f"{m}_diff"] is not None:
                lo, hi = row[f"{m}_lo"], row[f"{m}_hi"]
                assert lo is not None and hi is not None and lo <= hi, (key, m, lo, hi)


def test_an_example_counts_only_when_included_on_both_sides() -> None:
    pairs = [_pair("mbpp", v, i) for i in range(6) for v in (None, "lora")]
    pairs += [_pair("mbpp", None, 6, status="excluded"), _pair("mbpp", "lora", 6, residual_forwards=9),
              _pair("mbpp", None, 7, residual_forwards=9), _pair("mbpp", "lora", 7, status="error"),
              _pair("mbpp", None, 8, residual_forwards=9)]  # no adapted row at all
    pairs += [_pair("chat", None, i) for i in range(3)]  # a benchmark the variant never ran
    rows = _by_key(_table(pairs))
    assert set(rows) == {("benchmark", "m-ar", "mbpp", "greedy", None, "lora", None, None),
                         ("macro", "m-ar", None, "greedy", None, "lora", None, None)}
    for row in rows.values():
        assert row["n"] == 6
        assert row["mean_residual_forwards_plain"] == row["mean_residual_forwards_adapted"] == 2.0


def test_preserved_share_is_a_ratio_of_sums() -> None:
    """Drafts of 1 and 8 tokens, 1 and 0 kept: 1/9 of the draft tokens, not the mean of 1/1 and 0/8."""
    pairs = [_pair("mbpp", v, i, draft_tokens_final=d, accepted_tokens_final=a)
             for i, (d, a) in enumerate([(1, 1), (8, 0)]) for v in (None, "lora")]
    for row in _table(pairs):
        assert row["preserved_share_plain"] == row["preserved_share_adapted"] == pytest.approx(1 / 9)
        assert row["kept_whole_share_plain"] == 0.5


# --------------------------------------------------------------------------------------------
# The intervals
# --------------------------------------------------------------------------------------------


def _random_cell(bench: str, n: int, seed: int, shift: Callable[[dict, random.Random], dict]) -> list[PairRecord]:
    """n examples of one benchmark; the adapted side is the plain side's values changed by ``shift``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        draft = rng.randint(1, 12)
        plain = dict(draft_tokens_final=draft, accepted_tokens_final=rng.randint(0, draft),
                     base_forwards=rng.randint(4, 40), residual_forwards=rng.randint(1, 10),
                     base_wall_s=rng.uniform(0.5, 2.0), residual_wall_s=rng.uniform(0.05, 1.0),
                     stream_quality=float(rng.random() < 0.6))
        out += [_pair(bench, None, i, **plain), _pair(bench, "lora", i, **shift(plain, rng))]
    return out


def _one_more_forward(plain: dict, rng: random.Random) -> dict:
    return {**plain, "residual_forwards": plain["residual_forwards"] + 1}


def _noisy_gain(plain: dict, rng: random.Random) -> dict:
    """The adapted side: a noisy gain in every metric, correlated with the plain side's value."""
    draft = plain["draft_tokens_final"]
    return {**plain, "accepted_tokens_final": min(draft, plain["accepted_tokens_final"] + rng.randint(0, 3)),
            "residual_forwards": max(1, plain["residual_forwards"] - rng.randint(-1, 3)),
            "residual_wall_s": plain["residual_wall_s"] * rng.uniform(0.5, 1.1),
            "stream_quality": float(rng.random() < 0.65)}


def test_identical_sides_give_zero_differences_and_point_intervals() -> None:
    rows = _table(_random_cell("mbpp", 40, 1, lambda plain, rng: plain) + _random_cell("chat", 25, 2, lambda p, r: p))
    assert len(rows) == 3
    for row in rows:
        for m in METRICS:
            assert row[f"{m}_plain"] == row[f"{m}_adapted"], m
            assert row[f"{m}_diff"] == row[f"{m}_lo"] == row[f"{m}_hi"] == 0.0, (row["scope"], m)


def test_one_more_residual_forward_everywhere_gives_exactly_plus_one() -> None:
    rows = _table(_random_cell("mbpp", 40, 3, _one_more_forward) + _random_cell("chat", 25, 4, _one_more_forward))
    assert {r["scope"] for r in rows} == {"benchmark", "macro"}
    for row in rows:
        m = "mean_residual_forwards"
        assert row[f"{m}_diff"] == row[f"{m}_lo"] == row[f"{m}_hi"] == 1.0, row["scope"]
        assert row["one_forward_share_adapted"] == 0.0 < row["one_forward_share_plain"]
        assert row["one_forward_share_lo"] < row["one_forward_share_hi"] <= 0.0  # the pairs differ by example


def test_macro_resamples_each_benchmark_on_its_own() -> None:
    """+1 forward on one benchmark, +3 on the other: the mean of the two benchmarks' differences is 2
    in every resample (one pooled mean over examples drawn across both would spread around it)."""
    def plus(k: int) -> Callable[[dict, random.Random], dict]:
        return lambda plain, rng: {**plain, "residual_forwards": plain["residual_forwards"] + k}

    rows = _by_key(_table(_random_cell("mbpp", 30, 5, plus(1)) + _random_cell("chat", 50, 6, plus(3))))
    macro = rows[("macro", "m-ar", None, "greedy", None, "lora", None, None)]
    assert macro["n"] == 80
    assert macro["mean_residual_forwards_diff"] == macro["mean_residual_forwards_lo"] == 2.0
    assert macro["mean_residual_forwards_hi"] == 2.0
    for bench, k in (("mbpp", 1.0), ("chat", 3.0)):
        row = rows[("benchmark", "m-ar", bench, "greedy", None, "lora", None, None)]
        assert row["mean_residual_forwards_lo"] == row["mean_residual_forwards_hi"] == k


def test_benchmarks_are_resampled_independently() -> None:
    """Two benchmarks holding the same examples: independent draws make the macro interval about
    1/sqrt(2) as wide as each benchmark's; one index stream shared by both would leave it as wide."""
    rows = _by_key(_table(_random_cell("mbpp", 100, 9, _noisy_gain) + _random_cell("chat", 100, 9, _noisy_gain)))
    m = "mean_residual_forwards"
    width = {k[0] + str(k[2]): r[f"{m}_hi"] - r[f"{m}_lo"] for k, r in rows.items()}
    assert width["benchmarkmbpp"] == pytest.approx(width["benchmarkchat"], rel=0.25)
    assert 0.55 * width["benchmarkmbpp"] < width["macroNone"] < 0.85 * width["benchmarkmbpp"], width


def test_intervals_bracket_the_difference_repeat_and_shrink_with_n() -> None:
    small = _table(_random_cell("mbpp", 100, 7, _noisy_gain))
    assert _table(_random_cell("mbpp", 100, 7, _noisy_gain)) == small  # the same on every run
    large = _table(_random_cell("mbpp", 400, 7, _noisy_gain))
    for m in METRICS:
        for rows in (small, large):
            for row in rows:
                assert row[f"{m}_lo"] <= row[f"{m}_diff"] <= row[f"{m}_hi"], (m, row["n"], row["scope"])
    for m in ("preserved_share", "mean_residual_forwards", "mean_residual_wall_s", "stream_quality_pct",
              "one_forward_share"):
        width = {rows[0]["n"]: rows[0][f"{m}_hi"] - rows[0][f"{m}_lo"] for rows in (small, large)}
        assert 0 < width[400] < 0.7 * width[100], (m, width)


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------

HEADING = "## Table 3 with paired 95 % intervals"


def test_the_report_shows_the_intervals_only_when_a_variant_has_rows(tmp_path: Path) -> None:
    with_variant = write_record_set(tmp_path / "a", RecordSet(_random_cell("mbpp", 12, 8, _noisy_gain), []),
                                    with_steps=False, with_runs=False)
    text = write_report(with_variant, threads=1, with_figures=False).markdown_path.read_text()
    section = text[text.index(HEADING):]
    assert text.index("## Adaptation before → after (Table 3)") < text.index(HEADING)
    assert "| m-ar · greedy · lora | mbpp | 12 | draft preserved |" in section
    assert "average (macro)" in section and "mean residual wall (ms)" in section
    plain_only = [p for p in _random_cell("mbpp", 12, 8, _noisy_gain) if p.variant is None]
    without = write_record_set(tmp_path / "b", RecordSet(plain_only, []), with_steps=False, with_runs=False)
    text = write_report(without, threads=1, with_figures=False).markdown_path.read_text()
    assert HEADING not in text and "Table 3" not in text

