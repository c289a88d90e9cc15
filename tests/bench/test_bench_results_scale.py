"""bench/bench_results_scale.py at a tiny size, so the study-shape benchmark cannot rot: it builds 40 of
grid=full's shards at the writer's paths and runs its dry-run reader (which plans grid=full again and must
find all 40 complete: the build wrote each shard's real identity). The report readers are tested elsewhere;
here they would double the time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_builds_the_study_shape_and_runs_its_readers(tmp_path: Path) -> None:
    root = tmp_path / "study"
    proc = subprocess.run([sys.executable, "bench/bench_results_scale.py", "--dir", str(root), "--shards", "40",
                           "--readers", "dry_run"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"built {root}: 40 shards, 81 Parquet files"), proc.stdout
    rows = {ln.split()[0]: ln for ln in lines[2:]}
    assert set(rows) == {"dry_run"}, proc.stdout
    assert not any("FAILED" in ln for ln in rows.values()), proc.stdout
    assert "40 already complete" in rows["dry_run"], proc.stdout
