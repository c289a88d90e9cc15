"""The grid submitted as Ray users submit work: ``ray job submit`` to a real two-node Ray cluster, ``ray job stop``
mid-run, then the same submission again (issue 54).

The cluster (tests/support/ray_two_nodes.py) is a head in the network namespace ``sgci-nodeA`` and a worker in
``sgci-nodeB`` of .ci/slurm.sh, so the two raylets are separate nodes on separate addresses; this process submits
from the root namespace over the bridge, to the head's dashboard, with ``--working-dir`` set to this checkout.
Skipped without root or without those namespaces (.ci/slurm.sh not started), and without the job server's
packages (``ray[default]``) unless CI requires every extra (``STREAMGEN_REQUIRE_EXTRAS``), where that fails.

One module fixture does the work once (the grid is the smoke grid's tiny-llama part: 2 benchmarks × 2 acceptance
cells × 4 one-example shards = 16 shards): a local run of the grid, the first submission stopped by ``ray job
stop`` once a shard is on disk, the same submission again. Each example waits a few seconds in the actors
(tests/support/perturb: ``slow-examples``, a sleep that changes no token and no count), so the stop lands mid-run
on a fast or a loaded machine alike.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from streamgen.config import REPO_ROOT
from tests.support import ray_two_nodes
from tests.support.analysis_fixtures import read_pairs, rows_by_example

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GRID = ["grid=smoke", "models=[tiny-llama]", "limit=4", "shard_size=1"]
ON_THE_CLUSTER = ["cluster=ray"]  # the driver attaches to the cluster ray job submit names in RAY_ADDRESS
GPUS_PER_NODE = 1  # fake (Ray only counts them): one model actor per GPU, so one on each node
SHARDS = 16  # 2 benchmarks × 2 acceptance cells × 4 one-example shards
PERTURB = REPO_ROOT / "tests" / "support" / "perturb"
SLOW_S = 4  # each example's wait in the actors: 4 rounds of 2 units on 2 actors, ≥ 12 s after the first shard
WAIT_S = 600


def _runtime_env(configs: Path) -> dict[str, Any]:
    """What the job's processes get besides the working dir: ``configs`` (the cluster file of fake GPUs), the
    test-only slow examples, and ``ray job stop``'s grace before its SIGKILL (Ray's default 3 s) long enough for a
    loaded machine to close the run record."""
    path = os.pathsep.join(p for p in (str(PERTURB), os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"STREAMGEN_CONFIGS": str(configs), "PYTHONPATH": path,
                         "STREAMGEN_TEST_PERTURB": "slow-examples", "STREAMGEN_TEST_SLOW_S": str(SLOW_S),
                         "RAY_JOB_STOP_WAIT_TIME_S": "60"}}


def _rehearsal_configs(folder: Path) -> Path:
    """This checkout's configs with ``rehearsal: true`` in the ray cluster file: the nodes' GPUs are fake, so
    a model actor holding one runs its model on CPU (jobs/run/actors.py, ``pick_device``)."""
    configs = folder / "configs"
    shutil.copytree(REPO_ROOT / "configs", configs)
    ray_yaml = configs / "cluster" / "ray.yaml"
    text = ray_yaml.read_text()
    assert "\nrehearsal: false" in text, "configs/cluster/ray.yaml changed: update this test"
    ray_yaml.write_text(text.replace("\nrehearsal: false", "\nrehearsal: true"))
    return configs


def _ray_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts", *args]


def _submit(cluster: ray_two_nodes.TwoNodeRay, submission_id: str, results: Path, configs: Path) -> None:
    """``ray job submit --no-wait --working-dir <this checkout> -- python workflows/full_grid.py ...``."""
    cmd = _ray_cli("job", "submit", "--address", cluster.dashboard, "--submission-id", submission_id, "--no-wait",
                   "--working-dir", str(REPO_ROOT), "--runtime-env-json", json.dumps(_runtime_env(configs)),
                   "--", sys.executable, "workflows/full_grid.py", *GRID, *ON_THE_CLUSTER, f"results_dir={results}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert proc.returncode == 0 and "submitted successfully" in proc.stderr + proc.stdout, proc.stderr[-3000:]


# `ray job stop`'s own command, imported before the moment it is needed and run when told (a line on stdin):
# started then, the CLI's imports alone took 7 s here (more on a loaded machine), longer than a shard takes.
STOP_WHEN_TOLD = ("import sys\nfrom ray.scripts.scripts import main\nsys.stdin.readline()\n"
                  "sys.argv = ['ray', 'job', 'stop', '--address', sys.argv[1], sys.argv[2]]\nmain()\n")


@dataclass
class Submissions:
    local: Path  # the same grid run locally
    results: Path  # both submissions' results_dir (outside the working dir: every node writes there)
    shards_at_stop: int  # shard files on disk once the stopped job had ended
    first: Any  # ray.job_submission.JobDetails of the stopped submission
    second: Any  # ... of the resubmission
    first_logs: str
    second_logs: str
    actor_nodes: set[str]  # addresses of the nodes the state API saw the model actors on
    node_addresses: set[str]


def _shard_files(results: Path) -> int:
    return len(list(results.glob("pairs/**/*.parquet")))


def _until(what: str, condition: Any, client: Any, submission_id: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        status = client.get_job_status(submission_id)
        assert not status.is_terminal(), f"{what}: job {submission_id} ended {status}:\n" + \
            client.get_job_logs(submission_id)[-4000:]
        assert time.monotonic() < deadline, f"{what} (waited {WAIT_S} s)"
        time.sleep(0.5)


def _finished(client: Any, submission_id: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while not client.get_job_status(submission_id).is_terminal():
        assert time.monotonic() < deadline, f"job {submission_id} did not end within {WAIT_S} s"
        time.sleep(1.0)
    return client.get_job_info(submission_id)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ray_two_nodes.TwoNodeRay]:
    if reason := ray_two_nodes.no_namespaces():
        pytest.skip(reason)
    if reason := ray_two_nodes.no_job_server():
        if os.environ.get("STREAMGEN_REQUIRE_EXTRAS"):
            pytest.fail(f"{reason} (STREAMGEN_REQUIRE_EXTRAS is set: CI installs every extra)")
        pytest.skip(reason)
    with ray_two_nodes.two_node_ray(tmp_path_factory.mktemp("ray_nodes"), gpus=GPUS_PER_NODE) as running:
        yield running


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("local")
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "workflows" / "full_grid.py"), *GRID, f"results_dir={out}"],
                          cwd=out, env={**os.environ, "HOME": str(out)}, capture_output=True, text=True,
                          timeout=WAIT_S, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def submissions(local_run: Path, cluster: ray_two_nodes.TwoNodeRay,
                tmp_path_factory: pytest.TempPathFactory) -> Submissions:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(cluster.dashboard)
    shared = tmp_path_factory.mktemp("shared")  # every node sees it (one machine); outside the working dir
    results, configs = shared / "results", _rehearsal_configs(shared)
    stopper = subprocess.Popen([sys.executable, "-c", STOP_WHEN_TOLD, cluster.dashboard, "stopped"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _submit(cluster, "stopped", results, configs)
        _until("no shard was written", lambda: _shard_files(results) >= 1, client, "stopped")
        out, _ = stopper.communicate("stop\n", timeout=WAIT_S)  # the CLI waits until the job has ended
        assert stopper.returncode == 0, out[-3000:]
    finally:
        if stopper.poll() is None:
            stopper.kill()
    first = _finished(client, "stopped")
    shards_at_stop = _shard_files(results)
    _submit(cluster, "resubmitted", results, configs)
    second = _finished(client, "resubmitted")
    actors = [a for a in cluster.actors() if a["class_name"] == "ModelActor"]
    nodes = {n["node_id"]: n["node_ip"] for n in cluster.nodes()}
    return Submissions(local_run, results, shards_at_stop, first, second, client.get_job_logs("stopped"),
                       client.get_job_logs("resubmitted"), {nodes.get(a["node_id"], "?") for a in actors},
                       set(nodes.values()))


def _records(results: Path) -> list[dict[str, Any]]:
    return sorted(pq.read_table(results / "runs").to_pylist(), key=lambda r: r["started_at"])


def test_the_submitted_grid_ran_on_both_nodes_and_its_rows_equal_a_local_run(submissions: Submissions) -> None:
    s = submissions
    assert s.second.status == "SUCCEEDED", s.second_logs[-4000:]
    a, b = rows_by_example(s.results), rows_by_example(s.local)
    assert len(a) == SHARDS and a.keys() == b.keys()
    assert a == b  # forward counts, lengths and both answers, example by example
    assert s.node_addresses == set(ray_two_nodes.NODES.values())
    assert s.actor_nodes == s.node_addresses  # Ray's own record: model actors lived on both nodes
    records = _records(s.results)
    last = records[-1]["run_id"]  # the resubmission had ≥ 5 units for its 2 actors: one actor on each node
    hosts = {r["actor_id"].split(":")[0] for r in read_pairs(s.results) if r["run_id"] == last}
    assert hosts == set(ray_two_nodes.NODES)  # decoded on nodeA and on nodeB within one run
    assert {a.split(":")[0] for a in json.loads(records[-1]["device_inventory"])["actors"]} == hosts
    for logs in (s.first_logs, s.second_logs):  # the ray kind attached and checked every node's reach of results_dir
        assert f"results_dir {s.results}: every node (2) writes and reads it" in logs, logs[-4000:]
    placements = []
    for record in records:  # each driver ran on the head (ray job submit) and saw both nodes
        assert record["host"] == ray_two_nodes.HEAD
        inventory = json.loads(record["device_inventory"])
        assert {n["address"] for n in inventory["nodes"]} == s.node_addresses
        placements += inventory["actor_placements"].values()
    assert placements and all(len(p["gpu_ids"]) == 1 and p["cpu_fallback"] for p in placements)  # a fake GPU each


def test_ray_job_stop_is_a_clean_stop_and_the_same_submission_resumes_exactly(submissions: Submissions) -> None:
    s = submissions
    assert s.first.status == "STOPPED"
    assert "SIGTERM received: stopping the run" in s.first_logs, s.first_logs[-4000:]  # the driver's own handler
    assert "interrupted by SIGTERM: finished shards are kept" in s.first_logs
    assert 1 <= s.shards_at_stop < SHARDS, "the stop did not land mid-run: nothing to resume"
    stopped, resumed = _records(s.results)
    assert (stopped["status"], stopped["stop_signal"]) == ("interrupted", "SIGTERM")  # not killed mid-close
    assert stopped["shards_done"] == s.shards_at_stop  # the record counts what reached the disk
    assert (resumed["status"], resumed["stop_signal"]) == ("finished", None)
    assert resumed["shards_skipped"] == s.shards_at_stop and resumed["shards_done"] == SHARDS
    assert f"{SHARDS} shards, {s.shards_at_stop} already done, {SHARDS - s.shards_at_stop} to run" in s.second_logs
    rows = read_pairs(s.results)  # every file read back whole, against the record's schema
    keys = [(r["cell_id"], r["example_id"]) for r in rows]
    assert len(keys) == len(set(keys)) == SHARDS  # every example exactly once
    by_run = {r["run_id"] for r in rows}
    assert by_run == {stopped["run_id"], resumed["run_id"]}  # the stopped run's shards were kept, not redone
    assert sum(r["run_id"] == stopped["run_id"] for r in rows) == s.shards_at_stop
    assert not [p for p in s.results.rglob("*") if ".tmp" in p.name]  # nothing half-written left behind
