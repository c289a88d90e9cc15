"""The ``ray`` cluster kind: the work runs on a Ray cluster that is already up (KubeRay, cloud VMs, ``ray job submit``).

The driver runs in this process (under ``ray job submit`` that is the job's entry point, on the head node) and
attaches to the cluster at the cluster file's ``address:`` or, when that is null, at ``$RAY_ADDRESS`` (which
``ray job submit`` sets for its entry point). The file wins: it is written down and names one cluster, where an
exported variable may be left from another shell; ``address: auto`` hands the choice back to Ray, whose own
rule reads ``$RAY_ADDRESS`` first. This kind starts no Ray and stops none: the driver's Ray session is not
``owned`` (:func:`jobs.run.local_ray.start_ray`), so the run ends without ``ray.shutdown``.

Before any work (:meth:`RayKind.prepare`), in this order, each failure one message naming its fix:

1. the address: set, of a form Ray takes, and answering (a TCP connect: ``ray.init`` itself waits minutes);
2. a relative ``results_dir`` while this process runs in Ray's copy of ``--working-dir`` is refused (the files
   would land in that copy and be deleted with it);
3. connected, the cluster's alive nodes (``ray.nodes()``) are checked against the work with the Slurm rules
   (:mod:`jobs.grid.allocation_fit`): :func:`live_shape` turns them into a ``Shape``;
4. one task pinned to each alive node writes a file under ``results_dir`` and reads the driver's; the driver
   reads each node's (:func:`check_reach`): the Parquet files are the driver's, but every model actor appends
   its unit's spool (:mod:`jobs.run.spool`) on its own node.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jobs.cluster.kind_protocol import Offer, TaskEnv, visible_gpus
from jobs.grid import allocation_fit
from jobs.grid.allocation_fit import GIB, Shape, actors_per_node
from jobs.grid.checkpoint_preflight import grid_models
from streamgen.config import ClusterConfig, ConfigError, GridConfig, RayConfig, raise_if_problems
from streamgen.results.results_dir import ResultsDirError

log = logging.getLogger(__name__)

ADDRESS_ENV = "RAY_ADDRESS"
ADDRESS_FORMS = "auto, ray://HOST:10001 or HOST:6379 (the head's GCS port)"
CONNECT_TIMEOUT_S = 10.0  # the TCP check before ray.init, which otherwise retries for minutes
PROBE_TIMEOUT_S = 180.0  # every node's probe task, together (a busy cluster may start a worker slowly)
PROBE_DIR = ".reach"  # under results_dir, removed after the probe


def address_problems(cluster: ClusterConfig) -> list[str]:
    """The cluster file's ``address`` is of a form Ray takes (null is fine: ``$RAY_ADDRESS`` then)."""
    if cluster.address is None:
        return []
    return form_problems(cluster.address, f"cluster {cluster.name}: address={cluster.address!r}",
                         f"address: in configs/cluster/{cluster.name}.yaml")


def form_problems(address: str, where: str, knob: str) -> list[str]:
    """``address`` (named ``where``, set by ``knob``) is one of :data:`ADDRESS_FORMS`."""
    if address == "auto":
        return []
    if address == "local":
        return [f"{where} would start a new Ray, not attach to one: use cluster=local for that, or set {knob} to "
                f"the running cluster's address, one of: {ADDRESS_FORMS}"]
    if address.startswith(("http://", "https://")):
        return [f"{where} is the dashboard's address (what `ray job submit --address` takes); the driver attaches "
                f"at the head's GCS port: set {knob} to e.g. {_host(address)}:6379 (under `ray job submit`, "
                "Ray sets RAY_ADDRESS to it: leave address: null)"]
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return [f"{where} is not one of: {ADDRESS_FORMS}: fix {knob}"]
    return []


def _host(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]


def resolve_address(cluster: ClusterConfig, environ: Mapping[str, str] = os.environ) -> str:
    """The address to attach at: the cluster file's ``address`` when set, else ``$RAY_ADDRESS``; either is
    checked for its form (ConfigError naming the fix)."""
    title = f"cluster {cluster.name!r}"
    env = environ.get(ADDRESS_ENV) or None
    if cluster.address:
        if env and env != cluster.address:
            log.info("attaching at address=%s of configs/cluster/%s.yaml; %s=%s is not used (the file wins)",
                     cluster.address, cluster.name, ADDRESS_ENV, env)
        raise_if_problems(address_problems(cluster), title)
        return cluster.address
    if env:
        raise_if_problems(form_problems(env, f"{ADDRESS_ENV}={env!r}", ADDRESS_ENV), title)
        return env
    raise ConfigError([f"cluster {cluster.name}: no Ray cluster to attach to: set {ADDRESS_ENV} (`ray job submit` "
                       f"sets it) or address: in configs/cluster/{cluster.name}.yaml, to one of: {ADDRESS_FORMS}"],
                      title)


def check_answers(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A TCP connect to ``address``'s host and port (``auto`` is Ray's to find); ConfigError naming the fix."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError([_unreachable(address, str(exc))], "cannot attach to the Ray cluster") from None


def _unreachable(address: str, why: str) -> str:
    return (f"nobody answers at {address} ({why}): is the cluster up? `ray status --address {address}` on the "
            f"head says; set {ADDRESS_ENV} or address: in the cluster file to its address, one of: {ADDRESS_FORMS}")


def connect(address: str) -> None:
    """Attach this process to the cluster as its driver (a connection that is already there is kept)."""
    from jobs.run.local_ray import start_ray

    check_answers(address)
    try:
        session = start_ray(RayConfig(address=address), default_num_cpus=1)
    except ConnectionError as exc:  # `auto` with no cluster on this machine, or a GCS that went away
        raise ConfigError([_unreachable(address, str(exc).splitlines()[0])], "cannot attach to the Ray cluster") from None
    assert not session.owned, "start_ray with an address only connects"


@dataclass(frozen=True)
class NodeOffer:
    """One alive node as Ray reports it."""

    node_id: str
    host: str  # its address (NodeManagerAddress)
    cpus: float
    gpus: float
    memory_gib: float  # Ray's ``memory`` + ``object_store_memory``: what its processes may use

    def describe(self) -> str:
        return f"{self.host} {self.cpus:g} CPU {self.gpus:g} GPU {self.memory_gib:.1f} GiB"


def alive_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[NodeOffer]:
    """``ray.nodes()``'s alive nodes."""
    out = []
    for n in nodes:
        if not n.get("Alive"):
            continue
        r = n.get("Resources", {})
        out.append(NodeOffer(str(n["NodeID"]), str(n.get("NodeManagerAddress", "?")), float(r.get("CPU", 0)),
                             float(r.get("GPU", 0)), (r.get("memory", 0) + r.get("object_store_memory", 0)) / GIB))
    return out


def live_shape(grid: GridConfig, nodes: Sequence[NodeOffer], address: str) -> Shape:
    """The rules' view of a running cluster: the nodes model actors can use (those with GPUs, or every node
    when none has one), each as small as the smallest of them in CPUs, GPUs and memory (an actor may land on
    any). Uniform nodes are seen exactly; a mixed cluster is checked as if every node were its smallest."""
    pool = [n for n in nodes if n.gpus >= 1] or list(nodes)
    if not pool:
        raise ConfigError([f"the Ray cluster at {address} has no alive node: `ray status --address {address}`"],
                          "cannot attach to the Ray cluster")
    gpus, cpus = int(min(n.gpus for n in pool)), int(min(n.cpus for n in pool))
    mem = min(n.memory_gib for n in pool)
    described = f"the Ray cluster at {address}: {len(nodes)} alive node(s): " + "; ".join(n.describe() for n in nodes)
    return Shape(len(pool), gpus, actors_per_node(grid, len(pool), gpus), cpus, books_memory=True, mem_gib=mem,
                 fixed=described)


def cluster_nodes() -> list[NodeOffer]:
    """The connected cluster's alive nodes."""
    import ray

    return alive_nodes(ray.nodes())


def ray_copy_of_working_dir(cwd: Path) -> Path | None:
    """Ray's copy of ``--working-dir`` that ``cwd`` lies in, or None: Ray unpacks it under
    ``<session>/runtime_resources/working_dir_files/`` (``ray_constants.DEFAULT_RUNTIME_ENV_DIR_NAME``, Ray 2.60)
    and starts the job's entry point there."""
    parts = cwd.parts
    if "runtime_resources" not in parts:
        return None
    return Path(*parts[: parts.index("runtime_resources") + 1])


def working_dir_problems(results_dir: str, cwd: Path) -> list[str]:
    """A relative ``results_dir`` inside Ray's temporary copy of the working dir is lost with the copy."""
    copy = ray_copy_of_working_dir(cwd)
    if Path(results_dir).is_absolute() or copy is None:
        return []
    return [f"results_dir={results_dir} is relative and this job runs in Ray's temporary copy of --working-dir "
            f"({cwd}, under {copy}): the results would be deleted with it. Set results_dir to an absolute path that "
            "every node shares (an NFS mount, or a PVC mounted at the same path on every pod), e.g. "
            "results_dir=/mnt/shared/results"]


def _probe_node(folder: str, name: str, token: str) -> tuple[str, str | None]:
    """On one node: write ``folder/name`` and read the driver's file; (this host, what failed or None)."""
    host = socket.gethostname()
    try:
        (Path(folder) / name).write_text(token)
    except OSError as exc:
        return host, f"cannot write there ({exc.strerror or exc})"
    try:
        seen = (Path(folder) / "driver").read_text()
    except OSError as exc:
        return host, f"wrote, but cannot read the driver's file ({exc.strerror or exc})"
    return host, None if seen == token else "reads another driver file there: not the same directory"


def check_reach(results_dir: Path, nodes: Sequence[NodeOffer], timeout_s: float = PROBE_TIMEOUT_S,
                probe: Callable[[str, str, str], tuple[str, str | None]] = _probe_node) -> None:
    """Every alive node writes a file under ``results_dir`` that the driver reads, and reads the driver's;
    ResultsDirError naming the nodes that cannot, and the fix. ``probe`` runs on each node (tests give a
    stand-in for a node whose path is another disk)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = uuid.uuid4().hex
    folder = results_dir / PROBE_DIR / token
    folder.mkdir(parents=True)
    try:
        (folder / "driver").write_text(token)
        task = ray.remote(num_cpus=0, max_retries=0)(probe)
        refs = {n.node_id: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False))
                .remote(str(folder), n.node_id, token) for n in nodes}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        failed = []
        for node in nodes:
            ref = refs[node.node_id]
            if ref not in ready:
                failed.append(f"node {node.node_id[:8]} at {node.host}: its probe task did not run within {timeout_s:.0f} s")
                continue
            host, problem = ray.get(ref)
            mine = folder / node.node_id
            if problem is None and not (mine.is_file() and mine.read_text() == token):
                problem = "wrote a file that the driver cannot see: this path is not shared with the driver"
            if problem:
                failed.append(f"node {node.node_id[:8]} at {node.host} ({host}): {problem}")
    finally:
        _remove(folder)
    if failed:
        raise ResultsDirError(
            f"results_dir {results_dir} is not the same directory on every node of the Ray cluster: "
            f"{'; '.join(failed)}. Model actors write their spool there on their own node and the driver reads it. "
            "Fix: set results_dir to a path every node shares (an NFS mount, or a PVC mounted at the same path on "
            "every pod)")
    log.info("results_dir %s: every node (%d) writes and reads it", results_dir, len(nodes))


def _remove(folder: Path) -> None:
    for f in folder.glob("*"):
        f.unlink(missing_ok=True)
    for d in (folder, folder.parent):
        try:
            d.rmdir()
        except OSError:  # another run's probe is there too, or a node's file came late
            pass


class RayKind:
    """``executor: ray``."""

    name = "ray"
    submitit = "local"  # never used: nothing is submitted (runs_here)
    runs_here = True

    def problems(self, cluster: ClusterConfig) -> list[str]:
        return address_problems(cluster)

    def shape(self, grid: GridConfig, cluster: ClusterConfig) -> Shape:
        """The running cluster's alive nodes (attaching first when this process is not attached yet); the
        cluster file's nodes, GPUs, CPUs and memory are not read."""
        address = resolve_address(cluster)
        connect(address)
        return live_shape(grid, cluster_nodes(), address)

    def offer(self, cluster: ClusterConfig) -> Offer:
        return Offer([], "constraint")  # what the cluster offers is its shape, read once attached

    def job_parameters(self, cluster: ClusterConfig, gpu_type_as: str) -> dict[str, Any]:
        return {}

    def task_env(self, default_cpus: int) -> TaskEnv:
        return TaskEnv(default_cpus, visible_gpus())

    def prepare(self, grid: GridConfig, cluster: ClusterConfig) -> GridConfig:
        """Attach, check the cluster against the work and every node's reach of ``results_dir`` (the module's
        steps 1-4); the grid to run, its ``results_dir`` absolute (the actors resolve no relative path)."""
        address = resolve_address(cluster)
        raise_if_problems(working_dir_problems(grid.results_dir, Path.cwd()), "results_dir cannot be used here")
        connect(address)
        nodes = cluster_nodes()
        shape = live_shape(grid, nodes, address)
        fit = allocation_fit.check(grid, cluster, grid_models(grid), shape)
        raise_if_problems(fit.problems, f"the Ray cluster at {address} cannot run grid {grid.name!r}; nothing was started")
        grid = replace(grid, results_dir=str(Path(grid.results_dir).resolve()))
        check_reach(Path(grid.results_dir), nodes)
        return grid
