"""A Ray cluster over one job allocation: the head on rank 0, one worker per other rank.

Used by :class:`jobs.cluster.executors.RayJob` inside a submitit job (Slurm, local or debug executor alike):

- rank 0 starts ``ray start --head --block`` in its own session, publishes ``host:port`` in a file
  in the job's log folder (shared file system), waits until every node has joined, runs the driver;
- every other rank waits for that file, runs ``ray start --address=... --block`` and stays until
  rank 0 writes the ``done`` file (or its own Ray dies).

CPU and GPU counts come from the allocation as the cluster kind reads it (:class:`~jobs.cluster.kind_protocol.TaskEnv`;
on Slurm ``SLURM_CPUS_PER_TASK``, ``SLURM_GPUS_ON_NODE`` / ``CUDA_VISIBLE_DEVICES``), never from the machine: Ray
otherwise sees the whole node (ray #13607).
A one-node job uses 127.0.0.1 with the loopback settings of :mod:`jobs.run.local_ray`; a multi-node job
listens on each node's own address: the address its node name (``TaskEnv.node_name``, Slurm's ``SLURMD_NODENAME``) resolves to,
and workers check that the head's published address is that of the allocation's first node. All ports are picked free (outside the ephemeral range: :func:`free_ports`), so several jobs (or other people's
Ray) can share a node. The Ray processes ignore SIGUSR2: Slurm signals every process of the step
on preemption, and only the driver must act on it (checkpoint and requeue).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from jobs.cluster.kind_protocol import TaskEnv
from jobs.run import local_ray
from streamgen.config import RayConfig

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 120.0


class RayBootstrapError(RuntimeError):
    """Ray could not be started or joined inside the allocation; the message names the log to read."""


@dataclass(frozen=True)
class Allocation:
    """What this task of the job was given: its rank, the node count, and its CPUs and GPUs."""

    job_id: str
    rank: int
    num_nodes: int  # one task, hence one Ray node, per Slurm node; 1 keeps Ray on loopback
    num_cpus: int
    num_gpus: int
    folder: Path  # shared log folder of the job
    hostnames: tuple[str, ...] = ()  # the allocation's nodes in rank order (SLURM_JOB_NODELIST)
    node_name: str | None = None  # this node's name as the others know it (None: its host name)
    restart: str = "0"  # the job's requeue count: a requeued run must not read the last run's files

    @property
    def is_head(self) -> bool:
        return self.rank == 0


def allocation_from_env(folder: Path, ray_cfg: RayConfig, task: TaskEnv) -> Allocation:
    """Read the allocation from submitit's job environment and what the cluster kind says ``task`` was given.

    ``ray_cfg.num_cpus`` / ``num_gpus``, when set, win (e.g. fewer CPUs for Ray than the task has).
    """
    import submitit

    env = submitit.JobEnvironment()
    if env.num_tasks != env.num_nodes:  # Ray turns 127.0.0.1 into the host's address for a joining node
        raise RayBootstrapError(f"{env.num_tasks} tasks on {env.num_nodes} node(s): run one task per node "
                                "(jobs.cluster.executors submits tasks_per_node=1); Ray uses every CPU/GPU of it")
    return Allocation(
        job_id=str(env.job_id),
        rank=env.global_rank,
        num_nodes=env.num_nodes,
        num_cpus=ray_cfg.num_cpus if ray_cfg.num_cpus is not None else task.cpus,
        num_gpus=ray_cfg.num_gpus if ray_cfg.num_gpus is not None else task.gpus,
        folder=folder,
        hostnames=tuple(env.hostnames),
        node_name=task.node_name,
        restart=task.restart,
    )


def free_ports(host: str, n: int, taken: Collection[int] = ()) -> list[int]:
    """``n`` distinct free ports, none in ``taken``, from below the kernel's ephemeral range.

    The sockets stay bound until all are chosen: ports asked for one at a time can repeat (the kernel may hand a
    just-closed port out again), and ``ray start`` then refuses two components on one port (seen in CI: the
    metrics exporter and the agent's gRPC port). And they come from :func:`listen_range`, not from the kernel's
    ephemeral range: a port of that range is free when chosen, but any outgoing connection may take it as its
    local port before the agent binds, seconds later under load (seen in CI: a worker node's runtime-env agent
    got "Address already in use" and its raylet exited with it)."""
    low, high = listen_range()
    candidates = random.Random(f"{os.getpid()}-{time.time_ns()}").sample(range(low, high), high - low)
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        for candidate in candidates:
            if len(ports) == n:
                break
            if candidate in taken:
                continue
            s = socket.socket()
            try:
                s.bind((host, candidate))
            except OSError:  # someone listens there
                s.close()
                continue
            sockets.append(s)
            port = int(s.getsockname()[1])
            if port not in taken and port not in ports:
                ports.append(port)
    finally:
        for s in sockets:
            s.close()
    if len(ports) < n:
        raise RayBootstrapError(f"only {len(ports)} of {n} free ports in {low}-{high - 1} on {host}, outside the "
                                f"kernel's ephemeral range: narrow net.ipv4.ip_local_port_range, or free ports there")
    return ports


LISTEN_LOW = 20000  # above Ray's own worker ports (10002-19999 by default) and its fixed ones (6379, 8265, 10001)


def listen_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """Ports to listen on, [low, high): the wider of the two stretches outside the kernel's ephemeral range (which
    outgoing connections draw their local ports from; Linux's default 32768-60999, read from ``path``), below it
    from :data:`LISTEN_LOW` or above it."""
    try:
        eph_low, eph_high = (int(x) for x in Path(path).read_text().split()[:2])
    except (OSError, ValueError):
        eph_low, eph_high = 32768, 60999
    below, above = (LISTEN_LOW, max(LISTEN_LOW, eph_low)), (min(eph_high + 1, 65536), 65536)
    return below if below[1] - below[0] >= above[1] - above[0] else above


def node_ip(alloc: Allocation) -> str:
    """Loopback for a one-node job (nothing leaves the machine), else this node's routable address:
    that of its node name (``alloc.node_name``: the name other nodes know it by), else its host name.
    """
    if alloc.num_nodes == 1:
        return local_ray.LOOPBACK
    return resolve_node(alloc.node_name or socket.getfqdn())


def resolve_node(host: str) -> str:
    """The first non-loopback IPv4 address of ``host``.

    ``gethostbyname(hostname)`` alone is not enough: Debian maps the host name to 127.0.1.1.
    """
    try:
        addrs = sorted({str(ai[4][0]) for ai in socket.getaddrinfo(host, None, socket.AF_INET)})
    except socket.gaierror as exc:
        raise RayBootstrapError(f"cannot resolve node {host!r} ({exc}): fix the nodes' name resolution "
                                "(/etc/hosts) or run on one node") from exc
    routable = [a for a in addrs if not a.startswith("127.")]
    if not routable:
        raise RayBootstrapError(f"{host} resolves only to loopback ({addrs}): other nodes could not reach "
                                "this Ray node; fix the node's name resolution (/etc/hosts) or run on one node")
    return routable[0]


def check_head_address(alloc: Allocation, address: str) -> None:
    """The head must run on the allocation's first node: refuse an address from anywhere else
    (e.g. an address file left by another job) instead of joining the wrong cluster."""
    if not alloc.hostnames:
        return
    expected = resolve_node(alloc.hostnames[0])
    if address.rsplit(":", 1)[0] != expected:
        raise RayBootstrapError(f"the Ray head address {address} is not on the allocation's first node "
                                f"{alloc.hostnames[0]} ({expected}); read {_address_file(alloc)}")


def _ignore_usr2() -> None:  # runs in the child before exec; inherited by all Ray processes
    os.setsid()
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


@dataclass
class RayProcess:
    """One ``ray start --block`` process group we own."""

    popen: subprocess.Popen[bytes]
    address: str
    log_path: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        """Stop ``ray start`` (it drains and stops its daemons), then kill whatever is left of the group.

        Signalling the whole group at once would kill the GCS first and make the drain wait 30 s.
        """
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                log.warning("Ray node %s did not stop within 20 s; killing it", self.address)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        if self.alive():
            self.popen.wait(timeout=10)
        log.info("stopped Ray node (%s)", self.address)


def _ray_env(ip: str, head: bool) -> dict[str, str]:
    """The environment of a ``ray start``: quiet, offline, and on loopback where possible.

    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps every listener of a one-node head on 127.0.0.1, but
    ``ray start --address`` refuses to join a cluster while it is set: worker nodes (and multi-node
    heads) drop it and bind to their ``--node-ip-address`` instead.
    """
    if ip == local_ray.LOOPBACK:
        local_ray.apply_loopback_env()
    else:
        local_ray.ensure_bootstrap_config()
    env = {**os.environ, **local_ray.LOOPBACK_ENV, **local_ray.WORKER_ENV}
    if ip != local_ray.LOOPBACK or not head:
        env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    return env


AGENT_PORT_FLAGS = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
                    "--runtime-env-agent-port")


def _start(args: list[str], ip: str, alloc: Allocation, ray_cfg: RayConfig, address: str,
           log_name: str, head: bool, taken: Collection[int] = ()) -> RayProcess:
    ports = dict(zip(AGENT_PORT_FLAGS, free_ports(ip, len(AGENT_PORT_FLAGS), taken), strict=True))
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", f"--node-ip-address={ip}",
           f"--num-cpus={alloc.num_cpus}", f"--num-gpus={alloc.num_gpus}",
           f"--object-store-memory={ray_cfg.object_store_mb * 1024 * 1024}", "--disable-usage-stats",
           *[f"{flag}={port}" for flag, port in ports.items()], *args]
    log_path = alloc.folder / log_name
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        popen = subprocess.Popen(cmd, env=_ray_env(ip, head), stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, preexec_fn=_ignore_usr2)
    return RayProcess(popen, address, log_path)


def _has_ray_client() -> bool:
    """Whether ``ray start --head`` would start a Ray Client server: only where grpcio is installed
    (plain ``ray`` does not bring it; the server itself is never used by streamgen)."""
    import importlib.util

    return importlib.util.find_spec("grpc") is not None


def start_head(alloc: Allocation, ray_cfg: RayConfig) -> RayProcess:
    """``ray start --head`` on a free port (returns at once; :func:`connect` waits for it)."""
    ip = node_ip(alloc)
    port, client_port = free_ports(ip, 2)
    temp_dir = Path(tempfile.gettempdir()) / f"ray-{_run_key(alloc)}"  # not /tmp/ray: others' Ray lives there
    args = ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp_dir}"]
    if _has_ray_client():  # else no client server starts at all; with grpc, not on the default 10001
        args.append(f"--ray-client-server-port={client_port}")
    proc = _start(args, ip, alloc, ray_cfg, f"{ip}:{port}", f"{alloc.job_id}_ray_head.log", head=True,
                  taken=(port, client_port))
    log.info("Ray head starting at %s (num_cpus=%d num_gpus=%d object_store=%d MiB), log %s",
             proc.address, alloc.num_cpus, alloc.num_gpus, ray_cfg.object_store_mb, proc.log_path)
    return proc


def connect(head: RayProcess, expected_nodes: int, timeout_s: float = JOIN_TIMEOUT_S) -> None:
    """Connect this process to the head as Ray's driver, then wait until ``expected_nodes`` are alive."""
    import ray

    deadline = time.monotonic() + timeout_s
    while not ray.is_initialized():
        if not head.alive():
            raise RayBootstrapError(f"the Ray head exited early (code {head.popen.returncode}); "
                                    f"read {head.log_path}")
        try:
            ray.init(address=head.address, include_dashboard=False, log_to_driver=True,
                     configure_logging=False)
        except ConnectionError as exc:
            if time.monotonic() > deadline:
                raise RayBootstrapError(f"cannot connect to the Ray head at {head.address}: {exc}; "
                                        f"read {head.log_path}") from exc
            time.sleep(1.0)
    while sum(n["Alive"] for n in ray.nodes()) < expected_nodes:
        if time.monotonic() > deadline:
            raise RayBootstrapError(f"only some of {expected_nodes} Ray nodes joined within {timeout_s:.0f} s; "
                                    f"read the *_ray_*.log files in {head.log_path.parent}")
        time.sleep(1.0)


def _run_key(alloc: Allocation) -> str:
    """Job id plus the job's restart count: a requeued job keeps its id but must not read old files."""
    return f"{alloc.job_id}_r{alloc.restart}"


def run_file(alloc: Allocation, kind: str) -> Path:
    """``<log folder>/<job>_r<restart>_<kind>``: the files the ranks of this run share."""
    return alloc.folder / f"{_run_key(alloc)}_{kind}"


def _address_file(alloc: Allocation) -> Path:
    return run_file(alloc, "ray_address")


def _done_file(alloc: Allocation) -> Path:
    return run_file(alloc, "ray_done")


def _wait_for_file(path: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.5)
    raise RayBootstrapError(f"{path} did not appear within {timeout_s:.0f} s: did rank 0 fail? "
                            f"read its log in {path.parent}")


@contextlib.contextmanager
def ray_cluster(alloc: Allocation, ray_cfg: RayConfig) -> Iterator[str | None]:
    """Yield the head's address on rank 0, connected as driver once all nodes joined; ``None`` elsewhere.

    Rank 0 must call ``local_ray.apply_loopback_env()`` semantics before importing ray: done here.
    """
    if alloc.is_head:
        head = start_head(alloc, ray_cfg)  # sets the loopback env first: ray reads some at import
        import ray

        try:
            _address_file(alloc).write_text(head.address)
            connect(head, alloc.num_nodes)
            yield head.address
        finally:
            _done_file(alloc).write_text("done")
            _address_file(alloc).unlink(missing_ok=True)
            if ray.is_initialized():
                ray.shutdown()
            head.stop()
        return
    address = _wait_for_file(_address_file(alloc), JOIN_TIMEOUT_S)
    check_head_address(alloc, address)
    worker = _start([f"--address={address}"], node_ip(alloc), alloc, ray_cfg, address,
                    f"{alloc.job_id}_ray_worker{alloc.rank}.log", head=False)
    try:
        while worker.alive() and not _done_file(alloc).exists():
            time.sleep(2.0)
        yield None
    finally:
        worker.stop()
