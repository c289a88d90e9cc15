"""A checkpoint's files read as if any of them may be damaged: JSON files, safetensors headers, the weight map.

Nothing here reads tensor data. Each damage the reader can meet is one :class:`CheckpointFileError`
whose message names the file, what is wrong with it and the fix; :mod:`streamgen.models.checkpoint_facts`
prefixes the model's name and hands it to the pre-flight as one line:

- a JSON file that is empty, not JSON, or JSON of another shape (:func:`read_json`);
- a ``.safetensors`` file shorter than its 8-byte length field, whose header runs past the file's end or
  is not JSON (a download cut mid-header), whose entries lack a dtype, shape or offsets, or whose data
  region is shorter (or longer) than its header's offsets say (``os.stat``, not a read:
  :func:`safetensors_header`);
- the weight map as the loaders use it (:func:`stored_weights`): transformers reads each tensor from the
  shard that ``model.safetensors.index.json`` names, so a tensor must be in that shard; a tensor held by
  two shards, or by a shard the index does not name it in, is reported (the loaders would disagree on it).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})  # cast to the model's float dtype losslessly enough
_SHOWN = 3


class CheckpointFileError(ValueError):
    """One damaged checkpoint file; the message (one line) names the file and the fix."""


def few(names: Any) -> str:
    """The first three of ``names``, sorted, and how many more."""
    names = sorted(names)
    return ", ".join(names[:_SHOWN]) + (f" (+{len(names) - _SHOWN} more)" if len(names) > _SHOWN else "")


def read_json(path: Path, fix: str) -> dict[str, Any]:
    """The JSON object in ``path``; :class:`CheckpointFileError` naming the file and ``fix`` when it is
    empty, not JSON or not an object."""
    text = path.read_bytes()
    if not text.strip():
        raise CheckpointFileError(f"{path} is empty; {fix}")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointFileError(f"{path} is not valid JSON ({str(exc).splitlines()[0]}); {fix}") from exc
    if not isinstance(value, dict):
        raise CheckpointFileError(f"{path} holds a JSON {type(value).__name__}, not an object; {fix}")
    return value


def field_error(path: Path, field: str, want: str, fix: str) -> CheckpointFileError:
    return CheckpointFileError(f"{path}: field {field} is not {want}; {fix}")


# --------------------------------------------------------------------------------------------
# One safetensors file: its header, checked against the file's length
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header: its dtype (``BF16``, ``I8``, ...) and shape."""

    dtype: str
    shape: tuple[int, ...]


def _entry(path: Path, name: str, raw: Any, fix: str) -> tuple[TensorEntry, int]:
    """The tensor entry and its end offset; an error naming the tensor when the entry is malformed."""
    ok = isinstance(raw, dict) and isinstance(raw.get("dtype"), str) and isinstance(raw.get("shape"), list) \
        and all(isinstance(d, int) and d >= 0 for d in raw["shape"]) and isinstance(raw.get("data_offsets"), list) \
        and len(raw["data_offsets"]) == 2 and all(isinstance(o, int) for o in raw["data_offsets"])
    if not ok:
        raise CheckpointFileError(f"{path}: the header entry of tensor {name} lacks a dtype, shape or "
                                  f"data_offsets; {fix}")
    return TensorEntry(raw["dtype"], tuple(raw["shape"])), int(raw["data_offsets"][1])


def safetensors_header(path: Path, fix: str = "download the checkpoint again") -> dict[str, TensorEntry]:
    """The tensors a ``.safetensors`` file declares (8-byte little-endian header length, JSON header,
    data), checked against the file's size from ``os.stat``; no tensor data is read."""
    size = os.stat(path).st_size
    if size < 8:
        raise CheckpointFileError(f"{path} is {size} bytes, shorter than a safetensors header; {fix}")
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > size - 8:
            raise CheckpointFileError(f"{path}: its header says {n} bytes but the file has {size - 8} after the "
                                      f"length field (a cut download); {fix}")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointFileError(f"{path}: its header is not valid JSON ({str(exc).splitlines()[0]}); {fix}") from exc
    if not isinstance(header, dict):
        raise CheckpointFileError(f"{path}: its header is a JSON {type(header).__name__}, not an object; {fix}")
    header.pop("__metadata__", None)
    entries: dict[str, TensorEntry] = {}
    end = 0
    for name, value in header.items():
        entries[name], stop = _entry(path, name, value, fix)
        end = max(end, stop)
    data = size - 8 - n
    if data != end:
        raise CheckpointFileError(f"{path}: its data region is {data} bytes but its header's offsets need {end} "
                                  f"({'truncated' if data < end else 'trailing bytes'}); {fix}")
    return entries


# --------------------------------------------------------------------------------------------
# The weight map: what the loaders will read, from where
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredWeights:
    """What a checkpoint folder holds, as the loaders read it.

    ``shapes``: tensor name → shape (None when its shard is missing or does not hold it); ``dtypes``:
    tensor name → safetensors dtype; ``missing_files``: shards the index names that are absent;
    ``findings``: where the index and the shards disagree (one line each, without the model's name);
    ``indexed``: whether the folder has ``model.safetensors.index.json``; ``files``: the shard files."""

    shapes: Mapping[str, tuple[int, ...] | None]
    dtypes: Mapping[str, str]
    missing_files: tuple[str, ...]
    findings: tuple[str, ...] = ()
    indexed: bool = False
    files: tuple[str, ...] = ()


def read_weight_map(index: Path, fix: str) -> dict[str, str]:
    """``weight_map`` of a safetensors index: tensor name → shard file name."""
    weight_map = read_json(index, fix).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise field_error(index, "weight_map", "an object of tensor name → shard file name", fix)
    return weight_map


def _index_findings(index: Path, weight_map: Mapping[str, str], headers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Where the index and the shard headers disagree: tensors not in their named shard, tensors held by
    two shards, tensors a shard holds that the index does not name there."""
    holders: dict[str, list[str]] = {}
    for file, header in headers.items():
        for name in header:
            holders.setdefault(name, []).append(file)
    out: list[str] = []
    absent = [f"{n} (named in {f}, " + (f"held by {', '.join(holders[n])})" if n in holders else "in no shard)")
              for n, f in weight_map.items() if f in headers and n not in headers[f]]
    if absent:
        out.append(f"{index} names {len(absent)} tensors in shards that do not hold them (the loader reads each "
                   f"from the shard named): {few(absent)}")
    twice = [f"{n} ({', '.join(sorted(fs))})" for n, fs in holders.items() if len(fs) > 1]
    if twice:
        out.append(f"{len(twice)} tensors are in more than one shard: {few(twice)}")
    stray = [f"{n} ({fs[0]})" for n, fs in holders.items() if len(fs) == 1 and n not in weight_map]
    if stray:
        out.append(f"{len(stray)} tensors are in a shard but not in {index.name}: {few(stray)}")
    return out


def stored_weights(folder: Path, fix: str = "download the checkpoint again") -> StoredWeights:
    """The names, shapes and dtypes a checkpoint folder holds: through ``model.safetensors.index.json``
    when there is one (each tensor from the shard it names), else every ``*.safetensors`` file's header."""
    index = folder / INDEX_FILE
    if index.is_file():
        weight_map = read_weight_map(index, fix)
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = {}, sorted(p.name for p in folder.glob("*.safetensors"))
    missing = tuple(f for f in files if not (folder / f).is_file())
    headers = {f: safetensors_header(folder / f, fix) for f in files if f not in missing}
    if not index.is_file():  # each tensor from the (last) shard that holds it; two holders are a finding
        weight_map = {n: f for f, h in headers.items() for n in h}
    entries = {n: headers[f][n] for n, f in weight_map.items() if f in headers and n in headers[f]}
    findings = _index_findings(index, weight_map, headers)
    shapes: dict[str, tuple[int, ...] | None] = {n: e.shape if (e := entries.get(n)) else None for n in weight_map}
    return StoredWeights(shapes, {n: e.dtype for n, e in entries.items()}, missing, tuple(findings),
                         index.is_file(), tuple(files))
