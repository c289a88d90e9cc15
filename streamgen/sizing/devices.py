"""The device table of the GPU-hour estimate and its roofline: seconds of one forward on one device.

One forward of an N-parameter model feeding T tokens costs ``2·N·T`` FLOPs and reads its weights once
(``N × bytes per parameter``; the KV cache and activations are left out: under 1 GB for the study's
requests against 14–24 GB of bf16 weights). Its time is the slower of the two at the device's
*effective* rates, plus a fixed cost per layer (kernel launches and Python in transformers' eager code,
which batch-1 decoding pays at every layer of every forward)::

    seconds = max(2·N·T / (peak · eff_compute), bytes_read / (bandwidth · eff_bandwidth)) + layers · layer_overhead_s

A prefill or a diffusion step (T in the hundreds) is compute-bound; a one-token decode is bandwidth-bound.

Peaks are the vendors' dense (no 2:4 sparsity) tensor figures; docs/estimate.md cites each source:
A100-80GB SXM 312 TFLOP/s bf16, 2,039 GB/s, 80 GB (NVIDIA A100 datasheet); RTX A6000 154.8 TFLOP/s
bf16 dense (309.7 sparse), 768 GB/s, 48 GB (NVIDIA RTX A6000 datasheet); H100 SXM 989 TFLOP/s, 3.35 TB/s,
80 GB; H200 989 TFLOP/s, 4.8 TB/s, 141 GB (NVIDIA H100 / H200 datasheets). ``cpu`` is this project's
2-core machine measured on one thread by ``bench/bench_machine.py`` (a JSON it writes replaces the row).
Efficiencies are assumptions, stated here and printed with every estimate: 50 % of peak compute and 70 %
of peak bandwidth on the GPUs (large bf16 prefills reach 40–70 %, batch-1 decode 60–80 % of bandwidth);
0.1 ms per layer per forward (≈ 10 eager kernels of ~10 µs each). On the CPU all of them are measured:
a model-shaped matmul's median rate over the peak (42 %), the median copy over the best (93 %), the
median per-layer cost of a tiny forward (1.16 ms), on the machine as it runs (load average ~6 on 2 cores).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamgen.config import ConfigError

__all__ = ["DEVICES", "Device", "device_from_file", "forward_seconds"]


@dataclass(frozen=True)
class Device:
    """Peak rates of one accelerator (or this CPU) and the share of them the estimate assumes."""

    name: str
    bf16_flops: float  # dense FLOP/s in bfloat16 (tensor cores on a GPU)
    fp32_flops: float  # FLOP/s in float32 (TF32 tensor cores on a GPU: what torch uses for fp32 matmuls there)
    bandwidth: float  # bytes/s of device memory
    memory_gb: float
    eff_compute: float  # assumed share of peak FLOP/s a forward reaches
    eff_bandwidth: float  # assumed share of peak bandwidth a forward reaches
    layer_overhead_s: float  # fixed seconds per layer per forward (launches, Python)
    source: str = ""

    def flops(self, dtype: str) -> float:
        """Peak FLOP/s for a model stored in ``dtype`` (float16 runs at the bf16 rate)."""
        return self.fp32_flops if dtype == "float32" else self.bf16_flops

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_GPU_EFF = {"eff_compute": 0.5, "eff_bandwidth": 0.7, "layer_overhead_s": 1e-4}
DEVICES: dict[str, Device] = {
    "a100-80gb": Device("a100-80gb", 312e12, 156e12, 2.039e12, 80, **_GPU_EFF,
                        source="NVIDIA A100 datasheet (SXM4 80GB): BF16 312 TFLOPS dense, TF32 156, HBM2e 2,039 GB/s"),
    "a6000": Device("a6000", 154.8e12, 77.4e12, 768e9, 48, **_GPU_EFF,
                    source="NVIDIA RTX A6000 datasheet: BF16 tensor 154.8 TFLOPS dense (309.7 sparse), GDDR6 768 GB/s"),
    "h100": Device("h100", 989e12, 494e12, 3.35e12, 80, **_GPU_EFF,
                   source="NVIDIA H100 datasheet (SXM5): BF16 989 TFLOPS dense (1,979 sparse), HBM3 3.35 TB/s"),
    "h200": Device("h200", 989e12, 494e12, 4.8e12, 141, **_GPU_EFF,
                   source="NVIDIA H200 datasheet (SXM): BF16 989 TFLOPS dense (1,979 sparse), HBM3e 4.8 TB/s, 141 GB"),
    # this project's 2-core machine, one thread (a model actor's): bench/bench_machine.py, 2026-12-04
    "cpu": Device("cpu", 1.25e9, 91.9e9, 16.8e9, 16, 0.42, 0.93, 1.16e-3,
                  source="bench/bench_machine.py on this project's 2-core machine, 1 thread"),
}
"""Keys are the values a cluster config's ``device:`` accepts (``streamgen.config.DEVICE_NAMES``)."""


def device_from_file(path: str | Path) -> Device:
    """A device entry from the JSON ``bench/bench_machine.py --out`` writes; ConfigError naming the fix."""
    p = Path(path)
    try:
        return Device(**json.loads(p.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError([f"device file {p}: {type(exc).__name__}: {exc}; write it with "
                           f"python bench/bench_machine.py --out {p}"]) from exc


def forward_seconds(device: Device, *, params: float, tokens: int, layers: int, dtype: str = "bfloat16") -> float:
    """The roofline time of ONE forward of a ``params``-parameter model feeding ``tokens`` tokens."""
    bytes_per_param = 4 if dtype == "float32" else 2
    compute = 2.0 * params * tokens / (device.flops(dtype) * device.eff_compute)
    memory = params * bytes_per_param / (device.bandwidth * device.eff_bandwidth)
    return max(compute, memory) + layers * device.layer_overhead_s
