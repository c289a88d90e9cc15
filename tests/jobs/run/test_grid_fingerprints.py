"""Several real grid runs into ONE results directory (real Ray, tiny model): the report counts each
(cell, example) once and shows runs with different settings as separate, labelled rows (integration).

Runs: limit=2, then limit=3 (same budget), then limit=3 with a larger budget, then the last again
with another shard size (same fingerprint, every example written twice).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

from analysis.report import write_report  # noqa: E402
from analysis.tables import build_tables  # noqa: E402
from jobs.run.driver import run_grid  # noqa: E402
from jobs.run.local_ray import start_ray, stop_ray  # noqa: E402
from streamgen.config import RayConfig, grid_config  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = ["models=[tiny-llama]", "benchmarks=[coedit]", "acceptance=[greedy]", "workers=1", "shard_size=3"]
RUNS = (["limit=2", "max_new_tokens=6"], ["limit=3", "max_new_tokens=6"], ["limit=3", "max_new_tokens=8"],
        ["limit=3", "max_new_tokens=8", "shard_size=1"])


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    os.environ["HOME"] = str(tmp_path_factory.mktemp("home"))
    root = tmp_path_factory.mktemp("one-dir")
    session = start_ray(RayConfig(num_cpus=2, object_store_mb=128), default_num_cpus=2)
    try:
        for extra in RUNS:
            summary = run_grid(grid_config("smoke", [*BASE, *extra, f"results_dir={root}"]), progress=False)
            assert not summary.shards_failed and summary.shards_done >= 1
    finally:
        stop_ray(session)
    return root


def _benchmark_rows(table) -> list[dict]:  # type: ignore[no-untyped-def]
    return [r for r in table.to_pylist() if r.get("scope", "benchmark") == "benchmark"]


def test_rows_carry_fingerprints_and_settings(results: Path) -> None:
    pairs = [r for f in sorted((results / "pairs").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert len(pairs) == 2 + 3 + 3 + 3, "every run wrote its own rows (the last one all again)"
    assert len({r["cell_fingerprint"] for r in pairs}) == 3
    steps = [r for f in sorted((results / "steps").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert {r["cell_fingerprint"] for r in steps} == {r["cell_fingerprint"] for r in pairs}
    assert all(r["draft_fingerprint"] and len(r["draft_fingerprint"]) == 16 for r in steps)


def test_each_cell_example_counted_once_with_labelled_rows(results: Path) -> None:
    t = build_tables(results, threads=1)
    cells = {r["settings_tag"]: r["n_total"] for r in _benchmark_rows(t["cells"])}
    assert cells == {"limit=2, max_new_tokens=6": 2, "limit=3, max_new_tokens=6": 3,
                     "limit=3, max_new_tokens=8": 3}
    for name in ("step_summary", "draft_stability"):
        assert {r["settings_tag"]: r["n_examples"] for r in t[name].to_pylist()} == {
            k: v for k, v in cells.items()}, name
    assert {r["settings_tag"]: r["n"] for r in t["model_speedups"].to_pylist()} == cells
    assert sum(r["n"] for r in _benchmark_rows(t["speed_quality"])) == sum(cells.values())
    dup = {r["settings_tag"]: r["n_duplicates"] for r in t["fingerprints"].to_pylist()}
    assert dup == {"limit=2, max_new_tokens=6": 0, "limit=3, max_new_tokens=6": 0, "limit=3, max_new_tokens=8": 3}


def test_latest_keeps_the_most_recent_runs_fingerprint(results: Path) -> None:
    t = build_tables(results, ["cells"], threads=1, latest=True)
    assert [(r["settings_tag"], r["n_total"]) for r in _benchmark_rows(t["cells"])] == [(None, 3)]
    text = write_report(results, threads=1, with_figures=False, out_dir=results / "rep").markdown_path.read_text()
    top = text.split("## Runs")[0]
    assert "several fingerprints" in top and "3 row(s) repeat" in top
    assert "[limit=2, max_new_tokens=6]" in text
