"""A data-only benchmark (YAML + JSONL + MANIFEST line, no Python) through workflows/full_grid.py on a
scripted model, checked on the written rows and the printed report.

``scripted-ar-constant`` answers ``ABCDEF`` to every request (streamgen/models/scripted.py: the first six
pool tokens), so the exact scorer's verdicts are known by design: q1 lists ``ABCDEF`` among its
references (1.0), q2 does not (0.0); the report's quality is their mean, 50 %.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from streamgen.config import REPO_ROOT
from streamgen.models.scripted import SCRIPTS, pool_tokens
from streamgen.models.tokenizers import tiny_tokenizer
from streamgen.requests.segment import segment
from tests.streamgen.benchmarks.test_benchmark_from_data import NAME, ROWS, write_data_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_data_only_benchmark_runs_through_the_grid_and_the_report(tmp_path: Path) -> None:
    answer = tiny_tokenizer().decode(list(pool_tokens()[: SCRIPTS["constant"].length]))
    assert answer == "ABCDEF" and answer in ROWS[0]["answers"] and answer not in ROWS[1]["answers"]  # the design
    configs, data = write_data_benchmark(tmp_path)
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "workflows" / "full_grid.py"), "grid=scripted",
                           "models=[scripted-ar-constant]", f"benchmarks=[{NAME}]", "workers=1",
                           f"data_dir={data}", f"results_dir={out}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "STREAMGEN_CONFIGS": str(configs)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    pairs = sorted((r for f in sorted((out / "pairs").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()),
                   key=lambda r: r["example_id"])
    assert [p["example_id"] for p in pairs] == ["q1", "q2"] and {p["benchmark"] for p in pairs} == {NAME}
    assert [p["n_segments"] for p in pairs] == [len(segment(r["question"])) for r in ROWS] == [2, 2]
    assert [p["excluded_reason"] for p in pairs] == [None, None]
    assert [p["base_answer"] for p in pairs] == [answer, answer] == [p["stream_answer"] for p in pairs]
    assert [(p["base_quality"], p["stream_quality"]) for p in pairs] == [(1.0, 1.0), (0.0, 0.0)]
    assert [p["base_score_status"] for p in pairs] == ["passed", "failed"]
    assert all(re.fullmatch(r"data:[0-9a-f]{8}\+exact:1", p["scorer_version"]) for p in pairs)
    report = proc.stdout + proc.stderr
    assert re.search(rf"\| scripted-ar-constant · greedy \| {NAME} \| 2 \| 50\.0 \| 50\.0 \|", report), report[-3000:]
