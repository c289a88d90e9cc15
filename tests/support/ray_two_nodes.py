"""A real two-node Ray cluster in the network namespaces of .ci/slurm.sh: the head in ``sgci-nodeA``, a worker in
``sgci-nodeB``, each a raylet of its own on its own address, joined over the bridge ``sgci0``.

Started by :func:`two_node_ray` (a context manager) for the tests of ``ray job submit``; the test process stays in
the root namespace and talks to the head's dashboard at ``http://10.213.7.11:<port>`` over the bridge, as a user's
laptop talks to a cluster. Each ``ray start --block`` runs in its node's namespace as .ci/slurm.sh's ``run_in`` runs
a command there (``nsenter`` plus the node's host name and hosts file; not ``ip netns exec``, which remounts /sys).
Every port is chosen free inside the node's own namespace (:func:`jobs.cluster.ray_cluster.free_ports`), so Slurm's
test jobs, which start Ray in the same namespaces, and other Ray on this machine are left alone. Stopping ends only
what the two ``ray start`` processes started (their process trees, by pid), never ``ray stop``.

:func:`no_namespaces` and :func:`no_job_server` say why the cluster cannot start here, or would have no job server
(not root; no namespaces: Slurm's CI cluster not started; no ``ray[default]``), for a skip reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.cluster.ray_cluster import AGENT_PORT_FLAGS
from jobs.run import local_ray

log = logging.getLogger(__name__)

NODES = {"nodeA": "10.213.7.11", "nodeB": "10.213.7.12"}  # .ci/slurm.sh: SLURM_CI_NET=10.213.7, .11 and .12
HEAD, WORKER = "nodeA", "nodeB"
START_TIMEOUT_S = 180.0  # a raylet has Ray's fixed 30 s to register; on a loaded machine a start takes longer
# without these the dashboard starts, but without its job server (``ray job submit`` answers 404) or job logs
JOB_SERVER_MODULES = ("aiohttp_cors", "grpc", "opencensus", "prometheus_client")
START_ATTEMPTS = 2  # Ray's "timed out during startup": the start is tried once more (docs/testing.md, "Flaky tests")


def namespace(node: str) -> Path:
    return Path("/run/netns") / f"sgci-{node}"


def no_namespaces() -> str | None:
    """Why the two nodes cannot start here (not root, .ci/slurm.sh's namespaces absent), or None."""
    if os.geteuid() != 0:
        return "needs root: the Ray nodes run in the network namespaces of .ci/slurm.sh"
    missing = [str(namespace(n)) for n in NODES if not namespace(n).exists()]
    if missing:
        return (f"no network namespaces {missing}: start the CI cluster with `sudo bash .ci/slurm.sh install && "
                "sudo bash .ci/slurm.sh start`")
    return None


def no_job_server() -> str | None:
    """Why the head would have no job server (``ray job submit`` needs ``ray[default]``), or None."""
    missing = [m for m in JOB_SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return (f"Ray's job server needs ray[default], and {missing} are missing: pip install 'ray[default]' "
                "(the extra of docs/cluster.md)")
    return None


def in_node(node: str, argv: list[str]) -> list[str]:
    """``argv`` run in ``node``'s network namespace, with ``node`` as its host name and the namespace's hosts
    file (.ci/slurm.sh, ``run_in``): Ray then names the node by it, as Slurm's nodes are named."""
    script = ('for f in hosts resolv.conf; do [ -e "/etc/netns/sgci-$0/$f" ] && '
              'mount --bind "/etc/netns/sgci-$0/$f" "/etc/$f"; done; hostname "$0" && exec "$@"')
    return ["nsenter", f"--net={namespace(node)}", "unshare", "--mount", "--propagation", "slave", "--uts",
            "sh", "-c", script, node, *argv]


def free_ports_in(node: str, n: int, taken: Collection[int] = ()) -> list[int]:
    """``n`` distinct ports free on ``node``'s address, none in ``taken``, chosen inside its namespace."""
    code = (f"from jobs.cluster.ray_cluster import free_ports; "
            f"print(' '.join(map(str, free_ports({NODES[node]!r}, {n}, {sorted(taken)!r}))))")
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(["nsenter", f"--net={namespace(node)}", sys.executable, "-c", code], cwd=root,
                         env={**os.environ, "PYTHONPATH": root}, capture_output=True, text=True, timeout=120,
                         check=True)
    return [int(p) for p in out.stdout.split()]


def node_env(home: Path) -> dict[str, str]:
    """A ``ray start``'s environment: quiet and offline (:mod:`jobs.run.local_ray`), ``home`` with the bootstrap
    file, and not loopback-only (a joining node and a multi-node head bind their own address)."""
    local_ray.ensure_bootstrap_config(home)
    env = {**os.environ, **local_ray.LOOPBACK_ENV, **local_ray.WORKER_ENV, "HOME": str(home)}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.pop("RAY_ADDRESS", None)
    return env


@dataclass
class RayNode:
    """One ``ray start --block`` in a namespace: the process this harness started, and its log."""

    node: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, grace_s: float = 30.0) -> None:
        """``ray start`` stops its node's daemons on SIGTERM; whatever of its tree is left is killed after."""
        tree = _descendants(self.popen.pid) | {self.popen.pid}
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log.warning("Ray node %s did not stop within %.0f s: killing its processes", self.node, grace_s)
        tree |= _descendants(self.popen.pid)
        for pid in sorted(tree):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)


@dataclass
class TwoNodeRay:
    """The running cluster: its nodes, the head's GCS address and the dashboard URL ``ray job submit`` uses."""

    head: RayNode
    worker: RayNode
    gcs_address: str  # host:port, what ``ray.init`` / ``RAY_ADDRESS`` inside the cluster name
    dashboard: str  # http://host:port, what ``ray job submit --address`` names

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's alive nodes as the dashboard lists them (no ``ray.init`` in this process)."""
        from ray.util.state import list_nodes

        return [dict(n.__dict__) if not isinstance(n, dict) else n
                for n in list_nodes(address=self.dashboard, filters=[("state", "=", "ALIVE")], timeout=60)]

    def actors(self) -> list[dict[str, Any]]:
        """Every actor the cluster knows of (alive or dead), from the dashboard's state API."""
        from ray.util.state import list_actors

        return [dict(a.__dict__) if not isinstance(a, dict) else a
                for a in list_actors(address=self.dashboard, limit=10_000, timeout=60, detail=True)]

    def stop(self) -> None:
        self.worker.stop()
        self.head.stop()


@dataclass(frozen=True)
class _Plan:
    """What both nodes are started with."""

    folder: Path  # the ``ray start`` logs and HOME (Ray's bootstrap file)
    temp: Path  # Ray's temp dir: short, as Ray's unix sockets in it must stay under 108 bytes
    cpus: int
    gpus: int

    @property
    def home(self) -> Path:
        return self.folder / "home"


def _start_node(plan: _Plan, node: str, args: list[str], log_name: str, taken: Collection[int] = ()) -> RayNode:
    ports = free_ports_in(node, len(AGENT_PORT_FLAGS), taken)
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", f"--node-ip-address={NODES[node]}",
           f"--num-cpus={plan.cpus}", f"--num-gpus={plan.gpus}", f"--object-store-memory={128 * 1024 * 1024}",
           f"--temp-dir={plan.temp}", "--disable-usage-stats",
           *[f"{f}={p}" for f, p in zip(AGENT_PORT_FLAGS, ports, strict=True)], *args]
    log_path = plan.folder / log_name
    with open(log_path, "ab") as out:
        popen = subprocess.Popen(in_node(node, cmd), env=node_env(plan.home), stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    return RayNode(node, popen, log_path)


def _start_head(plan: _Plan, attempt: int) -> tuple[RayNode, str, str]:
    port, dash, client = free_ports_in(HEAD, 3)
    ip = NODES[HEAD]
    args = ["--head", f"--port={port}", f"--dashboard-host={ip}", f"--dashboard-port={dash}"]
    if importlib.util.find_spec("grpc") is not None:  # Ray Client's server starts only with grpc: not on 10001
        args.append(f"--ray-client-server-port={client}")
    head = _start_node(plan, HEAD, args, f"head{attempt}.log", {port, dash, client})
    return head, f"{ip}:{port}", f"http://{ip}:{dash}"


def _dashboard_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=5) as answer:
            return bool(json.loads(answer.read()).get("ray_version"))
    except (OSError, ValueError):
        return False


def _wait(what: str, condition: Callable[[], bool], nodes: list[RayNode], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        for node in nodes:
            if not node.alive():
                raise NodeStartFailed(f"Ray on {node.node} exited (code {node.popen.returncode}) before {what}; "
                                      f"its log {node.log_path}:\n{node.log_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise NodeStartFailed(f"{what} not within {timeout_s:.0f} s; logs in {nodes[0].log_path.parent}")
        time.sleep(1.0)


class NodeStartFailed(RuntimeError):
    """A ``ray start`` exited or did not come up; the message carries its log."""


def _start(plan: _Plan, attempt: int) -> TwoNodeRay:
    head, gcs, dashboard = _start_head(plan, attempt)
    worker = None
    try:
        _wait("the head's dashboard answered", lambda: _dashboard_answers(dashboard), [head], START_TIMEOUT_S)
        worker = _start_node(plan, WORKER, [f"--address={gcs}"], f"worker{attempt}.log")
        cluster = TwoNodeRay(head, worker, gcs, dashboard)
        _wait("both nodes alive", lambda: len(cluster.nodes()) == 2, [head, worker], START_TIMEOUT_S)
        return cluster
    except BaseException:
        if worker is not None:
            worker.stop(grace_s=10)
        head.stop(grace_s=10)
        raise


@contextlib.contextmanager
def two_node_ray(folder: Path, *, cpus: int = 2, gpus: int = 1) -> Iterator[TwoNodeRay]:
    """Start the cluster (``cpus`` and ``gpus`` per node; the ``ray start`` logs in ``folder``), yield it, stop it.
    A start that hits Ray's "timed out during startup" is tried once more; anything else fails at once."""
    folder.mkdir(parents=True, exist_ok=True)
    plan = _Plan(folder, Path(tempfile.mkdtemp(prefix="ray2n-")), cpus, gpus)
    try:
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                cluster = _start(plan, attempt)
                break
            except NodeStartFailed as exc:
                if attempt == START_ATTEMPTS or not local_ray.is_start_timeout(exc):
                    raise
                log.warning("the two-node Ray did not start (%s): trying once more", str(exc).splitlines()[0])
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(plan.temp, ignore_errors=True)


def _descendants(pid: int) -> set[int]:
    return local_ray._descendants(pid)  # noqa: SLF001 - the one /proc walk of the project
