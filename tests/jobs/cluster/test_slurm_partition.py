"""Fast checks of the Slurm request building and the refusal logic (no cluster needed).

The same refusal runs against the real local cluster in tests/jobs/cluster/test_slurm_cluster.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from jobs.cluster import executors, slurm_partition
from jobs.cluster import local as local_kind
from streamgen.config import ClusterConfig, ConfigError, GridConfig, cluster_config, grid_config
from tests.support.analysis_fixtures import read_pairs

SINFO = """\
gpu01|64|gpu:a100:4(S:0-1)|a100,ib|gpu*
gpu02|64|gpu:a100:4(S:0-1)|a100,ib|gpu
gpu03|32|gpu:v100:2,gpu:a100:1|v100|gpu
cpu01|128|(null)|(null)|cpu
"""


def _cluster(**kw: object) -> ClusterConfig:
    return dataclasses.replace(cluster_config("slurm_test"), **kw)


def test_parse_gres_typed_untyped_and_socket_suffix() -> None:
    assert slurm_partition.parse_gres("gpu:2") == {"": 2}
    assert slurm_partition.parse_gres("gpu:a100:4(S:0-1),gpu:v100:2") == {"a100": 4, "v100": 2}
    assert slurm_partition.parse_gres("(null)") == {}
    assert slurm_partition.parse_gres("mps:100,gpu:1") == {"": 1}


def test_default_partition_is_the_starred_one() -> None:
    inv = slurm_partition.parse_sinfo(SINFO, None)
    assert inv.partition == "gpu"
    assert [n.name for n in inv.nodes] == ["gpu01", "gpu02", "gpu03"]
    assert slurm_partition.parse_sinfo(SINFO, "cpu").nodes[0].gpus == {}


def test_too_many_gpus_per_node_is_refused_naming_the_fix() -> None:
    inv = slurm_partition.parse_sinfo(SINFO, "gpu")
    problems = slurm_partition.check(_cluster(gpus_per_node=8), inv)
    assert len(problems) == 1
    assert "gpus_per_node=8" in problems[0] and "has 4 GPU(s)" in problems[0]
    assert "set gpus_per_node=4 or fewer" in problems[0]
    assert slurm_partition.check(_cluster(gpus_per_node=4, nodes=2), inv) == []


def test_gpu_type_counts_and_node_count() -> None:
    inv = slurm_partition.parse_sinfo(SINFO, "gpu")
    assert slurm_partition.check(_cluster(gpus_per_node=2, gpu_type="v100"), inv) == []
    assert "of type v100" in slurm_partition.check(_cluster(gpus_per_node=4, gpu_type="v100"), inv)[0]
    unknown = slurm_partition.check(_cluster(gpus_per_node=1, gpu_type="h100"), inv)
    assert "matches no node feature or GPU type" in unknown[0] and "a100" in unknown[0]
    too_many_nodes = slurm_partition.check(_cluster(gpus_per_node=4, nodes=3), inv)
    assert "only 2 node(s)" in too_many_nodes[0]
    assert inv.gpu_type_mode("a100") == "constraint" and inv.gpu_type_mode("v100") == "constraint"
    assert slurm_partition.parse_sinfo(SINFO.replace("|v100|", "|(null)|"), "gpu").gpu_type_mode("v100") == "gres"


def test_empty_partition_is_refused() -> None:
    assert "no nodes" in slurm_partition.check(_cluster(), slurm_partition.parse_sinfo(SINFO, "nope"))[0]


def test_executor_parameters_map_every_cluster_field() -> None:
    c = _cluster(partition="gpu", nodes=2, gpus_per_node=4, gpu_type="a100", account="lab", qos="high",
                 timeout_min=600, cpus_per_task=16, mem_gb=200, setup=["module load cuda"])
    p = executors.executor_parameters(c, "full")
    assert p["nodes"] == 2 and p["tasks_per_node"] == 1 and p["gpus_per_node"] == 4
    assert p["slurm_partition"] == "gpu" and p["slurm_constraint"] == "a100"
    assert p["slurm_account"] == "lab" and p["slurm_qos"] == "high"
    assert p["timeout_min"] == 600 and p["cpus_per_task"] == 16 and p["mem_gb"] == 200
    assert p["slurm_setup"][0] == "module load cuda"
    assert any(line.startswith("cd ") for line in p["slurm_setup"])
    assert not any("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" in line for line in p["slurm_setup"])  # 2 nodes
    gres = executors.executor_parameters(c, "full", gpu_type_as="gres")
    assert gres["slurm_additional_parameters"]["gres"] == "gpu:a100:4" and "gpus_per_node" not in gres
    assert "slurm_constraint" not in gres
    one = executors.executor_parameters(_cluster(), "smoke")
    assert "gpus_per_node" not in one and "slurm_partition" not in one
    assert any("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" in line for line in one["slurm_setup"])


def test_cluster_validation_lists_every_problem() -> None:
    problems = executors.validate_cluster(_cluster(executor="local", nodes=2, timeout_min=0))
    assert len(problems) == 2
    assert any("nodes=1" in p for p in problems) and any("timeout_min" in p for p in problems)
    for name in ("slurm_test", "local", "debug"):
        assert executors.validate_cluster(cluster_config(name)) == []


def test_submit_refuses_before_queueing(tmp_path) -> None:
    """A debug executor asking for more GPUs than this machine has: ConfigError, no job folder made."""
    have = local_kind.local_gpu_count()
    c = dataclasses.replace(cluster_config("debug"), gpus_per_node=have + 1, log_dir=str(tmp_path / "logs"))
    with pytest.raises(ConfigError, match=f"gpus_per_node={have + 1} but this machine has {have} GPU"):
        executors.submit_grid(GridConfig(), c, task=print)
    assert not (tmp_path / "logs").exists()


@pytest.mark.integration
def test_debug_executor_takes_the_same_path(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cluster=debug: RayJob in this process (Ray head subprocess, then the same run_grid)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    grid = dataclasses.replace(grid_config("smoke", ["models=[tiny-llama]", "limit=1", "benchmarks=[mbpp]",
                                                  "acceptance=[greedy]"]),
                               results_dir=str(tmp_path / "r"))
    summary = executors.run_grid_on_cluster(grid, dataclasses.replace(cluster_config("debug"), log_dir=str(tmp_path / "logs")))
    assert summary.shards_done == 1 and summary.shards_total == 1
    assert len(read_pairs(tmp_path / "r")) == 1
    assert list((tmp_path / "logs").glob("*/*_ray_head.log"))  # the job started its own Ray head


# The two-node test cluster of .ci/slurm.sh as sinfo lists it, and a variant whose second node has fewer GPUs.
TWO_NODES = "nodeA|4|gpu:2|(null)|debug*\nnodeB|4|gpu:2|(null)|debug*\n"


def test_multi_node_requests_are_checked_per_node() -> None:
    inv = slurm_partition.parse_sinfo(TWO_NODES, None)
    assert slurm_partition.check(_cluster(nodes=2, gpus_per_node=2, cpus_per_task=4), inv) == []
    too_many_nodes = slurm_partition.check(_cluster(nodes=3, gpus_per_node=1), inv)
    assert len(too_many_nodes) == 1 and "nodes=3 but only 2 node(s)" in too_many_nodes[0]
    assert "set nodes=2 or fewer" in too_many_nodes[0] and "gpus_per_node=" not in too_many_nodes[0].split(":")[1]
    too_many_gpus = slurm_partition.check(_cluster(nodes=2, gpus_per_node=3), inv)
    assert len(too_many_gpus) == 1 and "set gpus_per_node=2 or fewer" in too_many_gpus[0]
    uneven = slurm_partition.parse_sinfo(TWO_NODES.replace("nodeB|4|gpu:2", "nodeB|4|gpu:1"), None)
    problem = slurm_partition.check(_cluster(nodes=2, gpus_per_node=2), uneven)
    # the largest node has 2 GPUs, but only one node does: fewer nodes, or the 2nd-largest node's count
    assert len(problem) == 1 and "only 1 node(s)" in problem[0]
    assert "set nodes=1 or fewer, or gpus_per_node=1 to get 2 nodes" in problem[0]
    assert slurm_partition.check(_cluster(nodes=2, gpus_per_node=1), uneven) == []


def test_multi_node_example_config_runs_on_the_test_cluster() -> None:
    cluster = cluster_config("slurm_2nodes")
    assert cluster.nodes == 2 and cluster.gpus_per_node >= 1 and cluster.partition == "debug"
    assert cluster.timeout_min > 10  # a USR2 must count as a preemption, not a time-out
    assert slurm_partition.check(cluster, slurm_partition.parse_sinfo(TWO_NODES, None)) == []
    p = executors.executor_parameters(cluster, "smoke")
    assert p["nodes"] == 2 and p["tasks_per_node"] == 1 and p["gpus_per_node"] == cluster.gpus_per_node
    assert not any("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" in line for line in p["slurm_setup"])
