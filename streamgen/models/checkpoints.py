"""A checkpoint's facts read without its tensors: where its snapshot is, and whether it fits the model.

For one hub id or local folder, without the network and without reading tensor data:

- :func:`find_snapshot`: the snapshot folder and commit the configured revision (None: ``main``)
  points to in the local Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``; layout ``models--org--name/refs/<rev>`` + ``snapshots/<commit>/``);
- :func:`checkpoint_problems`: ``config.json`` builds the project's model on the meta device; the
  weight names of the safetensors index (or the single files' headers) map one to one onto its
  parameters with equal shapes (bidirectional: :func:`~streamgen.decoding.bidir_models.map_parameter_name`;
  transformers models: the renaming transformers applies on load); every shard the index names
  exists; the tokenizer's EOS and mask ids agree with the config and the model YAML.

Each problem is one line naming the model, the cause and the fix (``jobs/preflight.py`` collects them
for a grid). A multimodal Gemma-3 checkpoint is checked as its text model: ``vision_tower.*`` and
``multi_modal_projector.*`` are expected extras (the study loads the text model only).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.config import ModelConfig

# Gated on the hub (licence to accept, token to set): the model cards of meta-llama/* ("You need to
# agree to share your contact information to access this model") and google/gemma-* ("Acknowledge
# license"); see docs/cluster.md.
GATED_PREFIXES = ("meta-llama/", "google/gemma-")
MULTIMODAL_EXTRAS = ("vision_tower.", "multi_modal_projector.")
# the text weights of a Gemma3ForConditionalGeneration checkpoint (as published; as transformers 5 names them)
_TEXT_PREFIXES = (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."),
                  ("model.language_model.", "model."))
_SHOWN = 3  # names shown per problem line


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint folder on disk; ``commit`` is the hub snapshot's hash (None for a local folder)."""

    folder: Path
    commit: str | None


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache this process would read (read from the environment on each call)."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache)
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface"
    return Path(home) / "hub"


def is_gated(repo_id: str) -> bool:
    return repo_id.startswith(GATED_PREFIXES)


def download_command(repo_id: str, revision: str | None) -> str:
    """The command that puts ``repo_id`` into the cache (``hf`` is huggingface_hub's CLI)."""
    return f"hf download {repo_id}" + (f" --revision {revision}" if revision else "")


def find_snapshot(repo_id: str, revision: str | None) -> Snapshot | None:
    """The cached snapshot of ``repo_id`` at ``revision`` (a branch, tag or commit; None: main), or None."""
    repo = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}"
    rev = revision or "main"
    ref = repo / "refs" / rev
    commit = ref.read_text().strip() if ref.is_file() else rev if re.fullmatch(r"[0-9a-f]{40}", rev) else None
    if commit is None or not (repo / "snapshots" / commit / "config.json").is_file():
        return None
    return Snapshot(repo / "snapshots" / commit, commit)


def missing_snapshot_line(cfg: ModelConfig) -> str:
    """The one problem line of a hub checkpoint absent from the cache: where it looked, how to get it."""
    line = (f"model {cfg.name}: {cfg.path} (revision {cfg.revision or 'main'}) is not in the Hugging Face cache "
            f"{hub_cache_dir()}; download it where the network is reachable: {download_command(cfg.path, cfg.revision)}")
    if is_gated(cfg.path):
        line += (f" (gated: accept its licence at https://huggingface.co/{cfg.path} and log in first: "
                 "hf auth login, or set HF_TOKEN)")
    return line + "; then point HF_HOME or HF_HUB_CACHE at that cache, or set path: to a local folder with source: local"


# --------------------------------------------------------------------------------------------
# What the checkpoint holds: names and shapes from the index and the safetensors headers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredWeights:
    """Weight name → shape (None when its shard is missing), and the shard files that are missing."""

    shapes: Mapping[str, tuple[int, ...] | None]
    missing_files: tuple[str, ...]


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a ``.safetensors`` file (8-byte little-endian length, then JSON); no tensor data."""
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def stored_weights(folder: Path) -> StoredWeights:
    """The names and shapes a checkpoint folder holds: through ``model.safetensors.index.json`` when
    there is one (every shard it names must exist), else every ``*.safetensors`` file's header."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = {}, sorted(p.name for p in folder.glob("*.safetensors"))
    missing = tuple(f for f in files if not (folder / f).is_file())
    shapes: dict[str, tuple[int, ...] | None] = dict.fromkeys(weight_map)
    for name in files:
        if name not in missing:
            shapes.update({k: tuple(v["shape"]) for k, v in safetensors_header(folder / name).items()})
    return StoredWeights(shapes, missing)


# --------------------------------------------------------------------------------------------
# What the model expects: parameter names and shapes built on the meta device
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedWeights:
    """The model's parameter shapes, how a checkpoint name maps onto them, and the names allowed to lack
    a tensor (a tied ``lm_head.weight``) or to be left over (a multimodal checkpoint's vision tower)."""

    shapes: Mapping[str, tuple[int, ...]]
    rename: Any  # checkpoint name → model name (raises ValueError for an unmappable name)
    optional: frozenset[str] = frozenset()
    extra_prefixes: tuple[str, ...] = ()


def _shapes(model: Any) -> dict[str, tuple[int, ...]]:
    return {n: tuple(p.shape) for n, p in model.named_parameters(remove_duplicate=False)}


def bidir_expected(style: str, raw: dict[str, Any]) -> ExpectedWeights:
    """The in-project BidirLM of a LLaDA / Dream ``config.json``, on the meta device."""
    import torch

    from streamgen.decoding.bidir_models import BidirLM, map_parameter_name, spec_from_config

    spec = spec_from_config(style, raw)  # type: ignore[arg-type]
    with torch.device("meta"):
        model = BidirLM(spec)
    return ExpectedWeights(_shapes(model), lambda name: map_parameter_name(spec.arch, name))


def causal_lm_expected(folder: Path, trust_remote_code: bool) -> ExpectedWeights:
    """The transformers causal LM of ``folder/config.json`` on the meta device (a multimodal config: its
    text model), with the key renaming transformers applies on load."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    multimodal = config.get_text_config() is not config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config.get_text_config(), trust_remote_code=trust_remote_code)
    shapes = _shapes(model)
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    return ExpectedWeights(shapes, _transformers_rename(model, shapes, multimodal),
                           frozenset({"lm_head.weight"}) if tied else frozenset(),
                           MULTIMODAL_EXTRAS if multimodal else ())


def _transformers_rename(model: Any, shapes: Mapping[str, Any], multimodal: bool) -> Any:
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, rename_source_key

    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if not isinstance(t, WeightConverter)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]

    def rename(name: str) -> str:
        if multimodal:  # the conditional-generation checkpoint's text weights → the text model's names
            name = next((new + name[len(old):] for old, new in _TEXT_PREFIXES if name.startswith(old)), name)
        return rename_source_key(name, renamings, converters, model.base_model_prefix, shapes)[0]  # type: ignore[arg-type]

    return rename


# --------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------


def _few(names: Iterable[str]) -> str:
    names = sorted(names)
    return ", ".join(names[:_SHOWN]) + (f" (+{len(names) - _SHOWN} more)" if len(names) > _SHOWN else "")


def weight_problems(model: str, stored: StoredWeights, expected: ExpectedWeights) -> list[str]:
    """Names missing, left over or of another shape; shard files the index names that are absent."""
    p: list[str] = []
    if stored.missing_files:
        p.append(f"model {model}: the safetensors index names shard files that are not there: "
                 f"{_few(stored.missing_files)}; download the snapshot again (an interrupted download)")
    mapped: dict[str, str] = {}
    unmappable: list[str] = []
    for name in stored.shapes:
        if name.startswith(expected.extra_prefixes):
            continue
        try:
            mapped[name] = expected.rename(name)
        except ValueError:
            unmappable.append(name)
    targets = set(mapped.values())
    missing = set(expected.shapes) - targets - expected.optional
    left = [n for n, t in mapped.items() if t not in expected.shapes] + unmappable
    wrong = [f"{n} {stored.shapes[n]} vs {expected.shapes[t]}" for n, t in mapped.items()
             if t in expected.shapes and stored.shapes[n] is not None and stored.shapes[n] != expected.shapes[t]]
    twice = [t for t, n in Counter(mapped.values()).items() if n > 1]
    fix = "check that config.json and the weights belong to the same checkpoint (or set trust_remote_code: true)"
    if twice:
        p.append(f"model {model}: {len(twice)} parameters get more than one checkpoint weight: {_few(twice)}; {fix}")
    if missing:
        p.append(f"model {model}: {len(missing)} parameters have no weight in the checkpoint: {_few(missing)}; {fix}")
    if left:
        p.append(f"model {model}: {len(left)} checkpoint weights map onto no parameter: {_few(left)}; {fix}")
    if wrong:
        p.append(f"model {model}: {len(wrong)} weights have another shape (checkpoint vs model): {_few(wrong)}; {fix}")
    return p


@dataclass(frozen=True)
class TokenizerFacts:
    """What a checkpoint's tokenizer files say about special tokens: id → text, and the EOS text."""

    added: Mapping[int, str]
    eos_token: str | None

    @property
    def eos_id(self) -> int | None:
        return next((i for i, text in self.added.items() if text == self.eos_token), None)


def tokenizer_facts(folder: Path) -> TokenizerFacts | None:
    """The added tokens of ``tokenizer_config.json`` and ``tokenizer.json`` (None: neither file)."""
    meta_path, fast_path = folder / "tokenizer_config.json", folder / "tokenizer.json"
    if not meta_path.is_file() and not fast_path.is_file():
        return None
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    added = {int(i): t["content"] for i, t in meta.get("added_tokens_decoder", {}).items()}
    if fast_path.is_file():
        added.update({int(t["id"]): t["content"] for t in json.loads(fast_path.read_text()).get("added_tokens", [])})
    eos = meta.get("eos_token")
    return TokenizerFacts(added, eos.get("content") if isinstance(eos, dict) else eos)


def _ids(value: Any) -> set[int]:
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, (list, tuple)) else {int(value)}


def token_problems(cfg: ModelConfig, raw: dict[str, Any], tok: TokenizerFacts | None) -> list[str]:
    """The tokenizer's EOS against ``config.json`` / the YAML's ``eos_token_ids``; the YAML's
    ``mask_token_id`` against ``config.json`` and the token the tokenizer has at that id."""
    text = raw.get("text_config") or raw
    decoding = dict(cfg.decoding)
    yaml_file = f"configs/models/{cfg.name}.yaml"
    p: list[str] = []
    eos_ids = _ids(text.get("eos_token_id", raw.get("eos_token_id"))) | _ids(decoding.get("eos_token_ids"))
    if tok is None:
        return [f"model {cfg.name}: no tokenizer_config.json or tokenizer.json in the checkpoint; download it again"]
    if tok.eos_id is not None and eos_ids and tok.eos_id not in eos_ids:
        p.append(f"model {cfg.name}: the tokenizer's EOS {tok.eos_token!r} is id {tok.eos_id}, not among the "
                 f"config's / YAML's EOS ids {sorted(eos_ids)}; set decoding.eos_token_ids in {yaml_file}")
    mask = decoding.get("mask_token_id")
    if mask is None:
        return p
    in_config = raw.get("mask_token_id", text.get("mask_token_id"))
    if in_config is not None and int(in_config) != int(mask):
        p.append(f"model {cfg.name}: decoding.mask_token_id {mask} but config.json says mask_token_id {in_config}; "
                 f"set decoding.mask_token_id: {in_config} in {yaml_file}")
    at_id = tok.added.get(int(mask))
    if at_id is None or "mask" not in at_id.lower():
        masks = {i: t for i, t in tok.added.items() if "mask" in t.lower()}
        p.append(f"model {cfg.name}: decoding.mask_token_id {mask} is {at_id!r} in the tokenizer, not a mask token "
                 f"(its mask tokens: {masks or 'none'}); fix decoding.mask_token_id in {yaml_file}")
    return p


def _expected(cfg: ModelConfig, folder: Path, raw: dict[str, Any]) -> ExpectedWeights:
    if cfg.family == "bidirectional" and not cfg.trust_remote_code:
        return bidir_expected(str(dict(cfg.decoding).get("style", "llada")), raw)
    return causal_lm_expected(folder, cfg.trust_remote_code)


def checkpoint_problems(cfg: ModelConfig, folder: Path) -> list[str]:
    """Every problem of the checkpoint in ``folder`` for model ``cfg`` (empty: it fits), one line each."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        return [f"model {cfg.name}: {cfg_path} is missing; download the checkpoint again or fix path:"]
    raw = json.loads(cfg_path.read_text())
    try:
        expected = _expected(cfg, folder, raw)
    except (ValueError, KeyError, TypeError, OSError) as exc:  # unknown model type, custom code, missing key
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [f"model {cfg.name}: {cfg_path} does not build the project's {cfg.family} model ({cause[:200]}); "
                "use a checkpoint of a supported architecture, or set trust_remote_code: true in its YAML"]
    return weight_problems(cfg.name, stored_weights(folder), expected) + \
        token_problems(cfg, raw, tokenizer_facts(folder))
