"""Scaled-down study checkpoints laid out as a Hugging Face cache, from tests/support/fixtures/checkpoints/*.json.

Each fixture holds a study model's real ``config.json`` (with the public source of its facts), the
sizes it is scaled down to, its weight names with their shapes as formulas over the config, and its
tokenizer's special tokens. :func:`write_snapshot` writes ``models--org--name/refs/main`` and
``snapshots/<commit>/`` with ``config.json``, ``tokenizer_config.json``,
``model.safetensors.index.json`` and the shards. The shards are written here by hand from the
safetensors format (8-byte header length, JSON header, data), the data left as a sparse hole: the
pre-flight reads headers only, and a 126k-row embedding costs no disk.
"""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
STUDY_MODELS = ("llada-8b", "dream-7b", "refusion-8b", "llama-3.1-8b-instruct", "qwen3-8b", "gemma-3-12b-it")
COMMIT = "0123456789abcdef0123456789abcdef01234567"
BYTES = {"BF16": 2, "F32": 4, "I8": 1}
# Every study model is an instruct model rendered with its chat template (the fixtures carry its special
# tokens, not its template): a one-line ChatML template stands in for each.
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def fixture(model: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{model}.json").read_text())


def scaled_config(fx: dict[str, Any]) -> dict[str, Any]:
    """The real config.json with the fixture's sizes in place (in ``text_config`` for Gemma-3)."""
    cfg = copy.deepcopy(fx["config"])
    (cfg[fx["text_config_key"]] if "text_config_key" in fx else cfg).update(fx["scaled"])
    return cfg


def weight_shapes(fx: dict[str, Any], config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every weight name of the scaled checkpoint with its shape, from the fixture's formulas."""
    text = config[fx["text_config_key"]] if "text_config_key" in fx else config
    env = {**fx.get("defaults", {}), **text}
    out: dict[str, tuple[int, ...]] = {}
    for pattern, dims in fx["weights"]:
        shape = tuple(int(eval(str(d), {}, env)) for d in dims)  # noqa: S307  (formulas from our own fixtures)
        for i in range(int(env[fx["layers_key"]]) if "{i}" in pattern else 1):
            out[pattern.format(i=i)] = shape
    out.update({name: tuple(dims) for name, dims in fx.get("extras", [])})
    return out


def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], dtype: str = "BF16",
                      dtypes: dict[str, str] | None = None) -> None:
    """A valid safetensors file whose data is an unwritten (sparse) region of the right length
    (``dtypes``: per-tensor dtypes in place of ``dtype``)."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = BYTES[(dtypes or {}).get(name, dtype)]
        for d in shape:
            n *= d
        header[name] = {"dtype": (dtypes or {}).get(name, dtype), "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)


def write_snapshot(cache: Path, model: str, *, config: dict[str, Any] | None = None,
                   shapes: dict[str, tuple[int, ...]] | None = None, commit: str = COMMIT) -> Path:
    """The fixture's scaled checkpoint as ``cache/models--org--name`` (refs/main → ``commit``); returns
    the snapshot folder. ``config`` / ``shapes`` replace the fixture's (for deliberate breakage)."""
    fx = fixture(model)
    config = config if config is not None else scaled_config(fx)
    shapes = shapes if shapes is not None else weight_shapes(fx, config)
    repo = cache / f"models--{fx['hub_id'].replace('/', '--')}"
    folder = repo / "snapshots" / commit
    folder.mkdir(parents=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps({**fx["tokenizer"], "chat_template": CHAT_TEMPLATE}))
    n = fx["shards"]
    files = [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    weight_map = {name: files[k % n] for k, name in enumerate(sorted(shapes))}
    for f in files:
        write_safetensors(folder / f, {k: v for k, v in shapes.items() if weight_map[k] == f})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder
