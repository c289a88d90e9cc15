"""This machine's figures for the estimate's roofline: matmul FLOP/s (fp32, bf16), memory bandwidth and the
fixed cost of one layer of an eager transformers forward, measured with torch on ONE thread (a model actor's).

    python bench/bench_machine.py                         # prints the figures
    python bench/bench_machine.py --out results/machine.json
    python workflows/full_grid.py grid=smoke --dry-run device_file=results/machine.json   # (see below)

The JSON is a device entry (``streamgen.sizing.devices.Device``, name ``cpu``): ``--dry-run`` and
``bench/bench_estimate.py`` read it through ``STREAMGEN_DEVICE_FILE=results/machine.json`` instead of the
table's ``cpu`` row (which holds this project's machine, measured with this script: docs/estimate.md).

- Peak FLOP/s: the best of several square matmuls (n = 512, 1024) in each dtype, 2·n³ per product.
- Compute efficiency: the MEDIAN rate of a model-shaped fp32 matmul (256 tokens × 576 → 1536, a SmolLM2
  MLP projection) over the peak: what a forward's matmuls reach on this machine as it runs (shared,
  loaded), not what an idle core can.
- Bandwidth: the best of several copies of a 256 MiB tensor (bytes read + written per copy); its
  efficiency: the median copy over the best.
- Layer overhead: the median one-token forward of the tiny llama (2 layers, hidden 64: its arithmetic is
  nothing), divided by its layer count: the launch / Python cost every layer of every forward pays.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamgen.sizing.devices import DEVICES, Device  # noqa: E402


def timings(fn: Callable[[], object], repeat: int = 7) -> list[float]:
    """``repeat`` timed calls after one warm-up, sorted."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)


def best_of(fn: Callable[[], object], repeat: int = 7) -> float:
    """The fastest call: the machine's capability, not its noise."""
    return timings(fn, repeat)[0]


def median_of(fn: Callable[[], object], repeat: int = 7) -> float:
    """The median call: the machine as it runs (other processes included)."""
    t = timings(fn, repeat)
    return t[len(t) // 2]


def matmul_flops(dtype: torch.dtype, n: int = 1024) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    return 2 * n**3 / best_of(lambda: a @ b)


def model_matmul_flops(tokens: int = 256, d_in: int = 576, d_out: int = 1536) -> float:
    x, w = torch.randn(tokens, d_in), torch.randn(d_in, d_out)
    return 2 * tokens * d_in * d_out / median_of(lambda: x @ w, repeat=21)


def copy_bandwidth(mib: int = 256) -> tuple[float, float]:
    """(best, median) bytes/s of a large copy."""
    src = torch.empty(mib * 2**20 // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    t = timings(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / t[0], 2 * src.numel() * 4 / t[len(t) // 2]


def layer_overhead_s() -> float:
    """Seconds per layer of a one-token eager forward of the tiny llama (no arithmetic to speak of)."""
    from streamgen.models.weights import tiny_model

    model = tiny_model("llama", 0, vocab_size=513).eval()
    ids = torch.tensor([[1]])
    with torch.inference_mode():
        per_forward = median_of(lambda: model(input_ids=ids), repeat=51)
    return per_forward / int(model.config.num_hidden_layers)


def measure() -> Device:
    torch.set_num_threads(1)
    fp32 = max(matmul_flops(torch.float32, n) for n in (512, 1024))
    best_bw, median_bw = copy_bandwidth()
    return Device("cpu", bf16_flops=max(matmul_flops(torch.bfloat16, n) for n in (512, 1024)), fp32_flops=fp32,
                  bandwidth=best_bw, memory_gb=DEVICES["cpu"].memory_gb,
                  eff_compute=min(1.0, model_matmul_flops() / fp32), eff_bandwidth=median_bw / best_bw,
                  layer_overhead_s=layer_overhead_s(),
                  source=f"bench/bench_machine.py on {torch.__version__}, 1 thread, {time.strftime('%Y-%m-%d')}")


def main(argv: list[str]) -> int:
    dev = measure()
    table = DEVICES["cpu"]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'figure':<24} {'measured':>12} {'table (cpu)':>12}")
    for name, scale, unit in (("fp32_flops", 1e9, "GFLOP/s"), ("bf16_flops", 1e9, "GFLOP/s"),
                              ("eff_compute", 1, "share"), ("bandwidth", 1e9, "GB/s"), ("eff_bandwidth", 1, "share"),
                              ("layer_overhead_s", 1e-6, "µs")):
        print(f"{name + ' (' + unit + ')':<24} {getattr(dev, name) / scale:>12.2f} {getattr(table, name) / scale:>12.2f}")
    if "--out" in argv:
        out = Path(argv[argv.index("--out") + 1])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(dev.as_dict(), indent=2) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
