"""Numerics: the floating-point spacing of a dtype, top-2 logit margins in those units, and the record
of every numerical setting a run's results depend on (dtype, device, versions, kernels' flags).

A greedy stream answer equals its base answer in exact arithmetic; in bfloat16 a multi-token verify
forward and a one-token decode step can round the same logits differently and pick different argmaxes
at a near tie (docs/numerics.md). Margins are therefore stated in units of the dtype's spacing at the
top-1 logit's magnitude: a margin of 1 is one rounding step, whatever the logit's size.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Any

import torch


def spacing(x: float, dtype: torch.dtype) -> float:
    """The distance from ``|x|`` to the next larger value representable in ``dtype`` (an ulp).

    ``x`` is a value of ``dtype`` (logits read from a forward in that dtype); subnormals share the
    spacing of the smallest normal; non-finite ``x`` gives NaN."""
    if not math.isfinite(x):
        return math.nan
    info = torch.finfo(dtype)
    min_exp = math.frexp(info.smallest_normal)[1] - 1  # floor(log2) of the smallest normal
    # |x| = m * 2**e with 0.5 <= m < 1, so floor(log2 |x|) = e - 1
    floor_log2 = max(math.frexp(abs(x))[1] - 1, min_exp) if x != 0 else min_exp
    return float(info.eps) * 2.0 ** floor_log2


@dataclass(frozen=True)
class Top2:
    """The two best tokens of one logits row and their margin (``margin_spacings``: top-1 minus
    top-2 in units of the logits dtype's spacing at the top-1 logit)."""

    top1: int
    top2: int
    top1_logit: float
    margin: float  # logits
    margin_spacings: float


def top2(row: torch.Tensor, dtype: torch.dtype) -> Top2:
    """Top-2 of one logits row (any float dtype; ``dtype`` is the dtype the forward computed it in)."""
    values, ids = row.float().topk(2)
    first, second = float(values[0]), float(values[1])
    margin = first - second
    return Top2(int(ids[0]), int(ids[1]), first, margin, margin / spacing(first, dtype))


def margins_in_spacings(logits: torch.Tensor, dtype: torch.dtype) -> list[float]:
    """Per row of ``logits`` (rows × vocab), the top-1 minus top-2 margin in ``dtype`` spacings."""
    if logits.shape[0] == 0:
        return []
    values = logits.float().topk(2, dim=-1).values
    return [margin_in_spacings(float(a), float(b), dtype) for a, b in values.tolist()]


def margin_in_spacings(first: float, second: float, dtype: torch.dtype) -> float:
    """A row's top-1 minus top-2 logit (host floats) in ``dtype`` spacings at the top-1 logit."""
    return (first - second) / spacing(first, dtype)


@dataclass(frozen=True)
class NumericsRecord:
    """Every numerical setting one model actor decoded under (``runs.numerics``, ``pairs.numerics``)."""

    dtype: str
    device: str
    torch_version: str
    transformers_version: str
    attn_implementation: str | None
    matmul_precision: str  # torch.get_float32_matmul_precision(): highest | high | medium
    cuda_matmul_tf32: bool
    cudnn_tf32: bool
    num_threads: int
    deterministic_algorithms: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    kv_cache_class: str
    cublas_workspace_config: str | None = None  # CUBLAS_WORKSPACE_CONFIG as the actor ran (set on CUDA)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


def _versions() -> tuple[str, str]:
    import transformers

    return torch.__version__, transformers.__version__


def numerics_record(model: Any, device: str, kv_cache_class: str = "DynamicCache") -> NumericsRecord:
    """The numerics of ``model`` as this process runs it on ``device`` now."""
    param = next(iter(model.parameters()), None)
    dtype = str(param.dtype).removeprefix("torch.") if param is not None else "unknown"
    attn = getattr(getattr(model, "config", None), "_attn_implementation", None)
    torch_v, transformers_v = _versions()
    return NumericsRecord(
        dtype, device, torch_v, transformers_v, attn if isinstance(attn, str) else None,
        torch.get_float32_matmul_precision(), bool(torch.backends.cuda.matmul.allow_tf32),
        bool(torch.backends.cudnn.allow_tf32), torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(), bool(torch.backends.cudnn.deterministic),
        bool(torch.backends.cudnn.benchmark), kv_cache_class, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))


CUBLAS_WORKSPACE = ":4096:8"  # what torch.use_deterministic_algorithms needs of cuBLAS (CUDA ≥ 10.2)


def make_deterministic(device: str, env: dict[str, str] | None = None) -> bool:
    """On CUDA, deterministic algorithms (``torch.use_deterministic_algorithms``, cuDNN's deterministic
    mode, no benchmark autotuning) and ``CUBLAS_WORKSPACE_CONFIG`` (cuBLAS's reproducible workspace;
    set before the first matmul creates its handle): shared work (``streamgen.shared_example``) is exact only if
    a repeated computation gives the same result. Returns whether it set anything (nothing on CPU,
    whose kernels are deterministic at a fixed thread count). Both land on the numerics record."""
    if not str(device).startswith("cuda"):
        return False
    target = os.environ if env is None else env
    target.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    return True

