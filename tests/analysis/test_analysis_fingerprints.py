"""One meaning per row: each (cell fingerprint, example) counted once; several fingerprints of one cell
name are separate, labelled rows; --latest keeps the newest; rows without a fingerprint still work.

Record sets come from hypothesis (tests/support/analysis_fixtures.py); a copy of some rows is written again
by an older run with poisoned numbers, so any double counting or a wrong pick shows.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from analysis.fingerprints import differing_keys
from analysis.report import write_report
from analysis.tables import build_tables
from streamgen.results.records import PairRecord, to_table
from tests.analysis.test_analysis_stats import HYPO, assert_matches, cell_stats, reference
from tests.support.analysis_fixtures import RecordSet, pair_record, record_sets, write_record_set

POISON = dict(base_forwards=10**6, residual_forwards=1, base_quality=1.0, stream_quality=0.0)


@st.composite
def with_older_copies(draw: st.DrawFn) -> tuple[RecordSet, RecordSet]:
    """(what was written, what must be counted): some rows written twice, first by an older run."""
    records = draw(record_sets())
    copied = draw(st.lists(st.sampled_from(records.pairs), max_size=len(records.pairs), unique_by=id))
    older = [dataclasses.replace(p, run_id="run-0", shard_id="old", **POISON) for p in copied]
    return RecordSet(records.pairs + older, records.steps), records


@HYPO
@given(with_older_copies())
def test_every_table_counts_each_cell_example_once(sets: tuple[RecordSet, RecordSet]) -> None:
    written, counted = sets
    with tempfile.TemporaryDirectory() as tmp:
        write_record_set(Path(tmp), written)
        t = build_tables(tmp, threads=1)
    expected = reference(counted.pairs, cell_stats, with_macro=True)
    assert_matches(t["cells"], {k: v for k, v in expected.items() if k[0] != "macro"})
    assert_matches(t["models"], expected)
    prints = t["fingerprints"].to_pylist()
    assert sum(r["n_duplicates"] for r in prints) == len(written.pairs) - len(counted.pairs)
    assert all(r["settings_tag"] is None and r["kept"] for r in prints)


def _settings(**changes: object) -> str:
    base = {"model": "m-ar", "benchmark": "humaneval", "max_new_tokens": 16, "limit": 3, "system_prompt": "x"}
    return json.dumps({**base, **changes}, sort_keys=True)


def _two_budgets(tmp: Path) -> None:
    """One cell name, two budgets: run-1 (16 tokens, 3 examples) and run-2 (32 tokens, 2 examples)."""
    rows = [pair_record(run_id="run-1", example_id=f"e{i}", base_forwards=4, cell_fingerprint="fp16",
                        cell_settings=_settings()) for i in range(3)]
    rows += [pair_record(run_id="run-2", example_id=f"e{i}", base_forwards=8, cell_fingerprint="fp32",
                         cell_settings=_settings(max_new_tokens=32)) for i in range(2)]
    write_record_set(tmp, RecordSet(rows, []), with_steps=False)


def test_different_budgets_are_two_labelled_rows_and_latest_keeps_the_newest(tmp_path: Path) -> None:
    _two_budgets(tmp_path)
    cells = [r for r in build_tables(tmp_path, ["cells"], threads=1)["cells"].to_pylist()
             if r["scope"] == "benchmark"]
    by_tag = {r["settings_tag"]: r for r in cells}
    assert set(by_tag) == {"max_new_tokens=16", "max_new_tokens=32"}
    assert by_tag["max_new_tokens=16"]["n_included"] == 3 and by_tag["max_new_tokens=32"]["n_included"] == 2
    assert by_tag["max_new_tokens=16"]["median_speedup_forwards"] == 4 / 2  # base 4 / residual 2
    assert by_tag["max_new_tokens=32"]["median_speedup_forwards"] == 8 / 2
    latest = [r for r in build_tables(tmp_path, ["cells"], threads=1, latest=True)["cells"].to_pylist()
              if r["scope"] == "benchmark"]
    assert [(r["settings_tag"], r["n_included"]) for r in latest] == [(None, 2)]
    text = write_report(tmp_path, threads=1, with_figures=False).markdown_path.read_text()
    top = text.split("## Runs")[0]
    assert "several fingerprints" in top and "[max_new_tokens=16]" in text and "[max_new_tokens=32]" in text
    text = write_report(tmp_path, threads=1, with_figures=False, latest=True).markdown_path.read_text()
    assert "`--latest`: 1 older fingerprint(s) left out (3 rows)" in text
    assert "[max_new_tokens" not in text.split("## Runs")[1]


def test_rows_without_a_fingerprint_are_their_own_cell(tmp_path: Path) -> None:
    """Files written before the columns existed: read as NULL, keyed by cell_id, labelled as such."""
    old = to_table([pair_record(example_id="e0", cell_id="old-cell")], PairRecord).drop_columns(
        ["cell_fingerprint", "cell_settings"])
    (tmp_path / "pairs").mkdir()
    pq.write_table(old, tmp_path / "pairs" / "old.parquet")
    new = [pair_record(run_id="run-2", example_id="e0", cell_fingerprint="fpnew", cell_settings=_settings())]
    write_record_set(tmp_path, RecordSet(new, []), with_steps=False, with_runs=False)
    cells = [r for r in build_tables(tmp_path, ["cells"], threads=1)["cells"].to_pylist()
             if r["scope"] == "benchmark"]
    assert sorted(r["n_included"] for r in cells) == [1, 1]
    tags = sorted(r["settings_tag"] for r in cells)
    assert tags[0] == "fingerprint cell:old-cell (no settings recorded)" and tags[1].startswith("fingerprint")


def test_differing_keys_name_only_what_differs() -> None:
    a, b = json.loads(_settings()), json.loads(_settings(limit=5, system_prompt="y"))
    assert differing_keys([a, b]) == ["limit", "system_prompt"]
    assert differing_keys([a, dict(a)]) == []
    assert differing_keys([a, {k: v for k, v in a.items() if k != "limit"}]) == ["limit"]


def test_the_typing_table_keeps_fingerprints_apart(tmp_path: Path) -> None:
    """The typing table (issue 19, built after the fingerprints) splits one cell name by settings too:
    3 examples at 16 tokens and 2 at 32 are two labelled rows per (rate, policy), never one row of 5."""
    import random

    from analysis.typing_table import build_typing
    from tests.support.analysis_fixtures import steps_for

    rows = [pair_record(run_id="run-1", example_id=f"e{i}", cell_fingerprint="fp16", cell_settings=_settings())
            for i in range(3)]
    rows += [pair_record(run_id="run-2", example_id=f"e{i}", cell_fingerprint="fp32",
                         cell_settings=_settings(max_new_tokens=32)) for i in range(2)]
    rng = random.Random(0)
    write_record_set(tmp_path, RecordSet(rows, [s for p in rows for s in steps_for(p, rng)]))
    summary = build_typing(tmp_path, None, threads=1).summary.to_pylist()
    every = [r for r in summary if r["policy"] == "every" and r["rate"] == summary[0]["rate"]]
    assert sorted((r["settings_tag"], r["n"]) for r in every) == [("max_new_tokens=16", 3), ("max_new_tokens=32", 2)]


def test_latest_also_picks_the_rows_of_the_typing_and_population_tables(tmp_path: Path) -> None:
    """The report's --latest reaches the post-hoc tables too: a rerun with another budget (or limit) replaces
    the older setting there as well, instead of standing beside it."""
    from analysis.population import build_population
    from analysis.typing_table import build_typing
    from streamgen.config import TypingConfig
    from tests.analysis.test_timing_report import _steps

    rows = [pair_record(run_id="run-1", example_id=f"e{i}", n_segments=4, cell_fingerprint="fp16",
                        cell_settings=_settings()) for i in range(3)]
    rows += [pair_record(run_id="run-2", example_id=f"e{i}", n_segments=4, cell_fingerprint="fp32",
                         cell_settings=_settings(max_new_tokens=32)) for i in range(2)]
    write_record_set(tmp_path, RecordSet(rows, [s for p in rows for s in _steps(p, (10, 20, 30, 40))]))
    cfg = TypingConfig(chars_per_s=[10.0], policies=["every"], populations=["desktop"], users=3)
    for latest, runs in ((False, {"run-1": 3, "run-2": 2}), (True, {"run-2": 2})):
        typed = build_typing(tmp_path, cfg, threads=1, latest=latest).examples.to_pylist()
        people = build_population(tmp_path, cfg, threads=1, latest=latest).examples.to_pylist()
        tags = {r["settings_tag"] for r in typed}
        assert len(typed) == sum(runs.values()) and len(tags) == len(runs), (latest, tags)
        assert len(people) == 3 * sum(runs.values())
