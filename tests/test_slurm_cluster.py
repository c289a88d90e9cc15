"""Against the real single-node Slurm cluster of .ci/slurm.sh (slurmctld + slurmd + slurmdbd, 2 fake GPUs).

Skipped when no controller answers. Each test submits real jobs; the grids are tiny because the
jobs and pytest share 2 cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jobs import regression, slurm
from streamgen.config import REPO_ROOT, ConfigError, GridConfig, cluster_config, grid_config


def _controller_answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=15, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.skipif(not _controller_answers(), reason="no Slurm controller answers (sinfo failed): start the "
                       "local cluster with `sudo bash .ci/slurm.sh install && sudo bash .ci/slurm.sh start`"),
]

COMPARED = ("base_forwards", "residual_forwards", "speculative_forwards", "draft_tokens_final",
            "accepted_tokens_final", "base_answer", "stream_answer", "excluded_reason", "error_type")


@pytest.fixture
def job_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A temp HOME (Ray's bootstrap file) for this process and for jobs (sbatch exports our env)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return {**os.environ, "HOME": str(tmp_path / "home")}


def _workflow(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "workflows" / "full_grid.py"), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=900, check=False)


def _by_example(results_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    rows = regression.load_pairs(results_dir)
    keyed = {(r["cell_id"], r["example_id"]): {f: r[f] for f in COMPARED} for r in rows}
    assert len(keyed) == len(rows), "an example appears twice"
    return keyed


def _job_ids() -> set[str]:
    out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-o", "JobID", "-S", "now-1days"],
                         capture_output=True, text=True, timeout=30, check=True)
    return set(out.stdout.split())


def test_job_gets_cpus_and_gpus_from_slurm(tmp_path: Path, job_env: dict[str, str]) -> None:
    cluster = cluster_config("slurm", ["gpus_per_node=2", "cpus_per_task=2", f"log_dir={tmp_path / 'logs'}"])
    job = slurm.submit(GridConfig(), cluster, task=_ray_resources)
    resources = slurm.follow(job, poll_s=1.0)
    assert resources["CPU"] == 2.0 and resources["GPU"] == 2.0
    assert resources["cuda_visible"] == "0,1"  # Slurm bound both fake GPUs to the job


def _ray_resources(address: str) -> dict[str, Any]:
    import ray

    return {**ray.cluster_resources(), "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "address": address}


def test_more_gpus_than_the_cluster_has_is_refused_before_anything_runs(
        tmp_path: Path, job_env: dict[str, str]) -> None:
    configs = tmp_path / "configs"
    shutil.copytree(REPO_ROOT / "configs", configs)
    yaml = configs / "cluster" / "slurm.yaml"
    yaml.write_text(yaml.read_text().replace("gpus_per_node: 0", "gpus_per_node: 3"))
    before = _job_ids()
    proc = _workflow(["cluster=slurm", "grid=smoke", f"results_dir={tmp_path / 'r'}"], tmp_path,
                     {**job_env, "STREAMGEN_CONFIGS": str(configs)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "gpus_per_node=3 but the largest node in partition 'debug' has 2 GPU(s)" in proc.stderr
    assert "set gpus_per_node=2 or fewer" in proc.stderr and "nothing was submitted" in proc.stderr
    assert _job_ids() == before and not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match="gpus_per_node=3"):  # the library call refuses the same way
        slurm.submit(grid_config("smoke"), cluster_config("slurm", ["gpus_per_node=3"]))


def test_smoke_grid_on_slurm_equals_local(tmp_path: Path, job_env: dict[str, str]) -> None:
    on_slurm = _workflow(["cluster=slurm", "grid=smoke", f"results_dir={tmp_path / 'slurm'}"], tmp_path, job_env)
    assert on_slurm.returncode == 0, on_slurm.stderr[-3000:]
    assert "submitted job" in on_slurm.stderr
    local = _workflow(["grid=smoke", f"results_dir={tmp_path / 'local'}"], tmp_path, job_env)
    assert local.returncode == 0, local.stderr[-3000:]
    a, b = _by_example(tmp_path / "slurm"), _by_example(tmp_path / "local")
    assert a and a.keys() == b.keys()
    assert a == b  # forward counts, lengths and both answers, example by example


def test_preemption_requeues_and_resumes_without_loss_or_duplicates(
        tmp_path: Path, job_env: dict[str, str]) -> None:
    grid = grid_config("smoke", ["models=[tiny-llama]", "benchmarks=[mbpp,coedit]", "limit=3", "shard_size=1",
                                 "workers=1", f"results_dir={tmp_path / 'r'}"])  # 12 one-example shards
    cluster = cluster_config("slurm", ["timeout_min=30", f"log_dir={tmp_path / 'logs'}"])  # > 10: USR2 = preempt
    job = slurm.submit(grid, cluster)
    pairs = tmp_path / "r" / "pairs"
    deadline = time.monotonic() + 600
    while not list(pairs.glob("**/*.parquet")):
        assert time.monotonic() < deadline and not job.done(), "no shard finished"
        time.sleep(0.5)
    subprocess.run(["scancel", "--signal=USR2", job.job_id], check=True, timeout=30)
    done_at_signal = len(list(pairs.glob("**/*.parquet")))
    summary = slurm.follow(job, poll_s=1.0)
    log_text = job.paths.stderr.read_text()
    assert "this job is preempted" in log_text and "attempt 1" in log_text, log_text[-3000:]
    assert summary.shards_skipped >= done_at_signal >= 1  # the resumed run kept the finished shards
    assert summary.shards_skipped + summary.shards_done == summary.shards_total == 12
    runs = regression.load_pairs(tmp_path / "r")
    assert sorted((r["cell_id"], r["example_id"]) for r in runs) == sorted(
        {(r["cell_id"], r["example_id"]) for r in runs})  # nothing duplicated
    assert len(runs) == 12  # nothing lost
    assert len({r["run_id"] for r in runs}) == 2  # rows from both attempts, each written once
    states = subprocess.run(["sacct", "-j", job.job_id, "-D", "-X", "-n", "-P", "-o", "State"],
                            capture_output=True, text=True, timeout=30, check=True).stdout.split()
    assert states == ["REQUEUED", "COMPLETED"]  # Slurm's own record: one requeue, then done

