"""workflows/adapt.py: argument errors, leakage refused from the command line, the submitit path, and
(slow, integration) the whole smoke chain with real Ray, sandbox and DuckDB."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from streamgen.adapt import checkpoint
from streamgen.adapt.config import adapt_config
from streamgen.config import REPO_ROOT, ModelConfig, cluster_config, load
from workflows import adapt as workflow


def test_bad_stage_and_leaky_source_exit_2_before_any_model_loads(tmp_path: Path, capsys) -> None:
    assert workflow.main(["adapt=smoke", "stage=nope"]) == 2
    assert "stage=nope" in capsys.readouterr().err
    leaky = ["adapt=smoke", "stage=pairs", f"output.dir={tmp_path}", "source.benchmark_overrides=[options.split=test]"]
    assert workflow.main(leaky) == 2
    err = capsys.readouterr().err
    assert "leaks into evaluation" in err and "MBPP task 11" in err
    assert not (tmp_path / "pairs.parquet").exists()


def _not_here() -> dict[str, str]:
    raise AssertionError("cluster=debug must submit a job, not run the stages in the caller")


@pytest.mark.slow
def test_model_stages_run_as_a_submitit_job(tmp_path: Path) -> None:
    """cluster=debug: the AdaptJob that Slurm would run, in this process."""
    from jobs.cluster.adapt_job import run

    cfg = adapt_config("smoke", ["source.limit=2", "curve.heldout=0", "train.steps=2", "train.save_every=1", f"output.dir={tmp_path}",
                                 f"output.configs_dir={tmp_path / 'models'}", "cluster=debug"])
    debug = dataclasses.replace(cluster_config("debug"), log_dir=str(tmp_path / "logs"))  # not the repo's results/
    paths = run(cfg, ("pairs", "train", "merge"), here=_not_here, cluster=debug)
    assert any((tmp_path / "logs").iterdir())  # the job ran as a submitted job, its logs where asked
    assert Path(paths["train"]).name == "step-000002"
    adapted = load(ModelConfig, paths["merge"])
    assert (adapted.variant, adapted.base_model, Path(adapted.path)) == ("smoke-2", "tiny-llama", tmp_path / "model")


@pytest.mark.slow
@pytest.mark.integration
def test_smoke_chain_end_to_end(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    shutil.copytree(REPO_ROOT / "configs", configs)
    env = {**os.environ, "STREAMGEN_CONFIGS": str(configs)}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "workflows/adapt.py", "adapt=smoke", f"output.dir={out}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Table 3" in proc.stdout and "smoke-20" in proc.stdout
    assert "95 % bootstrap interval" in proc.stdout  # the paired intervals follow Table 3
    assert (configs / "models" / "tiny-llama-adapt-smoke.yaml").is_file()
    rows = [r for f in (out / "eval").glob("pairs/**/*.parquet") for r in pq.read_table(f).to_pylist()]
    assert {(r["model"], r["variant"]) for r in rows} == {("tiny-llama", None), ("tiny-llama", "smoke-20")}
    assert (out / "curve.png").is_file() and f"training curve: {out / 'curve.png'}" in proc.stdout
    evaluated = [json.loads(line)["step"] for line in (out / "curve.jsonl").read_text().splitlines()
                 if "heldout_agreement" in line]
    assert evaluated == [0, 10, 20]  # the recipe's curve.heldout=2, save_every=10


def _adapt(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "workflows/adapt.py", "adapt=smoke", "stage=pairs", "stage=train",
                             "train.steps=120", "train.save_every=10", *args], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sigterm_mid_training_then_the_same_command_gives_the_uninterrupted_adapter(tmp_path: Path) -> None:
    env = dict(os.environ)
    reference = _adapt([f"output.dir={tmp_path / 'ref'}"], env)
    out = tmp_path / "run"
    run = _adapt([f"output.dir={out}"], env)
    try:
        deadline = time.monotonic() + 300
        while not (out / "checkpoints" / "step-000010").is_dir():
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read() if run.stderr else ""
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "interrupted by SIGTERM" in err and "Traceback" not in err
    stopped_at = checkpoint.latest(out / "checkpoints")
    assert stopped_at is not None and 10 <= stopped_at.step < 120, "the signal must land mid-training"
    again = _adapt([f"output.dir={out}"], env)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-2000:]
    assert f"resuming from {stopped_at.path}" in err
    _, err = reference.communicate(timeout=600)
    assert reference.returncode == 0, err[-2000:]
    final, ref = checkpoint.latest(out / "checkpoints"), checkpoint.latest(tmp_path / "ref" / "checkpoints")
    assert final is not None and ref is not None and final.step == ref.step == 120
    assert (final.path / checkpoint.ADAPTER_FILE).read_bytes() == (ref.path / checkpoint.ADAPTER_FILE).read_bytes()
    assert (out / "curve.jsonl").read_text() == (tmp_path / "ref" / "curve.jsonl").read_text()
