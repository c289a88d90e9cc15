"""The ``ray`` cluster kind (jobs/cluster/existing_ray.py): attach to a Ray cluster that is already up.

Stand-ins where a real cluster is not the point: the address and its one-line errors, the resource check on
given ``ray.nodes()`` values (the formula is in the test), a relative results_dir in Ray's copy of the working
dir. Then a real cluster: a Ray head started here with ``ray start`` and a second raylet joining it (two nodes,
one fake GPU each), a tiny grid attached to it: rows equal a local run's, one model actor on each node, every
node probed for results_dir, the cluster still up and this process still attached afterwards, an undersized
grid refused in one message before anything is written, and a node whose results_dir is another disk refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.compare_results import rows
from jobs.cluster import existing_ray
from jobs.cluster.existing_ray import NodeOffer
from jobs.cluster.kinds import KINDS
from jobs.cluster.ray_cluster import Allocation, RayProcess, _start, free_ports
from jobs.grid import allocation_fit
from jobs.grid.allocation_fit import GIB, HEADROOM_BASE_GIB, HEADROOM_PER_ACTOR_GIB, SMALL_MODEL_BYTES
from jobs.grid.checkpoint_preflight import grid_models
from jobs.run import local_ray
from streamgen.config import ClusterConfig, ConfigError, RayConfig, cluster_config, grid_config
from streamgen.results.results_dir import ResultsDirError


def _ray_cluster(address: str | None = None, **more: Any) -> ClusterConfig:
    return ClusterConfig(name="ray", executor="ray", address=address, **more)


# --------------------------------------------------------------------------------------------
# The address: which one, its form, whether anybody answers
# --------------------------------------------------------------------------------------------


def test_the_cluster_files_address_wins_over_ray_address_and_null_takes_the_variable() -> None:
    env = {"RAY_ADDRESS": "10.0.0.9:6379"}
    assert existing_ray.resolve_address(_ray_cluster("10.0.0.1:6379"), env) == "10.0.0.1:6379"
    assert existing_ray.resolve_address(_ray_cluster(None), env) == "10.0.0.9:6379"
    assert existing_ray.resolve_address(_ray_cluster("auto"), env) == "auto"  # Ray's own rule reads RAY_ADDRESS then


def test_no_address_at_all_is_one_line_naming_both_ways_to_give_one() -> None:
    with pytest.raises(ConfigError) as caught:
        existing_ray.resolve_address(_ray_cluster(None), {})
    (line,) = caught.value.problems
    assert "no Ray cluster to attach to" in line and "set RAY_ADDRESS" in line
    assert "address: in configs/cluster/ray.yaml" in line


@pytest.mark.parametrize(("address", "says"), [
    ("http://head:8265", "the dashboard's address"), ("local", "would start a new Ray"),
    ("head", "is not one of: auto, ray://HOST:10001 or HOST:6379"), ("ray://head:port", "is not one of"),
])
def test_an_address_ray_would_not_attach_at_is_one_line_with_the_fix(address: str, says: str) -> None:
    """From the cluster file or from RAY_ADDRESS alike, each naming where to fix it."""
    (line,) = existing_ray.address_problems(_ray_cluster(address))
    assert says in line and f"address={address!r}" in line and "configs/cluster/ray.yaml" in line
    assert KINDS["ray"].problems(_ray_cluster(address)) == [line]
    with pytest.raises(ConfigError) as caught:
        existing_ray.resolve_address(_ray_cluster(None), {"RAY_ADDRESS": address})
    (from_env,) = caught.value.problems
    assert says in from_env and f"RAY_ADDRESS={address!r}" in from_env
    if address.startswith("http"):
        assert "set RAY_ADDRESS to e.g. head:6379" in from_env


@pytest.mark.parametrize("address", [None, "auto", "10.0.0.1:6379", "ray://head.example:10001"])
def test_the_forms_ray_takes_pass(address: str | None) -> None:
    assert existing_ray.address_problems(_ray_cluster(address)) == []


def test_an_address_nobody_answers_at_is_one_line_naming_ray_status_fast() -> None:
    (port,) = free_ports("127.0.0.1", 1)  # nothing listens there
    start = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        existing_ray.connect(f"127.0.0.1:{port}")
    (line,) = caught.value.problems
    assert f"nobody answers at 127.0.0.1:{port}" in line and f"`ray status --address 127.0.0.1:{port}`" in line
    assert "set RAY_ADDRESS or address:" in line
    assert time.monotonic() - start < existing_ray.CONNECT_TIMEOUT_S  # refused at once, not ray.init's minutes


# --------------------------------------------------------------------------------------------
# The resource check on given nodes
# --------------------------------------------------------------------------------------------


def _node(i: int, cpus: float, gpus: float, gib: float) -> NodeOffer:
    return NodeOffer(f"id{i}", f"10.0.0.{i}", cpus, gpus, gib)


def _given(cpus: float, gpus: float, gib: float) -> dict[str, Any]:
    """One entry of ``ray.nodes()`` as Ray writes it: ``memory`` and the object store apart."""
    store = 0.5 * GIB
    return {"NodeID": f"n{cpus}{gpus}{gib}", "Alive": True, "NodeManagerAddress": "10.0.0.7",
            "Resources": {"CPU": cpus, "GPU": gpus, "memory": gib * GIB - store, "object_store_memory": store}}


def test_ray_nodes_are_read_alive_only_memory_and_store_together() -> None:
    dead = {**_given(64, 8, 512), "Alive": False}
    (node,) = existing_ray.alive_nodes([_given(4, 1, 8), dead])
    assert (node.cpus, node.gpus, node.memory_gib) == (4, 1, 8.0)


def test_the_shape_is_the_gpu_nodes_each_as_small_as_the_smallest() -> None:
    """A head without GPUs (KubeRay's usual) holds no model actor: the rules see the GPU nodes, each with the
    fewest CPUs, GPUs and GiB among them."""
    grid = grid_config("smoke", ["workers=2"])
    nodes = [_node(0, 2, 0, 4), _node(1, 8, 2, 30), _node(2, 6, 1, 20)]
    s = existing_ray.live_shape(grid, nodes, "10.0.0.0:6379")
    assert (s.nodes, s.gpus_per_node, s.ray_cpus_per_node, s.mem_gib) == (2, 1, 6, 20)
    assert s.actors_per_node == min(grid.workers, 1) and s.books_memory and s.time_limit is None
    assert "the Ray cluster at 10.0.0.0:6379: 3 alive node(s)" in (s.fixed or "")
    cpu_only = existing_ray.live_shape(grid, [_node(0, 4, 0, 8), _node(1, 2, 0, 16)], "a:1")
    assert (cpu_only.nodes, cpu_only.gpus_per_node, cpu_only.ray_cpus_per_node) == (2, 0, 2)


def test_an_undersized_cluster_is_refused_naming_what_is_missing_and_a_fix_of_the_work() -> None:
    """2 GPU nodes × 1 GPU, 2 CPUs, 5 GiB each; workers=3, score_workers=2: every rule breaks, each line
    names the running cluster and a fix of the work or more nodes, never a field of the cluster file."""
    grid = grid_config("smoke", ["models=[tiny-llama]", "workers=3", "score_workers=2"])
    cluster = _ray_cluster("10.0.0.0:6379", rehearsal=True, gpus_per_node=8, cpus_per_task=64, mem_gb=512)
    s = existing_ray.live_shape(grid, [_node(1, 2, 1, 5), _node(2, 2, 1, 5)], "10.0.0.0:6379")
    problems = allocation_fit.check(grid, cluster, grid_models(grid), s).problems
    need_gib = grid.ray.object_store_mb / 1024 + SMALL_MODEL_BYTES / GIB + HEADROOM_BASE_GIB + HEADROOM_PER_ACTOR_GIB
    assert len(problems) == 3 and all("the Ray cluster at 10.0.0.0:6379: 2 alive node(s)" in p for p in problems)
    workers, cpus, memory = problems
    assert "workers=3 but" in workers and "2 node(s) × 1 GPU(s) = 2" in workers
    assert "set workers=2 or add GPU nodes to the cluster" in workers
    assert "Ray has 2 CPU(s) per node" in cpus and "lower score_workers or workers (they need 3 = 1 + 2)" in cpus
    assert f"a node has 5.0 GiB but a node needs {need_gib:.1f} GiB" in memory
    assert f"add nodes with {int(need_gib) + 1} GiB or more" in memory
    assert not any(knob in p for p in problems for knob in ("mem_gb=", "cpus_per_task", "gpus_per_node ≥"))


# --------------------------------------------------------------------------------------------
# results_dir under `ray job submit --working-dir`
# --------------------------------------------------------------------------------------------


def test_a_relative_results_dir_in_rays_copy_of_the_working_dir_is_refused() -> None:
    copy = Path("/tmp/ray/session_2026-12-07_10-00-00_1_1/runtime_resources/working_dir_files/_ray_pkg_ab12")
    (line,) = existing_ray.working_dir_problems("results/smoke", copy)
    assert "results_dir=results/smoke is relative" in line and str(copy) in line
    assert "absolute path that every node shares" in line and "PVC" in line
    assert existing_ray.working_dir_problems("/mnt/shared/r", copy) == []  # absolute: the probe decides
    assert existing_ray.working_dir_problems("results/smoke", Path("/home/me/streamgen")) == []


# --------------------------------------------------------------------------------------------
# A real two-node cluster
# --------------------------------------------------------------------------------------------

CPUS, STORE_MB, NODE_MEMORY = 2, 128, 8 * GIB  # per node; one fake GPU each
START_TIMEOUT_S = 240.0


def _routable_ip() -> str:
    """This machine's non-loopback address: a raylet joining a head on 127.0.0.1 is sent to the host's own
    address by Ray (and one told to stay on loopback refuses to join), so both nodes listen there."""
    from ray._private.services import node_ip_address_from_perspective

    ip = str(node_ip_address_from_perspective())
    if ip.startswith("127."):
        pytest.skip("this machine has no non-loopback address: a second raylet cannot join a head on it")
    return ip


def _status(address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "status", f"--address={address}"],
                          capture_output=True, text=True, timeout=120, check=False)


def _alive_nodes(address: str) -> int:
    out = _status(address)
    active = out.stdout.split("Active:", 1)[-1].split("Pending:", 1)[0] if out.returncode == 0 else ""
    return active.count("node_")


@dataclass
class RunningCluster:
    address: str
    nodes: list[RayProcess]
    folder: Path


def _start_node(args: list[str], ip: str, rank: int, folder: Path, address: str, wait_for: int) -> RayProcess:
    """One ``ray start --block``, started again when Ray's 30 s raylet timeout hits a loaded machine."""
    alloc = Allocation("test", rank, 2, CPUS, 1, folder)
    for _ in range(3):
        node = _start([*args, f"--memory={NODE_MEMORY}"], ip, alloc, RayConfig(object_store_mb=STORE_MB), address,
                      f"node{rank}.log", head=rank == 0, taken=())
        deadline = time.monotonic() + START_TIMEOUT_S
        while node.alive() and time.monotonic() < deadline and _alive_nodes(address) < wait_for:
            time.sleep(2.0)
        if node.alive() and _alive_nodes(address) >= wait_for:
            return node
        node.stop()
    pytest.fail(f"Ray node {rank} did not start 3 times; {node.log_path}:\n{node.log_path.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[RunningCluster]:
    """A head and a second raylet on this machine, each with CPUS CPUs, one fake GPU and NODE_MEMORY; their
    workers import this checkout. Stopped by their process groups (never `ray stop`: others' Ray lives here)."""
    ip = _routable_ip()
    folder = Path(tempfile.mkdtemp(prefix="sgray-", dir="/tmp"))  # short: Ray's socket paths live under it
    saved = os.environ.get("PYTHONPATH")
    local_ray.put_checkout_on_worker_path()
    port, dashboard = free_ports(ip, 2)
    address = f"{ip}:{port}"
    nodes: list[RayProcess] = []
    try:
        nodes.append(_start_node(["--head", f"--port={port}", "--include-dashboard=false",
                                  f"--dashboard-port={dashboard}", f"--temp-dir={folder / 'ray'}"],
                                 ip, 0, folder, address, 1))
        nodes.append(_start_node([f"--address={address}"], ip, 1, folder, address, 2))
        yield RunningCluster(address, nodes, folder)
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()  # this test's own connection
        for node in reversed(nodes):
            node.stop()
        shutil.rmtree(folder, ignore_errors=True)  # the nodes' logs and Ray's session: all stopped now
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _grid(results: Path, *more: str) -> Any:
    """Two tiny models, one example each: one unit per model (its two acceptance cells share the work), one
    model actor per fake GPU."""
    return grid_config("smoke", ["models=[tiny-llama,tiny-qwen3]", "benchmarks=[coedit]", "limit=1", "shard_size=1",
                                 "max_new_tokens=8", "workers=2", "score_workers=1", f"ray.object_store_mb={STORE_MB}",
                                 f"results_dir={results}", *more])


@pytest.fixture(scope="module")
def attached(two_nodes: RunningCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The grid run here on a local Ray first, then attached to the two-node cluster (this process its driver)."""
    import ray

    from jobs.cluster.executors import run_grid_on_cluster

    tmp = tmp_path_factory.mktemp("attached")
    local = run_grid_on_cluster(_grid(tmp / "local"), cluster_config("local"))
    assert not ray.is_initialized(), "the local run shut down the Ray it started"
    probed: list[set[str]] = []
    remove = existing_ray._remove

    def seen(folder: Path) -> None:
        probed.append({p.name for p in folder.iterdir()})
        remove(folder)

    # the file's sizes are generous and not read: an undersized grid must be refused on what the cluster has
    cluster = cluster_config("ray", [f"address={two_nodes.address}", "rehearsal=true", "nodes=8", "gpus_per_node=8",
                                     "cpus_per_task=64", "mem_gb=512"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(existing_ray, "_remove", seen)
        summary = run_grid_on_cluster(_grid(tmp / "ray"), cluster)
    still_attached = ray.is_initialized()
    if not still_attached:  # attach again only to read the actor table: test_the_run_stops_nothing... fails
        ray.init(address=two_nodes.address)
    actors = [a for a in ray._private.state.actors().values() if "ModelActor" in a["ActorClassName"]]
    return {"local": local, "summary": summary, "results": tmp, "probed": probed, "cluster": cluster,
            "still_attached": still_attached,
            "actor_nodes": [a["Address"]["NodeID"] for a in actors], "node_ids": {n["NodeID"] for n in ray.nodes()}}


@pytest.mark.integration
def test_the_grid_on_an_attached_cluster_writes_the_rows_of_a_local_run(attached: dict[str, Any]) -> None:
    s = attached["summary"]
    assert s.shards_done == s.shards_total == attached["local"].shards_total == 2 * 2 and not s.shards_failed  # models × acceptance
    for table in ("pairs", "steps"):
        local, remote = rows(attached["results"] / "local", table), rows(attached["results"] / "ray", table)
        assert local and remote == local, table


@pytest.mark.integration
def test_one_model_actor_on_each_nodes_gpu(attached: dict[str, Any]) -> None:
    assert len(attached["node_ids"]) == 2
    assert sorted(attached["actor_nodes"]) == sorted(attached["node_ids"])  # two actors, one per node
    assert all(p.cpu_fallback and p.gpu_ids for p in attached["summary"].placements.values())  # fake GPUs, said


@pytest.mark.integration
def test_every_node_wrote_its_probe_under_results_dir(attached: dict[str, Any]) -> None:
    (files,) = attached["probed"]
    assert files == {"driver", *attached["node_ids"]}
    assert not (attached["results"] / "ray" / existing_ray.PROBE_DIR).exists(), "the probe cleans up"


@pytest.mark.integration
def test_the_run_stops_nothing_it_did_not_start(attached: dict[str, Any], two_nodes: RunningCluster) -> None:
    """The cluster's processes run on and `ray status` answers; this process is still attached: the run's
    Ray session was not its own, so it did not shut it down."""
    import ray

    assert all(node.alive() for node in two_nodes.nodes)
    assert _status(two_nodes.address).returncode == 0 and _alive_nodes(two_nodes.address) == 2
    assert attached["still_attached"] and ray.is_initialized()


@pytest.mark.integration
def test_an_undersized_cluster_is_refused_before_anything_is_written(attached: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    from jobs.cluster.executors import run_grid_on_cluster

    results = tmp_path / "u"
    with pytest.raises(ConfigError) as caught:
        run_grid_on_cluster(_grid(results, "workers=3", "score_workers=2"), attached["cluster"])
    problems = caught.value.problems
    assert f"the Ray cluster at {attached['cluster'].address} cannot run grid" in str(caught.value)
    assert len(problems) == 2 and all("2 alive node(s)" in p for p in problems)
    assert "workers=3 but" in problems[0] and "set workers=2 or add GPU nodes" in problems[0]
    assert f"Ray has {CPUS} CPU(s) per node" in problems[1] and "lower score_workers" in problems[1]
    assert not results.exists()


def _last_node_elsewhere(folder: str, name: str, token: str) -> tuple[str, str | None]:
    """A stand-in probe: the node whose id sorts last sees results_dir as another disk (a node without the
    shared mount); the others probe as the kind does."""
    import ray

    last = max(n["NodeID"] for n in ray.nodes() if n["Alive"])
    if name == last:
        folder = f"{folder}-elsewhere"
        os.makedirs(folder, exist_ok=True)
    return existing_ray._probe_node(folder, name, token)


@pytest.mark.integration
def test_a_node_that_sees_another_disk_is_refused_naming_it(attached: dict[str, Any], tmp_path: Path) -> None:
    nodes = existing_ray.cluster_nodes()
    last = max(n.node_id for n in nodes)
    with pytest.raises(ResultsDirError) as caught:
        existing_ray.check_reach(tmp_path, nodes, probe=_last_node_elsewhere)
    message = str(caught.value)
    assert f"node {last[:8]} at" in message and "cannot read the driver's file" in message
    assert sum(f"node {n.node_id[:8]}" in message for n in nodes) == 1  # only that one
    assert "a path every node shares (an NFS mount, or a PVC" in message
