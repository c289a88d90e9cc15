"""What the actors' determinism settings cost per forward: with and without them, side by side.

    python bench/bench_determinism.py                        # on a CUDA machine: SmolLM2 in bfloat16 and float32
    python bench/bench_determinism.py device=cpu models=[tiny-llama] repeats=5   # the same code on CPU (a dry run)

On CUDA the model actors run ``streamgen.decoding.numerics.make_deterministic``: ``CUBLAS_WORKSPACE_CONFIG``
(set before cuBLAS creates its handle, so before the first matmul), ``torch.use_deterministic_algorithms(True)``,
cuDNN deterministic and no benchmark autotuning. The two settings can only be compared in two processes (the
workspace setting is read once), so this script runs itself twice, ``mode=plain`` and ``mode=deterministic``,
each loading the model and timing ``repeats`` forwards at each width of ``widths`` after ``warmup`` untimed
ones (device-synchronised; median), and prints deterministic / plain per (model, dtype, width).
On CPU the settings change nothing (``make_deterministic`` sets nothing there; CPU kernels are deterministic at
a fixed thread count): ratios near 1 are the script's noise floor. Not measured here (no GPU in this project's
machines): docs/estimate.md states what PyTorch documents.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamgen.config import load  # noqa: E402


@dataclass(frozen=True)
class DetConfig:
    device: str = "cuda"
    models: list[str] | None = None  # default: smollm2
    dtypes: list[str] | None = None  # default: bfloat16 and float32
    widths: list[int] | None = None  # tokens per forward; default 1, 64, 512
    repeats: int = 20
    warmup: int = 3
    mode: str = ""  # internal: plain | deterministic (one child process each)


def time_forwards(cfg: DetConfig, model_name: str, dtype: str) -> dict[int, float]:
    """Median seconds of one forward per width, in this process's mode."""
    import dataclasses

    import torch

    from streamgen.config import model_config
    from streamgen.decoding.meter import device_synchronizer
    from streamgen.decoding.numerics import make_deterministic
    from streamgen.families.registry import model_family

    torch.set_num_threads(1)  # a model actor's threads
    if cfg.mode == "deterministic":
        make_deterministic(cfg.device)
    mcfg = dataclasses.replace(model_config(model_name), dtype=dtype)
    model = model_family(mcfg.family).load(mcfg, cfg.device).model
    sync = device_synchronizer(cfg.device)
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", None) or 1000)
    out = {}
    for width in cfg.widths or [1, 64, 512]:
        ids = torch.randint(0, min(vocab, 1000), (1, width), device=cfg.device)
        times = []
        with torch.no_grad():
            for i in range(cfg.warmup + cfg.repeats):
                sync()
                start = time.perf_counter()
                model(input_ids=ids)
                sync()
                if i >= cfg.warmup:
                    times.append(time.perf_counter() - start)
        out[width] = statistics.median(times)
    return out


def child(cfg: DetConfig) -> int:
    result = {f"{m}|{d}": time_forwards(cfg, m, d) for m in cfg.models or ["smollm2"]
              for d in cfg.dtypes or ["bfloat16", "float32"]}
    print("RESULT " + json.dumps(result))
    return 0


def main(argv: list[str]) -> int:
    cfg = load(DetConfig, overrides=argv)
    if cfg.mode:
        return child(cfg)
    if cfg.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device: run on a GPU machine, or device=cpu for the dry run", file=sys.stderr)
            return 2
    runs = {}
    for mode in ("plain", "deterministic"):
        env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
        proc = subprocess.run([sys.executable, __file__, *argv, f"mode={mode}"], env=env, capture_output=True,
                              text=True, check=False)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if proc.returncode or line is None:
            print(f"{mode} run failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return 1
        runs[mode] = json.loads(line[len("RESULT "):])
    print(f"device {cfg.device}: median seconds per forward, plain vs deterministic (make_deterministic)")
    print(f"{'model|dtype':<28} {'width':>6} {'plain ms':>10} {'determ. ms':>11} {'ratio':>7}")
    for key, plain in runs["plain"].items():
        for width, p in plain.items():
            d = runs["deterministic"][key][width]
            print(f"{key:<28} {width:>6} {p * 1e3:>10.3f} {d * 1e3:>11.3f} {d / p:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
