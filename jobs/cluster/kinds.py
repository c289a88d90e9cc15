"""The cluster kinds, by the ``executor`` name of ``configs/cluster/*.yaml``: the one list of those names.

Adding a kind: one module in ``jobs/cluster/`` with a class that has :class:`~jobs.cluster.kind_protocol.ClusterKind`'s
members, one line in :data:`KINDS`, one YAML in ``configs/cluster/`` and one README line. The config keeps no
list of its own (``streamgen/`` cannot import ``jobs/``): an unknown executor is refused here, by
:func:`cluster_kind`; tests/jobs/cluster/test_kinds.py keeps KINDS and the YAMLs' executors equal.
"""

from __future__ import annotations

from jobs.cluster.debug import DebugKind
from jobs.cluster.existing_ray import RayKind
from jobs.cluster.kind_protocol import ClusterKind
from jobs.cluster.local import LocalKind
from jobs.cluster.slurm import SlurmKind
from streamgen.config import ClusterConfig, ConfigError

KINDS: dict[str, ClusterKind] = {kind.name: kind for kind in (LocalKind(), DebugKind(), SlurmKind(), RayKind())}


def unknown_kind_line(cluster: ClusterConfig) -> str:
    """The one problem an unknown ``executor`` is: the known kinds and the fix."""
    return (f"cluster {cluster.name}: executor={cluster.executor!r} is not one of {tuple(KINDS)}: set executor to "
            f"one of them (configs/cluster/{cluster.name}.yaml); a new kind is a module in jobs/cluster/ listed in "
            "jobs.cluster.kinds.KINDS")


def cluster_kind(cluster: ClusterConfig) -> ClusterKind:
    """The kind ``cluster.executor`` names; an unknown name raises one ConfigError naming the known kinds."""
    kind = KINDS.get(cluster.executor)
    if kind is None:
        raise ConfigError([unknown_kind_line(cluster)], f"cluster {cluster.name!r}")
    return kind
