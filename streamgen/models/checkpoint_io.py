"""Safetensors checkpoints read straight to the device, one tensor at a time (issue 37, item 5).

``from_pretrained(...).to(device)`` and ``load_file`` + ``.to(device, dtype)`` first build the whole
model in host memory (twice, when the dtype changes); with eight actors per node loading at once that
is 8 × 16–24 GB of host RAM. Here the model is built with its parameters on the meta device and its
buffers (RoPE ``inv_freq``, Gemma's ``embed_scale``) really computed on the target device in float32;
each tensor is then read by ``safe_open(..., device=device)``, cast to the target dtype and assigned in
place of its meta parameter, so the host never holds more than one tensor beyond what the target
device already is. Only the tensors asked for are read: the index and the shards' headers name the
rest, which are never touched.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from streamgen.models.hub_cache import DOWNLOAD_CLI

INDEX_FILE = "model.safetensors.index.json"


class CheckpointReadError(ValueError):
    """A checkpoint folder lacks its shards or names a tensor no shard holds; the message names the fix."""


@dataclass(frozen=True)
class TensorInfo:
    """Where one checkpoint tensor lives and its shape (read from the shard's header, not its data)."""

    file: Path
    shape: tuple[int, ...]


def checkpoint_tensors(folder: str | Path) -> dict[str, TensorInfo]:
    """Every tensor name of the checkpoint in ``folder`` → its shard and shape; headers only.

    The shards are those of ``model.safetensors.index.json`` when the folder has one (a shard it
    names but the folder lacks is an error), else every ``*.safetensors`` file of the folder; a tensor
    in two shards is an error.
    """
    folder = Path(folder)
    files = _shard_files(folder)
    out: dict[str, TensorInfo] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                if name in out:  # which copy a loader reads would depend on the order of the files
                    raise CheckpointReadError(f"{folder}: tensor {name} is in both {out[name].file.name} and "
                                              f"{file.name}; download the checkpoint again")
                out[name] = TensorInfo(file, tuple(handle.get_slice(name).get_shape()))
    return out


def _shard_files(folder: Path) -> list[Path]:
    index = folder / INDEX_FILE
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise CheckpointReadError(f"{folder}: shards {missing} named by {INDEX_FILE} are missing; the "
                                      f"download was interrupted: run `{DOWNLOAD_CLI} <id>` again")
        return [folder / n for n in names]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointReadError(f"no *.safetensors files in {folder}: download the checkpoint with "
                                  f"`{DOWNLOAD_CLI} <id> --local-dir DIR` and set path: DIR")
    return files


@contextlib.contextmanager
def parameters_on_meta(device: str | torch.device) -> Iterator[None]:
    """Inside: new modules get their parameters on the meta device (no memory) and their buffers computed
    on ``device`` (as their constructors compute them, in float32 where they ask for it)."""
    from accelerate import init_empty_weights

    with torch.device(device), init_empty_weights(include_buffers=False):
        yield


def read_into(model: torch.nn.Module, tensors: Mapping[str, TensorInfo], names: Mapping[str, str], *,
              device: str | torch.device, dtype: torch.dtype) -> None:
    """Read checkpoint tensor ``c`` for every ``names[c]`` = parameter name of ``model`` to ``device``,
    cast it to ``dtype`` and assign it in place of the parameter, one at a time (an integer or quantised
    tensor is refused: every parameter here is float)."""
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(tensors[name].file, []).append(name)
    for file, wanted in by_file.items():
        with safe_open(str(file), framework="pt", device=str(device)) as handle:
            for name in wanted:
                tensor = handle.get_tensor(name)
                if not tensor.is_floating_point():  # an integer / quantised tensor would be cast or run as is
                    raise CheckpointReadError(f"{file}: tensor {name} is {tensor.dtype}, not a float dtype; the "
                                              "loaders read float safetensors only: use the checkpoint's bf16 release")
                assign_parameter(model, names[name], tensor.to(dtype))


def assign_parameter(model: torch.nn.Module, name: str, tensor: torch.Tensor) -> None:
    """Replace parameter ``name`` (dotted) of ``model`` by ``tensor``, without copying it."""
    owner, _, leaf = name.rpartition(".")
    module = model.get_submodule(owner)
    module._parameters[leaf] = torch.nn.Parameter(tensor, requires_grad=tensor.is_floating_point())


def still_on_meta(model: torch.nn.Module) -> list[str]:
    """Names of ``model``'s parameters and buffers that were never given real data."""
    named: list[tuple[str, Any]] = [*model.named_parameters(), *model.named_buffers()]
    return [name for name, t in named if t.device.type == "meta"]
