"""A model's size for the estimate: parameter count and layer count, without loading a checkpoint.

Where the number comes from, in order:

- a hub or local checkpoint whose ``config.json`` is on disk: counted from the config (embeddings, attention
  with its key/value heads, a gated MLP, norms; the output head unless tied) — exact for the LLaMA / Qwen /
  Gemma / LLaDA shapes the study runs; a mixture of experts (DiffusionGemma, Gemma 4: ``num_experts``,
  ``top_k_experts``, ``moe_intermediate_size`` as transformers' ``DiffusionGemmaTextConfig`` names them;
  ``num_local_experts`` / ``num_experts_per_tok`` elsewhere) adds each layer's experts (gated, like the
  MLP) and router, and its active count (the top-k experts instead of all); where the config has no
  expert fields, the YAML's ``experts`` / ``experts_per_token`` / ``active_parameters`` are used, and
  :attr:`ModelSize.moe_source` says which;
- otherwise the model YAML's ``parameters`` / ``layers`` fields (their source, the model card, is cited in
  the YAML); neither field changes a result, so neither enters shard ids or fingerprints;
- the packaged GGUF models (SmolLM2, Gemma-3-270M): the tensors' element counts in the GGUF header;
- tiny and scripted models: built on the CPU (they are small) and counted.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamgen.config import ModelConfig

log = logging.getLogger(__name__)

__all__ = ["ModelSize", "model_parameters", "model_size", "size_from_config"]


@dataclass(frozen=True)
class ModelSize:
    """Parameters (all of them: what a forward reads) and transformer layers; ``source`` says whence."""

    parameters: int
    layers: int
    source: str
    active: int | None = None  # a mixture of experts: parameters one token computes with
    experts: int | None = None
    top_k: int | None = None  # experts per token
    moe_source: str | None = None  # where experts and top_k came from (None: not a mixture of experts)


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    return next((cfg[n] for n in names if cfg.get(n) is not None), default)


def size_from_config(raw: dict[str, Any]) -> ModelSize | None:
    """Parameters of a decoder-only transformer from its ``config.json`` (a nested ``text_config`` is used);
    None when it lacks a shape field this count needs."""
    c = raw.get("text_config") or raw
    needed = (("hidden_size", "d_model"), ("num_hidden_layers", "n_layers"), ("num_attention_heads", "n_heads"),
              ("intermediate_size", "mlp_hidden_size"), ("vocab_size", "embedding_size"))
    if any(_get(c, *names) is None for names in needed):
        return None
    hidden = int(_get(c, "hidden_size", "d_model"))
    layers = int(_get(c, "num_hidden_layers", "n_layers"))
    heads = int(_get(c, "num_attention_heads", "n_heads"))
    kv = int(_get(c, "num_key_value_heads", "n_kv_heads", default=heads))
    head_dim = int(_get(c, "head_dim", default=hidden // heads))
    mlp = int(_get(c, "intermediate_size", "mlp_hidden_size"))
    vocab = int(_get(c, "vocab_size", "embedding_size"))
    tied = bool(_get(raw, "tie_word_embeddings", "weight_tying", default=_get(c, "tie_word_embeddings", default=True)))
    kind = str(c.get("model_type", raw.get("model_type", "")))
    attention = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    if kind == "qwen2" or c.get("attention_bias"):  # q, k, v projections with biases
        attention += (heads + 2 * kv) * head_dim
    if kind.startswith(("qwen3", "gemma3")):  # per-head q / k norms
        attention += 2 * head_dim
    norms = 4 if kind.startswith("gemma3") else 2  # Gemma 3: pre and post norms around attention and MLP
    per_layer = attention + 3 * hidden * mlp + norms * hidden
    total = layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden
    experts, top_k = _get(c, "num_experts", "num_local_experts"), _get(c, "top_k_experts", "num_experts_per_tok")
    if experts is None or top_k is None:
        return ModelSize(total, layers, "config.json")
    experts, top_k = int(experts), int(top_k)
    expert = 3 * hidden * int(_get(c, "moe_intermediate_size", default=0))  # gate, up and down, like the MLP
    # the experts, the router (projection, its scale and per-expert scale) and the block's three norms (Gemma 4)
    total += layers * (experts * expert + hidden * experts + experts + 4 * hidden)
    active = total - layers * (experts - top_k) * expert if expert else None
    return ModelSize(total, layers, "config.json", active, experts, top_k, "config.json")


def _config_json(cfg: ModelConfig) -> Path | None:
    from streamgen.models.hub_cache import find_snapshot, local_folder

    if cfg.source == "local":
        path = local_folder(cfg.path) / "config.json"
        return path if path.is_file() else None
    if cfg.source == "hub":
        snap = find_snapshot(cfg.path, cfg.revision)
        return snap.folder / "config.json" if snap is not None and (snap.folder / "config.json").is_file() else None
    return None


def _size_from_file(cfg: ModelConfig, path: Path) -> ModelSize | None:
    stat = path.stat()
    return _size_of_config(cfg.name, str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _size_of_config(model: str, path: str, _size: int, _mtime_ns: int) -> ModelSize | None:
    """The size counted from a cached config.json, once per file version; None (and one log line) when
    the file is damaged or of another shape: the pre-flight names the file and its fix, and the estimate
    falls back to the YAML's ``parameters``."""
    from streamgen.models.checkpoint_files import CheckpointFileError, read_json

    try:
        return size_from_config(read_json(Path(path), "download the checkpoint again"))
    except CheckpointFileError as exc:
        log.warning("model %s: no size from config.json: %s", model, exc)
    except (ValueError, TypeError, AttributeError, ZeroDivisionError) as exc:  # a field of another type
        log.warning("model %s: no size from %s (%s: %s)", model, path, type(exc).__name__, exc)
    return None


def _gguf_size(path: Path) -> ModelSize:
    stat = path.stat()
    return _gguf_size_of(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _gguf_size_of(path: str, _size: int, _mtime_ns: int) -> ModelSize:
    """Count a GGUF file's tensors, once per file version: gguf's reader parses every metadata field
    (SmolLM2's 49k-token vocabulary takes ~12 s on these CPUs) and a dry run asks three times."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    blocks = {t.name.split(".")[1] for t in reader.tensors if t.name.startswith("blk.")}
    return ModelSize(int(sum(int(t.n_elements) for t in reader.tensors)), len(blocks), f"GGUF header of {Path(path).name}")


def _gguf_path(cfg: ModelConfig) -> Path:
    from streamgen.models import weights

    if cfg.source == "smollm2":
        return weights.smollm2_gguf_path()
    if cfg.source == "gemma3_270m":
        return weights.gemma3_270m_gguf_path()
    return Path(cfg.path) / cfg.gguf_file if cfg.gguf_file else Path(cfg.path)


@functools.lru_cache(maxsize=64)
def _built_size(key: str) -> ModelSize:
    """Build a tiny or scripted model on the CPU and count it (cached per config)."""
    from streamgen.families.registry import FAMILIES

    cfg = ModelConfig(**json.loads(key))
    model = FAMILIES[cfg.family].load(cfg, "cpu").model
    n = sum(p.numel() for p in model.parameters())
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", None) or getattr(getattr(config, "text_config", None),
                                                                   "num_hidden_layers", None)
    if layers is None and (spec := getattr(model, "spec", None)) is not None:
        layers = getattr(spec, "num_hidden_layers", None) or getattr(spec, "n_layers", None)
    return ModelSize(int(n), int(layers or 1), f"built {cfg.source} model")


def model_size(cfg: ModelConfig) -> ModelSize | None:
    """``cfg``'s size, or None when neither its config.json is cached nor its YAML states ``parameters``."""
    path = _config_json(cfg)
    yaml = f"configs/models/{cfg.name}.yaml"
    if path is not None and (size := _size_from_file(cfg, path)) is not None:
        if size.experts is None and cfg.experts is not None:  # the config has no expert fields: the YAML's
            return dataclasses.replace(size, active=cfg.active_parameters, experts=cfg.experts,
                                       top_k=cfg.experts_per_token, moe_source=f"{yaml} (no expert fields in config.json)")
        return size
    if cfg.parameters is not None:
        return ModelSize(int(cfg.parameters), int(cfg.layers or 32), yaml, cfg.active_parameters, cfg.experts,
                         cfg.experts_per_token, yaml if cfg.experts is not None else None)
    if cfg.source in ("smollm2", "gemma3_270m", "gguf"):
        return _gguf_size(_gguf_path(cfg))
    if cfg.source in ("tiny", "scripted"):
        return _built_size(json.dumps(asdict(cfg), sort_keys=True, default=list))
    return None


def model_parameters(cfg: ModelConfig) -> int | None:
    """Parameter count of ``cfg`` (see :func:`model_size` for where it comes from), or None if unknown."""
    size = model_size(cfg)
    return size.parameters if size is not None else None
