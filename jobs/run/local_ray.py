"""Loopback-only Ray: the environment and ``ray.init`` settings every local run uses.

Why each setting (measured, see docs/grid.md and the environment notes):

- ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` forces 127.0.0.1 for every listener; ``_node_ip_address``
  alone does not.
- ``RAY_USAGE_STATS_ENABLED=0``: no usage report.
- ``RAY_AUTH_MODE=disabled``: no token bootstrap.
- ``$HOME/ray_bootstrap_config.yaml`` containing ``{}``: without it the head probes cloud metadata
  addresses even with usage stats off.

With an existing cluster (``RayConfig.address``, e.g. inside a Slurm job) we only connect to it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from streamgen.config import RayConfig

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
LOOPBACK_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}
# Ray workers inherit the driver's environment: keep hub access off and thread pools small.
# RAY_worker_niceness: Ray starts workers at nice 15 by default; on a shared machine our model
# actors were then starved by everything else, and their wall times measured the neighbours.
WORKER_ENV = {
    "RAY_worker_niceness": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@dataclass(frozen=True)
class RaySession:
    """What :func:`start_ray` did: whether we own the cluster (and must shut it down)."""

    owned: bool
    address: str | None


def set_env_defaults() -> None:
    """Set the loopback/quiet env vars unless they are set already (``jobs/__init__`` calls this)."""
    for key, value in {**LOOPBACK_ENV, **WORKER_ENV}.items():
        os.environ.setdefault(key, value)


def put_checkout_on_worker_path() -> None:
    """Local Ray workers inherit our environment: put this checkout first on their PYTHONPATH, so
    they unpickle actors and tasks from the same code as the driver (a fresh clone run as a script
    must not pick up another installed copy of streamgen)."""
    root = str(Path(__file__).resolve().parents[2])  # jobs/run/local_ray.py → the checkout
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not parts or parts[0] != root:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *[p for p in parts if p != root]])


def apply_loopback_env(home: str | os.PathLike[str] | None = None) -> Path:
    """Set the loopback/quiet env vars (without overriding explicit ones) and the bootstrap file.

    Returns the path of the ``ray_bootstrap_config.yaml`` it made sure exists.
    """
    set_env_defaults()
    return ensure_bootstrap_config(home)


def _force_loopback_constant() -> None:
    """Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once at import: if ray was imported before our env
    was set, correct the constant it cached (else the head resolves 127.0.0.1 to the host's address)."""
    from ray._private import ray_constants

    wanted = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0") not in ("0", "false", "False")
    if ray_constants.ENABLE_RAY_CLUSTER != wanted:
        log.warning("ray was imported before jobs.run.local_ray set its environment; correcting ENABLE_RAY_CLUSTER")
        ray_constants.ENABLE_RAY_CLUSTER = wanted


def ensure_bootstrap_config(home: str | os.PathLike[str] | None = None) -> Path:
    """Create ``$HOME/ray_bootstrap_config.yaml`` containing ``{}`` if it is missing."""
    base = Path(home) if home is not None else Path(os.environ.get("HOME") or Path.home())
    path = base / "ray_bootstrap_config.yaml"
    if not path.exists():
        base.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
        log.info("wrote %s (stops Ray's head from probing cloud metadata addresses)", path)
    return path


def start_ray(cfg: RayConfig, *, default_num_cpus: int) -> RaySession:
    """Connect to ``cfg.address`` or start a local Ray on loopback; reuse one already initialised."""
    apply_loopback_env()  # before importing ray: some settings are read at import time
    import ray

    if ray.is_initialized():
        return RaySession(owned=False, address=None)
    if cfg.address:
        log.info("connecting to the Ray cluster at %s", cfg.address)
        ray.init(address=cfg.address, include_dashboard=False, log_to_driver=True)
        return RaySession(owned=False, address=cfg.address)
    _force_loopback_constant()
    put_checkout_on_worker_path()
    num_cpus = cfg.num_cpus if cfg.num_cpus is not None else default_num_cpus
    log.info("starting local Ray on %s: num_cpus=%s num_gpus=%s object_store=%d MiB",
             LOOPBACK, num_cpus, cfg.num_gpus, cfg.object_store_mb)
    for attempt in range(1, START_ATTEMPTS + 1):
        before = _descendants(os.getpid())
        try:
            ray.init(
                address="local",  # always a new instance: never attach to another user's Ray on this host
                num_cpus=num_cpus,
                num_gpus=cfg.num_gpus,
                include_dashboard=False,
                object_store_memory=cfg.object_store_mb * 1024 * 1024,
                _node_ip_address=LOOPBACK,
                log_to_driver=True,
                configure_logging=False,
            )
            return RaySession(owned=True, address=None)
        except Exception as exc:  # Ray raises a bare Exception for this one
            if not is_start_timeout(exc):
                raise
            _stop_orphans(_descendants(os.getpid()) - before)  # the half-started head: its GCS and raylet
            load = os.getloadavg()[0]
            if attempt == START_ATTEMPTS:
                raise RayStartError(
                    f"local Ray did not start: its raylet did not register within Ray's 30 s, {START_ATTEMPTS} "
                    f"times (load average {load:.1f} on {os.cpu_count()} CPUs). Rerun when the machine is less "
                    f"busy (finished shards are kept), or give it fewer processes: workers=1 score_workers=1"
                ) from None
            log.warning("local Ray did not start within Ray's 30 s (load average %.1f on %s CPUs): "
                        "starting it again (attempt %d of %d)", load, os.cpu_count(), attempt + 1, START_ATTEMPTS)
    raise AssertionError("unreachable")


START_ATTEMPTS = 3  # Ray gives a new node's raylet a fixed 30 s to register (ray/_private/node.py)


class RayStartError(RuntimeError):
    """Local Ray could not start, even after :data:`START_ATTEMPTS` tries; the message names the fix."""


def is_start_timeout(exc: BaseException) -> bool:
    """Ray's own words when a new node's raylet does not register in time (a loaded machine)."""
    return "timed out during startup" in str(exc)


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (read from /proc: Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _stop_orphans(pids: set[int]) -> None:
    """Kill what a failed ``ray.init`` left running (Ray forgets a node it could not finish starting)."""
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        import ray

        ray.shutdown()  # whatever global state the attempt did set
    except Exception as exc:  # noqa: BLE001 - best effort after a failed start
        log.debug("ray.shutdown after a failed start: %s", exc)


def stop_ray(session: RaySession) -> None:
    """Shut down Ray if :func:`start_ray` started it."""
    import ray

    if session.owned and ray.is_initialized():
        ray.shutdown()
