"""Strict values of a grid config, and override paths that cannot be merged, as problem lines for
:func:`streamgen.config.validate_grid` and :func:`streamgen.config.load` (checked with every other
problem, before anything is written or started).

The checks take the values they check, not the config itself, so this module needs nothing of
``streamgen.config`` (which imports it): no import circle, not even a type-only one."""

from __future__ import annotations

import math
import os
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any

# Ray refuses a smaller object store (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES: 75 MiB)
RAY_MIN_OBJECT_STORE_MB = 75
_ON_THIS_MACHINE = ("local", "debug")  # clusters whose Ray runs here: its memory bounds the store


def duplicates(values: Iterable[Any]) -> list[Any]:
    """The values listed more than once, in first-seen order."""
    seen: list[Any] = []
    again: list[Any] = []
    for v in values:
        if v in seen and v not in again:
            again.append(v)
        seen.append(v)
    return again


def _no_duplicates(key: str, values: Sequence[Any]) -> list[str]:
    again = duplicates(values)
    if not again:
        return []
    kept = list(dict.fromkeys(values))
    return [f"{key} lists {', '.join(map(str, again))} more than once: each cell would run twice; "
            f"write {key}=[{','.join(map(str, kept))}]"]


def list_problems(lists: Mapping[str, Sequence[Any]]) -> list[str]:
    """Duplicates in every named list (the grid's lists that expand into cells or examples)."""
    return [line for name, values in lists.items() for line in _no_duplicates(name, values)]


def _physical_mb() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError):
        return None


def value_problems(*, max_new_tokens: int | None, shard_timeout_s: float, cluster: str, object_store_mb: int,
                   num_cpus: int | None, num_gpus: int | None) -> list[str]:
    """Bounds of the grid's numbers: a budget of ≥ 1 token, positive timeouts, Ray's store limits
    (``object_store_mb``, ``num_cpus``, ``num_gpus``: the grid's ``ray`` block)."""
    p: list[str] = []
    if max_new_tokens is not None and max_new_tokens < 1:
        p.append(f"max_new_tokens={max_new_tokens} must be ≥ 1 (tokens per answer; null: the benchmark's own)")
    if not (math.isfinite(shard_timeout_s) and shard_timeout_s > 0):
        p.append(f"shard_timeout_s={shard_timeout_s} must be > 0 seconds (e.g. shard_timeout_s=1800)")
    store = object_store_mb
    if store < RAY_MIN_OBJECT_STORE_MB:
        p.append(f"ray.object_store_mb={store} is below Ray's minimum of {RAY_MIN_OBJECT_STORE_MB} MiB: "
                 f"e.g. ray.object_store_mb=256")
    elif cluster in _ON_THIS_MACHINE and (memory := _physical_mb()) is not None and store > memory:
        p.append(f"ray.object_store_mb={store} exceeds this machine's {memory} MiB of memory: "
                 f"e.g. ray.object_store_mb=256")
    if num_cpus is not None and num_cpus < 1:
        p.append(f"ray.num_cpus={num_cpus} must be ≥ 1 (or null: workers + score_workers)")
    if num_gpus is not None and num_gpus < 0:
        p.append(f"ray.num_gpus={num_gpus} must be ≥ 0 (or null: what Ray finds)")
    return p


def override_path_problems(schema: type, overrides: Sequence[str]) -> list[str]:
    """``key=value`` overrides whose dotted key goes *into* a list field (which omegaconf cannot merge:
    ``TypeError: Cannot merge incompatible container types``), each with the accepted form."""
    p = []
    for item in overrides:
        key = item.split("=", 1)[0]
        parts = key.split(".")
        hint: Any = schema
        for depth, part in enumerate(parts[:-1]):
            if not (isinstance(hint, type) and is_dataclass(hint)):
                break
            field_hint = typing.get_type_hints(hint).get(part)
            if typing.get_origin(field_hint) is list:
                p.append(_into_list_message(".".join(parts[: depth + 1]), parts[depth + 1:], item))
                break
            hint = field_hint
    return p


def _into_list_message(list_key: str, rest: list[str], item: str) -> str:
    value = item.split("=", 1)[1] if "=" in item else ""
    if list_key == "benchmarks" and len(rest) >= 2:  # benchmarks.ds1000.options.python=null
        bench, setting = rest[0], ".".join(rest[1:])
        return (f"{item!r}: benchmarks is a list of names, not per-benchmark settings; a benchmark's own "
                f"settings go in benchmark_overrides: write benchmark_overrides.{bench}=[{setting}={value}] "
                f"(and benchmarks=[{bench},...] to run it)")
    return f"{item!r}: {list_key} is a list; set it whole, e.g. {list_key}=[a,b]"


def field_names(schema: type) -> list[str]:
    return [f.name for f in fields(schema)] if is_dataclass(schema) else []


def accepted_keys(schema: type, key: str) -> str:
    """The keys accepted where ``key`` (dotted) was written, e.g. ``ray.object_stor`` → RayConfig's."""
    hint: Any = schema
    prefix: list[str] = []
    for part in key.split(".")[:-1]:
        nested = typing.get_type_hints(hint).get(part) if is_dataclass(hint) else None
        if not (isinstance(nested, type) and is_dataclass(nested)):
            break
        hint, prefix = nested, [*prefix, part]
    dotted = ".".join(prefix) + "." if prefix else ""
    return f"accepted here: {', '.join(dotted + n for n in field_names(hint))}"
