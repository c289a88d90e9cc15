"""Against the real two-node Slurm cluster of .ci/slurm.sh (slurmctld + slurmd + slurmdbd, 2 fake GPUs a node).

Skipped when no controller answers. Each test submits real jobs; the grids are tiny because the
jobs and pytest share 2 cores.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from jobs.cluster import executors
from streamgen.config import REPO_ROOT, ConfigError, GridConfig, cluster_config, grid_config
from tests.support.analysis_fixtures import read_pairs, rows_by_example


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

NS_PREFIX = "sgci-"  # .ci/slurm.sh: namespace sgci-<node> per Slurm node, sgci-ctl for the controller
SLURM_DAEMONS = {"slurmctld", "slurmd", "slurmdbd", "slurmstepd", "munged", "mariadbd"}
# Able to bind one address, so they must; slurmdbd 22.05 and Ray's gRPC servers bind 0.0.0.0, which
# inside a node's namespace means its own address and loopback only (checked below).
BIND_OWN_ADDRESS = {"slurmctld", "slurmd"}


@pytest.fixture
def job_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A temp HOME (Ray's bootstrap file) for this process and for jobs (sbatch exports our env)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return {**os.environ, "HOME": str(tmp_path / "home")}


def _workflow(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "workflows" / "full_grid.py"), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=900, check=False)


def _job_ids() -> set[str]:
    out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-o", "JobID", "-S", "now-1days"],
                         capture_output=True, text=True, timeout=30, check=True)
    return set(out.stdout.split())


def test_job_gets_cpus_and_gpus_from_slurm(tmp_path: Path, job_env: dict[str, str]) -> None:
    cluster = cluster_config("slurm_test", ["gpus_per_node=2", "cpus_per_task=2", f"log_dir={tmp_path / 'logs'}"])
    job = executors.submit_grid(GridConfig(), cluster, task=_ray_resources)
    resources = executors.follow(job, poll_s=1.0)
    assert resources["CPU"] == 2.0 and resources["GPU"] == 2.0
    assert resources["cuda_visible"] == "0,1"  # Slurm bound both fake GPUs to the job


def _ray_resources(address: str) -> dict[str, Any]:
    import ray

    return {**ray.cluster_resources(), "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "address": address}


def test_more_gpus_than_the_cluster_has_is_refused_before_anything_runs(
        tmp_path: Path, job_env: dict[str, str]) -> None:
    configs = tmp_path / "configs"
    shutil.copytree(REPO_ROOT / "configs", configs)
    yaml = configs / "cluster" / "slurm_test.yaml"
    yaml.write_text(yaml.read_text().replace("gpus_per_node: 0", "gpus_per_node: 3"))
    before = _job_ids()
    proc = _workflow(["cluster=slurm_test", "grid=smoke", f"results_dir={tmp_path / 'r'}"], tmp_path,
                     {**job_env, "STREAMGEN_CONFIGS": str(configs)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "gpus_per_node=3 but the largest node in partition 'debug' has 2 GPU(s)" in proc.stderr
    assert "set gpus_per_node=2 or fewer" in proc.stderr and "nothing was submitted" in proc.stderr
    assert _job_ids() == before and not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match="gpus_per_node=3"):  # the library call refuses the same way
        executors.submit_grid(grid_config("smoke"), cluster_config("slurm_test", ["gpus_per_node=3"]))
    for overrides, fix in ((["nodes=3"], "set nodes=2 or fewer"), (["gpus_per_node=3"], "set gpus_per_node=2")):
        with pytest.raises(ConfigError, match=fix):  # the multi-node example, asking for too much
            executors.submit_grid(grid_config("smoke"), cluster_config("slurm_2nodes", overrides))
    assert _job_ids() == before



# --------------------------------------------------------------------------------------------
# The smoke grid on two nodes: one run shared by the equality and the socket tests
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def module_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path_factory.mktemp("home"))}


@pytest.fixture(scope="module")
def local_smoke(tmp_path_factory: pytest.TempPathFactory, module_env: dict[str, str]) -> Path:
    out = tmp_path_factory.mktemp("local")
    proc = _workflow(["grid=smoke", f"results_dir={out}"], out, module_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def two_node_smoke(tmp_path_factory: pytest.TempPathFactory, module_env: dict[str, str]) -> dict[str, Any]:
    """The smoke grid as one 2-node job; while its first shard is written (Ray and model actors up),
    the listening sockets of every namespace of the cluster and of the host are recorded."""
    out = tmp_path_factory.mktemp("two_nodes")
    proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "workflows" / "full_grid.py"), "cluster=slurm_2nodes",
                             "grid=smoke", f"results_dir={out}"], cwd=out, env=module_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sockets: dict[str, list[str]] = {}
    deadline = time.monotonic() + 900
    while proc.poll() is None and not sockets and time.monotonic() < deadline:
        if list(out.glob("pairs/**/*.parquet")):
            sockets = {ns: _listening(ns) for ns in [*_cluster_namespaces(), None]}
        time.sleep(0.5)
    stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    assert proc.returncode == 0, stderr[-3000:]
    return {"results": out, "stderr": stderr, "sockets": sockets}


def _cluster_namespaces() -> list[str]:
    return sorted(p.name for p in Path("/run/netns").glob(f"{NS_PREFIX}*")) if Path("/run/netns").is_dir() else []


def _listening(ns: str | None) -> list[str]:
    """``ss -ltnup`` lines (listening TCP, bound UDP, with processes) in namespace ``ns`` or the host's."""
    cmd = ["ss", "-H", "-ltnup"] if ns is None else ["ip", "netns", "exec", ns, "ss", "-H", "-ltnup"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout.splitlines()


def _runs(results_dir: Path) -> list[dict[str, Any]]:
    return pq.read_table(results_dir / "runs").to_pylist()


def test_smoke_grid_on_two_nodes_equals_local(two_node_smoke: dict[str, Any], local_smoke: Path) -> None:
    assert "submitted job" in two_node_smoke["stderr"] and "2 node(s)" in two_node_smoke["stderr"]
    a, b = rows_by_example(two_node_smoke["results"]), rows_by_example(local_smoke)
    assert a and a.keys() == b.keys()
    assert a == b  # forward counts, lengths and both answers, example by example
    cluster = cluster_config("slurm_2nodes")
    nodes = _sinfo_nodes()
    rows = read_pairs(two_node_smoke["results"])
    assert {r["actor_id"].split(":")[0] for r in rows} == set(nodes)  # shards decoded on both nodes
    (run,) = _runs(two_node_smoke["results"])  # one run record, written by the driver on rank 0's node
    assert run["host"] == nodes[0]
    inventory = json.loads(run["device_inventory"])
    assert {n["host"] for n in inventory["nodes"]} == set(nodes)
    for node in inventory["nodes"]:  # each Ray node got its own task's CPUs and GPUs from Slurm
        assert node["resources"]["GPU"] == cluster.gpus_per_node
        assert node["resources"]["CPU"] == cluster.cpus_per_task
        assert node["address"] != "127.0.0.1"
    assert {a.split(":")[0] for a in inventory["actors"]} == set(nodes)


def _sinfo_nodes() -> list[str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=30, check=True)
    return sorted(set(out.stdout.split()))


def test_cluster_and_ray_listen_only_on_namespace_addresses_and_loopback(two_node_smoke: dict[str, Any]) -> None:
    sockets: dict[str | None, list[str]] = two_node_smoke["sockets"]
    if not _cluster_namespaces():
        pytest.skip("the Slurm cluster is not the namespaced test cluster of .ci/slurm.sh")
    seen: dict[str | None, set[str]] = {}
    for ns, lines in sockets.items():
        own = _namespace_addresses(ns) if ns else set()
        seen[ns] = set()
        for line in lines:
            host, procs = _local_host(line), set(re.findall(r'\("([^"]+)",pid=', line))
            seen[ns] |= procs
            if ns is None:  # the host: none of the cluster's processes listens here at all
                assert not procs & SLURM_DAEMONS, line
                continue
            if procs & BIND_OWN_ADDRESS:  # NoInAddrAny / NoCtldInAddrAny: exactly the daemon's address
                assert host in own, f"{ns}: {line}"
            assert _loopback(host) or host in own or host in ("0.0.0.0", "*", "::"), f"{ns}: {line}"
    for ns in _cluster_namespaces():  # a wildcard there reaches only what the namespace has:
        addrs = _namespace_addresses(ns)  # loopback and its private address, and no route out
        nets = {ipaddress.ip_interface(a).network for a in _namespace_interfaces(ns)}
        assert addrs and all(ipaddress.ip_address(a).is_private for a in addrs), (ns, addrs)
        assert len(nets) == 1 and "default" not in _routes(ns), (ns, nets)
    daemons = set().union(*(seen[ns] for ns in _cluster_namespaces()))
    assert {"slurmctld", "slurmdbd", "slurmd", "raylet", "gcs_server"} <= daemons  # the check saw them all
    assert sum("raylet" in seen[ns] for ns in _cluster_namespaces()) == 2  # one Ray node per Slurm node


def _local_host(line: str) -> str:
    local = line.split()[4]  # Netid State Recv-Q Send-Q Local:Port Peer:Port Process
    host = local.rsplit(":", 1)[0].strip("[]").split("%")[0]
    return host.removeprefix("::ffff:")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _namespace_interfaces(ns: str) -> list[str]:
    """Non-loopback addresses with prefix (``10.213.7.11/24``), every family."""
    out = subprocess.run(["ip", "-n", ns, "-o", "addr", "show"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    found = re.findall(r"inet6? (\S+)", out)
    return [a for a in found if not ipaddress.ip_interface(a).ip.is_loopback]


def _namespace_addresses(ns: str) -> set[str]:
    return {str(ipaddress.ip_interface(a).ip) for a in _namespace_interfaces(ns)}


def _routes(ns: str) -> str:
    return subprocess.run(["ip", "-n", ns, "route", "show"], capture_output=True, text=True, timeout=30,
                          check=True).stdout


# --------------------------------------------------------------------------------------------
# Preemption of the two-node job
# --------------------------------------------------------------------------------------------


def test_preemption_of_either_node_requeues_the_whole_job_and_resumes(tmp_path: Path, job_env: dict[str, str]) -> None:
    """First USR2 to the second node's task alone (relayed to rank 0), then scancel --signal=USR2 to all."""
    # 12 one-example shards on 2 actors. Tiny models finish a shard in milliseconds, so a run could end
    # before the requeue stops it (it did once in CI: attempt 1 found all 12 written and ended at once).
    # The requests are therefore typed live at 25 chars/s: each example takes 2-9 s of real time
    # (sleeping, not computing), about 35 s per run from scratch, far longer than a requeue takes.
    grid = grid_config("smoke", ["models=[tiny-llama]", "benchmarks=[mbpp,coedit]", "limit=3", "shard_size=1",
                                 "typing.chars_per_s=[25]", "typing.live_policy=every",
                                 f"results_dir={tmp_path / 'r'}"])
    cluster = cluster_config("slurm_2nodes", [f"log_dir={tmp_path / 'logs'}"])  # timeout_min > 10: preemption
    job = executors.submit_grid(grid, cluster)
    pairs = tmp_path / "r" / "pairs"
    shards = lambda: len(list(pairs.glob("**/*.parquet")))  # noqa: E731
    _wait(lambda: shards() >= 1, job, "no shard finished in attempt 0")
    os.kill(_task_pid(job.job_id, rank=1), signal.SIGUSR2)  # only nodeB's task is told
    _wait(lambda: _restarts(job.job_id) == (1, "RUNNING"), job, "the job was not requeued")
    after_first = shards()
    assert after_first < 12, "attempt 0 finished everything before the requeue stopped it: nothing to resume"
    _wait(lambda: shards() > after_first, job, "no shard finished in attempt 1")
    done_at_second = shards()
    assert done_at_second < 12, "attempt 1 finished everything: nothing left to resume"
    subprocess.run(["scancel", "--signal=USR2", job.job_id], check=True, timeout=30)  # every task
    summary = executors.follow(job, poll_s=1.0)
    head_log = job.paths.stderr.read_text()
    worker_log = (job.paths.folder / f"{job.job_id}_1_log.err").read_text()
    assert "asked rank 0 to requeue the whole job" in worker_log, worker_log[-3000:]
    assert "another node was signalled" in head_log, head_log[-3000:]
    assert head_log.count("this job is preempted") == 2 and "attempt 2" in head_log
    assert summary.shards_skipped >= done_at_second  # the last run kept everything written before
    assert summary.shards_skipped + summary.shards_done == summary.shards_total == 12
    runs = read_pairs(tmp_path / "r")
    keys = [(r["cell_id"], r["example_id"]) for r in runs]
    assert len(keys) == len(set(keys)) == 12  # every (shard, example) exactly once
    assert len({r["run_id"] for r in runs}) == 3  # rows from all three attempts, each written once
    assert {r["live_policy"] for r in runs} == {"every"}  # typed on the real clock, as set above
    records = sorted(_runs(tmp_path / "r"), key=lambda r: r["started_at"])  # a run record from each, by its driver
    assert [(r["status"], r["stop_signal"]) for r in records] == [("interrupted", "SIGUSR2")] * 2 + [("finished", None)]
    assert _final_states(job.job_id) == ["REQUEUED", "REQUEUED", "COMPLETED"]  # Slurm's own record


def _final_states(job_id: str, timeout_s: float = 60) -> list[str]:
    """sacct's states of every run of the job, once the last one has ended (the result file submitit
    waits for is written a moment before Slurm records the end)."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = subprocess.run(["sacct", "-j", job_id, "-D", "-X", "-n", "-P", "-o", "State"],
                                capture_output=True, text=True, timeout=30, check=True).stdout.split()
        if (states and states[-1] not in ("RUNNING", "COMPLETING")) or time.monotonic() > deadline:
            return states
        time.sleep(1.0)


def _wait(condition: Any, job: Any, what: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} (waited {timeout_s:.0f} s)"
        assert not job.done(), f"{what}: the job ended ({job.state})"
        time.sleep(0.5)


def _restarts(job_id: str) -> tuple[int, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    restarts, state = re.search(r"Restarts=(\d+)", out), re.search(r"JobState=(\S+)", out)
    return (int(restarts.group(1)) if restarts else -1, state.group(1) if state else "")


def _task_pid(job_id: str, rank: int) -> int:
    """The submitit task of ``rank`` (not srun, not its Ray processes), found through /proc (root)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"submitit.core._submit" not in argv or Path(argv[0].decode()).name == "srun":
                continue
            env = dict(e.split(b"=", 1) for e in (proc / "environ").read_bytes().split(b"\0") if b"=" in e)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if env.get(b"SLURM_JOB_ID") == job_id.encode() and env.get(b"SLURM_PROCID") == str(rank).encode():
            return int(proc.name)
    raise AssertionError(f"no task of rank {rank} of job {job_id} found in /proc")
