"""Where benchmark rows come from: a local file under the data directory, or a hub dataset.

Local files (``source: local``) are JSONL, gzipped JSONL or one JSON array, read from
``data_dir / data_file`` (``data_dir``: the grid's, else ``$STREAMGEN_DATA_DIR``, else the
repository's ``data/``) and checked against the directory's ``MANIFEST.tsv`` first
(:mod:`streamgen.benchmarks.data_manifest`). A hub dataset (``source: hub``) is loaded with
``datasets.load_dataset(hub_id, hub_config, split=hub_split)``: the only path that may download, and
only when configured.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

from streamgen.benchmarks.base import BenchmarkDataError
from streamgen.benchmarks.data_manifest import verified_bytes
from streamgen.config import BenchmarkConfig, resolve_data_dir

logger = logging.getLogger(__name__)

Row = dict[str, Any]


def read_local(data_dir: Path, relative: str) -> list[Row]:
    """Rows of the ``.jsonl``, ``.jsonl.gz`` or ``.json`` (array) file ``data_dir/relative``, once its
    sha256 matches the directory's manifest."""
    path = Path(data_dir) / relative
    data = verified_bytes(data_dir, relative)
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    try:
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchmarkDataError(f"{path} is not valid JSON/JSONL ({exc}); check the file against its SOURCE.md") from exc
    if not isinstance(rows, list):
        raise BenchmarkDataError(f"{path} holds a JSON {type(rows).__name__}, expected an array of rows")
    return rows


def read_hub(cfg: BenchmarkConfig) -> list[Row]:
    """Rows of the configured hub dataset split (downloads unless cached; HF_HUB_OFFLINE honoured)."""
    import datasets  # heavy import, only on the hub path

    if not cfg.hub_split:
        raise BenchmarkDataError(f"benchmark {cfg.name}: source=hub needs hub_split= (e.g. validation)")
    logger.info("loading hub dataset %s (config %s, split %s)", cfg.hub_id, cfg.hub_config, cfg.hub_split)
    ds = datasets.load_dataset(cfg.hub_id, cfg.hub_config, split=cfg.hub_split)
    return [dict(r) for r in ds]


def read_rows(cfg: BenchmarkConfig, data_dir: Path | str | None = None) -> list[Row]:
    """The benchmark's raw rows, from its configured source."""
    if cfg.source == "hub":
        return read_hub(cfg)
    return read_local(resolve_data_dir(data_dir), cfg.data_file)


def render(cfg: BenchmarkConfig, fields: dict[str, Any]) -> str:
    """``cfg.prompt_template`` filled with ``fields``; an unknown placeholder names the known ones."""
    try:
        return cfg.prompt_template.format_map(fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise BenchmarkDataError(
            f"benchmark {cfg.name}: prompt_template {cfg.prompt_template!r} cannot be filled ({exc!r}); "
            f"placeholders available: {', '.join('{' + k + '}' for k in sorted(fields))}") from exc
