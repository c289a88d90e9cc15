"""Training requests from the configured source, checked against the evaluation splits first.

``source.kind=benchmark`` renders rows with a benchmark module exactly as the grid renders its
requests (system prompt, template, history), so the model is trained on the format it is evaluated
on; offline this is MBPP's train split (``train/mbpp_train.jsonl`` under the data directory, resolved
by ``streamgen.config.default_data_dir``). ``source.kind=rows`` reads a JSONL file under the data
directory or a hub dataset (``datasets.load_dataset``: the only path that downloads, and only when
configured) and takes the request, id and corpus answer from named fields.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.adapt.config import SourceSettings
from streamgen.adapt.leakage import check_benchmark_source, check_rows, evaluation_index
from streamgen.benchmarks import BenchmarkDataError
from streamgen.benchmarks.sources import read_rows
from streamgen.config import BenchmarkConfig, ConfigError, benchmark_config
from streamgen.requests.chat import Message

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingRequest:
    """One training request: its fixed context and the user turn that arrives in segments."""

    request_id: str
    request: str
    history: tuple[Message, ...] = ()
    system_prompt: str | None = None
    answer: str | None = None  # the corpus answer (pairs.target=corpus)

    def messages(self, user: str) -> list[Message]:
        """System prompt + history + ``user`` as the final turn (the request or a prefix of it)."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, *(dict(m) for m in self.history), {"role": "user", "content": user}]


def field_value(row: Mapping[str, Any], path: str) -> Any:
    """``row`` at a dotted path (``conversation.0.content``); a missing key raises naming it."""
    value: Any = row
    for part in path.split("."):
        try:
            value = value[int(part)] if isinstance(value, Sequence) and not isinstance(value, str) else value[part]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ConfigError([f"a source row has no field {path!r} (failed at {part!r}); its keys are "
                               f"{sorted(row)}: fix source.request_field / answer_field / id_field"]) from exc
    return value


def _benchmark_requests(s: SourceSettings, data_dir: Path) -> list[TrainingRequest]:
    from streamgen.benchmarks import load_benchmark

    cfg: BenchmarkConfig = benchmark_config(s.benchmark, list(s.benchmark_overrides))
    check_benchmark_source(cfg.name, cfg.module)
    rows = read_rows(cfg, data_dir)
    examples = load_benchmark(cfg).examples(data_dir)
    used = {ex.example_id.rsplit("/", 1)[-1] for ex in examples}
    check_rows([r for r in rows if str(r.get("task_id", "")) in used] or rows, f"benchmark {cfg.name}",
               evaluation_index(data_dir))
    return [TrainingRequest(ex.example_id, ex.request, tuple(ex.history), ex.system_prompt, ex.reference)
            for ex in examples]


def _row_requests(s: SourceSettings, data_dir: Path) -> list[TrainingRequest]:
    probe = BenchmarkConfig(name="adapt-source", source="hub" if s.hub_id else "local", data_file=s.data_file,
                            hub_id=s.hub_id, hub_config=s.hub_config, hub_split=s.hub_split)
    rows = read_rows(probe, data_dir)
    check_rows(rows, s.hub_id or s.data_file, evaluation_index(data_dir))
    out = []
    for i, row in enumerate(rows):
        rid = str(field_value(row, s.id_field)) if s.id_field in row or "." in s.id_field else str(i)
        answer = str(field_value(row, s.answer_field)) if s.answer_field else None
        out.append(TrainingRequest(rid, str(field_value(row, s.request_field)), (), s.system_prompt, answer))
    return out


def load_requests(s: SourceSettings, data_dir: Path) -> list[TrainingRequest]:
    """The source's requests (first ``s.limit``); raises LeakageError / ConfigError before any model loads."""
    try:
        requests = _benchmark_requests(s, data_dir) if s.kind == "benchmark" else _row_requests(s, data_dir)
    except BenchmarkDataError as exc:
        raise ConfigError([f"training source: {exc}"], "training data not found") from exc
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        raise ConfigError(["the training source has duplicate request ids: set source.id_field= to a unique field"])
    log.info("training source: %d requests", len(requests))
    return requests if s.limit is None else requests[: s.limit]
