"""What a Slurm partition really offers (nodes, CPUs, GPUs, GPU types, features), asked of ``sinfo``.

Used to refuse a submission the cluster can never run (e.g. more GPUs per node than any node has)
with a message naming the fix, instead of a job pending forever or sbatch's terse error.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from dataclasses import dataclass

from streamgen.config import ClusterConfig, ConfigError

log = logging.getLogger(__name__)

SINFO_FORMAT = "%N|%c|%G|%f|%P"


class SlurmUnavailableError(ConfigError):
    """No Slurm controller answers (``sinfo`` missing or failing)."""


@dataclass(frozen=True)
class Node:
    """One node of the partition as ``sinfo -N`` reports it."""

    name: str
    cpus: int
    gpus: dict[str, int]  # GPU type ('' when untyped) -> count
    features: frozenset[str]

    def gpu_count(self, gpu_type: str | None = None) -> int:
        if gpu_type is None:
            return sum(self.gpus.values())
        if gpu_type in self.features:  # the type is a node feature: every GPU of the node has it
            return sum(self.gpus.values())
        return self.gpus.get(gpu_type, 0)


@dataclass(frozen=True)
class Inventory:
    partition: str
    nodes: tuple[Node, ...]
    gres_text: str  # as sinfo printed it, for messages

    def gpu_type_mode(self, gpu_type: str | None) -> str:
        """``constraint`` when ``gpu_type`` is a node feature (or unset), else ``gres`` (a GRES type)."""
        if gpu_type and not any(gpu_type in n.features for n in self.nodes):
            return "gres"
        return "constraint"


def parse_gres(text: str) -> dict[str, int]:
    """``gpu:2`` → {'': 2}; ``gpu:a100:4(S:0-1),gpu:v100:2`` → {'a100': 4, 'v100': 2}; other GRES ignored."""
    out: dict[str, int] = {}
    for item in re.sub(r"\([^)]*\)", "", text).split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
            continue
        gtype = parts[1] if len(parts) == 3 else ""
        out[gtype] = out.get(gtype, 0) + int(parts[-1])
    return out


def parse_sinfo(text: str, partition: str | None) -> Inventory:
    """Parse ``sinfo -h -N -o '%N|%c|%G|%f|%P'``; ``partition=None`` means the default one (``*``)."""
    nodes: dict[str, Node] = {}
    chosen = partition
    gres: set[str] = set()
    for line in text.strip().splitlines():
        name, cpus, gres_text, features, part = line.split("|")
        is_default = part.endswith("*")
        part = part.rstrip("*")
        if chosen is None and is_default:
            chosen = part
        if part != chosen:
            continue
        gres.add(gres_text)
        feats = frozenset(f for f in features.split(",") if f and f != "(null)")
        nodes[name] = Node(name, int(cpus), parse_gres(gres_text), feats)
    return Inventory(chosen or "", tuple(nodes.values()), ",".join(sorted(gres)))


def query(partition: str | None) -> Inventory:
    """Ask the controller; raises :class:`SlurmUnavailableError` naming how to get one."""
    if shutil.which("sinfo") is None:
        raise SlurmUnavailableError(["sinfo is not installed: run on a Slurm login node, or start the "
                                     "local test cluster (sudo bash .ci/slurm.sh install && sudo bash "
                                     ".ci/slurm.sh start), or use cluster=local"], "no Slurm here")
    out = subprocess.run(["sinfo", "-h", "-N", "-o", SINFO_FORMAT], capture_output=True, text=True,
                         timeout=30, check=False)
    if out.returncode != 0:
        raise SlurmUnavailableError([f"sinfo failed ({out.stderr.strip() or out.returncode}): is slurmctld "
                                     "running? (local test cluster: sudo bash .ci/slurm.sh start)"],
                                    "no Slurm controller answers")
    return parse_sinfo(out.stdout, partition)


def check(cluster: ClusterConfig, inv: Inventory) -> list[str]:
    """Every reason ``cluster``'s request can never be scheduled on ``inv``, each naming the fix."""
    where = f"partition {inv.partition!r}" if inv.partition else "the default partition"
    fix = f"(configs/cluster/{cluster.name}.yaml or a command-line override)"
    if not inv.nodes:
        return [f"{where} has no nodes (or does not exist): set partition= to one `sinfo -s` lists {fix}"]
    p: list[str] = []
    if cluster.gpu_type and not any(n.gpu_count(cluster.gpu_type) for n in inv.nodes):
        kinds = sorted({t for n in inv.nodes for t in n.gpus if t} | {f for n in inv.nodes for f in n.features})
        return [f"gpu_type={cluster.gpu_type!r} matches no node feature or GPU type in {where} "
                f"(available: {', '.join(kinds) or 'none'}): set gpu_type to one of them or null {fix}"]
    most = max(n.gpu_count(cluster.gpu_type) for n in inv.nodes)
    if cluster.gpus_per_node > most:
        p.append(f"gpus_per_node={cluster.gpus_per_node} but the largest node in {where} has {most} "
                 f"GPU(s){' of type ' + cluster.gpu_type if cluster.gpu_type else ''} (sinfo Gres: "
                 f"{inv.gres_text}): set gpus_per_node={most} or fewer {fix}, or pick a partition "
                 f"with larger nodes")
    fit = [n for n in inv.nodes if n.gpu_count(cluster.gpu_type) >= cluster.gpus_per_node
           and n.cpus >= cluster.cpus_per_task]
    if cluster.cpus_per_task > max(n.cpus for n in inv.nodes):
        p.append(f"cpus_per_task={cluster.cpus_per_task} but the largest node in {where} has "
                 f"{max(n.cpus for n in inv.nodes)} CPUs: lower cpus_per_task {fix}")
    elif cluster.nodes > len(fit) and not p:
        p.append(f"nodes={cluster.nodes} but only {len(fit)} node(s) in {where} have {cluster.gpus_per_node} "
                 f"GPU(s) and {cluster.cpus_per_task} CPUs: set nodes={len(fit)} or fewer"
                 f"{_fewer_gpus_hint(cluster, inv)} {fix}")
    return p


def _fewer_gpus_hint(cluster: ClusterConfig, inv: Inventory) -> str:
    """', or gpus_per_node=K' when K < gpus_per_node GPUs per node would give the nodes asked for."""
    counts = sorted((n.gpu_count(cluster.gpu_type) for n in inv.nodes if n.cpus >= cluster.cpus_per_task),
                    reverse=True)
    if len(counts) < cluster.nodes or counts[cluster.nodes - 1] == 0:
        return ""
    return f", or gpus_per_node={counts[cluster.nodes - 1]} to get {cluster.nodes} nodes"

