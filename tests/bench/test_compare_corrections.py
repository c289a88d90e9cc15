"""bench/compare_corrections.py on two scripted runs at word granularity, without and with typos: its work
table equals a plain loop over the Parquet rows, and the path under test is taken (steps that rewrote text)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.compare_corrections import compare, main
from streamgen.config import TypingConfig
from tests.support.view_support import scripted_results

pytestmark = pytest.mark.slow  # two scripted grids at word granularity: about a minute

WORD = ("granularity=word",)
TYPOS = (*WORD, "corrections.typo_rate=0.2", "corrections.correction_delay_chars=2")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("corr")
    return scripted_results(root / "a", limit=2, overrides=WORD), scripted_results(root / "b", limit=2, overrides=TYPOS)


def _rows(root: Path, table: str) -> list[dict]:
    return [r for f in sorted((root / table).rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def _reference_work(a: Path, b: Path) -> dict[str, dict[str, int]]:
    """Per benchmark, the sums the work table reports, by a loop over the rows."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    key = lambda r: (r["model"], r["benchmark"], r["example_id"])  # noqa: E731
    pairs_a = {key(r): r for r in _rows(a, "pairs") if r["excluded_reason"] is None and r["error_type"] is None}
    pairs_b = {key(r): r for r in _rows(b, "pairs") if r["excluded_reason"] is None and r["error_type"] is None}
    steps_b = defaultdict(list)
    for s in _rows(b, "steps"):
        steps_b[key(s)].append(s)
    for k in pairs_a.keys() & pairs_b.keys():
        o = out[k[1]]
        o["pairs"] += 1
        o["steps_b"] += len(steps_b[k])
        o["rewrites_b"] += sum(1 for s in steps_b[k] if (s["chars_deleted"] or 0) > 0)
        o["correction_keys_b"] += sum(s["correction_keys"] or 0 for s in steps_b[k])
        o["residual_fwd_a"] += pairs_a[k]["residual_forwards"]
        o["residual_fwd_b"] += pairs_b[k]["residual_forwards"]
        o["pairs_residual_differs"] += pairs_a[k]["residual_forwards"] != pairs_b[k]["residual_forwards"]
        o["speculative_fwd_b"] += pairs_b[k]["speculative_forwards"]
    return out


def test_the_work_table_is_a_loop_over_the_rows(runs: tuple[Path, Path]) -> None:
    a, b = runs
    work, waits = compare(str(a), str(b), TypingConfig(policies=["every"], populations=["mobile"], users=3))
    (row,) = work.to_pylist()
    expected = _reference_work(a, b)["coedit"]
    assert expected["rewrites_b"] > 0, "the path under test: steps that rewrote text a step before them sent"
    assert expected["correction_keys_b"] > 0
    assert {k: row[k] for k in expected} == dict(expected)
    (wait,) = waits.to_pylist()
    assert wait["n"] == 3 * expected["pairs"] and wait["preset"] == "mobile"


def test_a_directory_without_results_is_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "none"), str(tmp_path / "none")]) == 2
    assert "no result files" in capsys.readouterr().err
