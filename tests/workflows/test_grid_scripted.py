"""grid=scripted through workflows/full_grid.py: outcomes known by design, checked on the written rows.

Scripted models of all four families (streamgen/models/scripted.py) on CoEdIT, greedy: ``constant`` keeps
every included draft whole (accepted == draft, EOS included) at exactly the family floor (LLaDA and
Dream too: the buffer after a kept EOS lies after the answer and is not refilled) and the report's
keep-all share is 100 %; ``lastsegment`` keeps nothing; ``prefix`` keeps exactly k at the
final step; greedy stream == base for all of them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from streamgen.config import REPO_ROOT
from streamgen.models.scripted import SCRIPTS, pool_tokens

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAMILIES = ("ar", "refusion", "llada", "dream", "dgemma")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scripted") / "results"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "workflows" / "full_grid.py"), "grid=scripted",
                           f"results_dir={out}"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _rows(results: Path, table: str) -> list[dict]:
    return [r for f in sorted((results / table).rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_every_family_shows_its_designed_outcome(results: Path) -> None:
    pairs = [p for p in _rows(results, "pairs") if p["excluded_reason"] is None]
    assert {p["error_type"] for p in pairs} == {None}
    assert {p["model"] for p in pairs} == {f"scripted-{f}-{b}" for f in FAMILIES
                                           for b in ("constant", "lastsegment", "prefix")}
    steps = {(s["model"], s["example_id"], s["step"]): s for s in _rows(results, "steps")}
    for p in pairs:
        behaviour = p["model"].rsplit("-", 1)[1]
        assert p["stream_answer"] == p["base_answer"], p["model"]
        draft, accepted = p["draft_tokens_final"], p["accepted_tokens_final"]
        assert draft == SCRIPTS[behaviour].length + 1  # the previous answer, EOS included
        if behaviour == "constant":
            assert accepted == draft and p["residual_forwards"] == p["min_residual_forwards"]
        elif behaviour == "prefix":
            assert accepted == SCRIPTS["prefix"].k
        else:
            # design precondition: the last segment's byte length is not a multiple of the pool size
            last = steps[(p["model"], p["example_id"], p["n_segments"])]
            prev = steps[(p["model"], p["example_id"], p["n_segments"] - 1)]
            assert (last["prefix_chars"] - prev["prefix_chars"]) % len(pool_tokens())
            assert accepted == 0


def test_report_keep_all_share(results: Path) -> None:
    from analysis.tables import build_tables

    dist = [r for r in build_tables(results, threads=1)["distribution"].to_pylist() if r["scope"] == "pooled"]
    share = {r["model"]: r["share_keep_all"] for r in dist}
    assert len(share) == 3 * len(FAMILIES)
    for model, value in share.items():
        assert value == (1.0 if model.endswith("-constant") else 0.0), model
