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
80 GB; H200 989 TFLOP/s, 4.8 TB/s, 141 GB (NVIDIA H100 / H200 datasheets).
float32 is priced at the plain FP32 rate (A100 19.5, A6000 38.7, H100 / H200 SXM 67 TFLOP/s: the same
datasheets' non-tensor FP32 row): torch runs float32 matmuls in true FP32 unless TF32 is enabled
(``torch.backends.cuda.matmul.allow_tf32`` / ``torch.set_float32_matmul_precision("high")``), and nothing
in this project enables it (``TF32_ENABLED``, tested). The TF32 tensor rate (``tf32_flops``) is used only
when ``forward_seconds(..., tf32=True)``.

Mixture-of-experts models (DiffusionGemma-26B-A4B) compute with their active parameters but read the
weights of every expert some token of the forward routes to: with E experts, top-k routing and T tokens,
the expected share of experts touched is ``1 − (1 − k/E)^T`` (each token picks k of E; taken as
independent and uniform), at most 1 — a 256-token canvas touches all of them (``experts_touched``). ``cpu`` is this project's
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

__all__ = ["DEVICES", "TF32_ENABLED", "Device", "device_from_file", "experts_touched", "forward_seconds"]

TF32_ENABLED = False
"""Whether the project's runs enable TF32 for float32 matmuls: no (tests/streamgen/sizing/test_estimate_calibration.py checks
that no module sets ``allow_tf32`` or ``set_float32_matmul_precision``). The estimate prices float32 at TF32
only if this is True."""


@dataclass(frozen=True)
class Device:
    """Peak rates of one accelerator (or this CPU) and the share of them the estimate assumes."""

    name: str
    bf16_flops: float  # dense FLOP/s in bfloat16 (tensor cores on a GPU)
    fp32_flops: float  # FLOP/s in plain float32 (a GPU's non-tensor FP32 rate: torch's default for fp32 matmuls)
    bandwidth: float  # bytes/s of device memory
    memory_gb: float
    eff_compute: float  # assumed share of peak FLOP/s a forward reaches
    eff_bandwidth: float  # assumed share of peak bandwidth a forward reaches
    layer_overhead_s: float  # fixed seconds per layer per forward (launches, Python)
    source: str = ""
    tf32_flops: float | None = None  # dense TF32 tensor-core FLOP/s (None: no TF32; the fp32 rate)

    def flops(self, dtype: str, tf32: bool = False) -> float:
        """Peak FLOP/s for a model stored in ``dtype`` (float16 runs at the bf16 rate; float32 at FP32,
        or at TF32 when the run enables it and the device has it)."""
        if dtype == "float32":
            return self.tf32_flops if tf32 and self.tf32_flops else self.fp32_flops
        return self.bf16_flops

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_GPU_EFF = {"eff_compute": 0.5, "eff_bandwidth": 0.7, "layer_overhead_s": 1e-4}
DEVICES: dict[str, Device] = {
    "a100-80gb": Device("a100-80gb", 312e12, 19.5e12, 2.039e12, 80, **_GPU_EFF, tf32_flops=156e12,
                        source="NVIDIA A100 datasheet (SXM4 80GB): BF16 312 TFLOPS dense, FP32 19.5, TF32 156, "
                               "HBM2e 2,039 GB/s"),
    "a6000": Device("a6000", 154.8e12, 38.7e12, 768e9, 48, **_GPU_EFF, tf32_flops=77.4e12,
                    source="NVIDIA RTX A6000 datasheet: BF16 tensor 154.8 TFLOPS dense (309.7 sparse), FP32 38.7, "
                           "TF32 77.4 dense, GDDR6 768 GB/s"),
    "h100": Device("h100", 989e12, 67e12, 3.35e12, 80, **_GPU_EFF, tf32_flops=494e12,
                   source="NVIDIA H100 datasheet (SXM5): BF16 989 TFLOPS dense (1,979 sparse), FP32 67, TF32 494 dense, "
                          "HBM3 3.35 TB/s"),
    "h200": Device("h200", 989e12, 67e12, 4.8e12, 141, **_GPU_EFF, tf32_flops=494e12,
                   source="NVIDIA H200 datasheet (SXM): BF16 989 TFLOPS dense (1,979 sparse), FP32 67, TF32 494 dense, "
                          "HBM3e 4.8 TB/s, 141 GB"),
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


def experts_touched(tokens: int, experts: int, top_k: int) -> float:
    """Expected share of E experts that T tokens with top-k routing touch: 1 − (1 − k/E)^T, at most 1."""
    if tokens <= 0:
        return 0.0
    return min(1.0, 1.0 - (1.0 - min(top_k, experts) / experts) ** tokens)


def weights_read(params: float, tokens: int, *, active: float | None = None, experts: int | None = None,
                 top_k: int | None = None) -> float:
    """Parameters ONE forward of ``tokens`` tokens reads: all of a dense model; of a mixture of experts its
    shared part and the touched share of its expert part. With N parameters in all, A active per token and
    k of E experts per token: expert part X = (N − A) / (1 − k/E), shared part N − X."""
    if active is None or not experts or not top_k or active >= params:
        return params
    per_token = min(top_k, experts) / experts
    expert_part = min(params, (params - active) / (1.0 - per_token)) if per_token < 1 else params
    return params - expert_part + expert_part * experts_touched(tokens, experts, top_k)


def forward_seconds(device: Device, *, params: float, tokens: int, layers: int, dtype: str = "bfloat16",
                    active: float | None = None, experts: int | None = None, top_k: int | None = None,
                    tf32: bool = TF32_ENABLED) -> float:
    """The roofline time of ONE forward of a ``params``-parameter model feeding ``tokens`` tokens. A mixture
    of experts (``active`` parameters per token, ``top_k`` of ``experts``) computes with ``active`` and reads
    :func:`weights_read`."""
    bytes_per_param = 4 if dtype == "float32" else 2
    compute = 2.0 * (active or params) * tokens / (device.flops(dtype, tf32) * device.eff_compute)
    memory = weights_read(params, tokens, active=active, experts=experts, top_k=top_k) * bytes_per_param \
        / (device.bandwidth * device.eff_bandwidth)
    return max(compute, memory) + layers * device.layer_overhead_s
