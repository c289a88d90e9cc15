"""Where the grid's driver runs: the cluster config (``configs/cluster/<name>.yaml``).
Its ``executor`` names a cluster kind: the kinds and their one list of names are in ``jobs/cluster/kinds.py``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClusterConfig:
    """Where the grid's driver runs (``configs/cluster/<name>.yaml``)."""

    name: str = "local"
    executor: str = "local"  # local | debug | slurm | ray
    # executor: ray only: the running Ray cluster to attach to (auto, ray://HOST:10001 or HOST:PORT); null: $RAY_ADDRESS.
    # Where the work ran, not what it computed: no shard id, fingerprint or result row reads it.
    address: str | None = None
    partition: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_type: str | None = None  # Slurm constraint, e.g. a100 or a6000
    # A rehearsal on fake GPUs (the test cluster of .ci/slurm.sh): a model actor that holds a GPU but finds
    # no CUDA runs its model on CPU, logged and recorded in the runs row; false: it refuses (jobs/run/actors.py)
    rehearsal: bool = False
    cpus_per_task: int = 2
    mem_gb: int = 16
    timeout_min: int = 60
    account: str | None = None
    qos: str | None = None
    max_requeues: int = 3
    log_dir: str = "results/slurm_logs"
    setup: list[str] = field(default_factory=list)  # shell lines run before the job (module load ...)
    # The accelerator of each GPU, for the GPU-hour estimate and automatic shard sizes (streamgen/sizing/devices.py):
    # one of DEVICE_NAMES; null: `cpu` (this machine's measured row)
    device: str | None = None
