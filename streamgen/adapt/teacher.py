"""Teacher answers: the plain model's own greedy answer to each complete request, generated once.

The answer is the grid's base run (``Decoder.generate`` on the complete request), so the target of
self-distillation is exactly what the plain model answers when evaluated. For the draft-refinement
variant the stream procedure is also replayed (``streamgen.stream.run_stream``, greedy acceptance)
and the draft it holds when each prefix arrives is kept.

Answers are cached under ``<cache_dir>`` as Parquet parts written atomically every ``chunk``
requests; a rerun reads the parts and generates only the missing requests (resume after a crash or a
preemption). The cache folder's name is a hash of the model config, answer budget and whether drafts
are kept, so a changed setting never reuses stale answers.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow.parquet as pq

from streamgen.acceptance_rules import Greedy
from streamgen.adapt.sources import TrainingRequest
from streamgen.config import ESTIMATE_ONLY_MODEL_FIELDS
from streamgen.decoding.base import Decoder
from streamgen.requests.segment import Segmenter
from streamgen.results.records import to_table, write_parquet_atomic
from streamgen.stream import StreamRequest, run_stream

log = logging.getLogger(__name__)

TEACHER_SCHEMA = 1
"""Bump when what a cached answer means changes (its folder name changes with it)."""


@dataclass(frozen=True)
class TeacherAnswer:
    """One request's teacher answer (token ids as JSON text: Parquet-friendly, exact)."""

    request_id: str
    text: str
    token_ids_json: str  # the answer's token ids, EOS included when it finished
    finished: bool
    forwards: int
    drafts_json: str  # draft-refinement: the draft token ids held when prefix i arrives, i = 1..n ("[]" if unused)

    @property
    def token_ids(self) -> tuple[int, ...]:
        return tuple(json.loads(self.token_ids_json))

    @property
    def drafts(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(d) for d in json.loads(self.drafts_json))


def held_drafts(decoder: Decoder, request: TrainingRequest, segments: Sequence[str]) -> list[list[int]]:
    """The draft the stream procedure holds when each prefix arrives: () at prefix 1, then D_{i-1}."""
    stream_request = StreamRequest(request.request_id, request.history, tuple(segments), request.system_prompt)
    steps = run_stream(decoder, stream_request, Greedy())
    return [[], *(list(s.answer.token_ids) for s in steps[:-1])]


def answer_one(decoder: Decoder, request: TrainingRequest, segmenter: Segmenter, with_drafts: bool) -> TeacherAnswer:
    gen = decoder.generate(request.messages(request.request))
    drafts = held_drafts(decoder, request, segmenter(request.request)) if with_drafts else []
    return TeacherAnswer(request.request_id, gen.text, json.dumps(list(gen.token_ids)), gen.finished,
                         gen.forwards, json.dumps(drafts))


def read_cache(cache_dir: Path) -> dict[str, TeacherAnswer]:
    """Every answer in the cache's finished parts (temporary files of a crashed run are ignored)."""
    out: dict[str, TeacherAnswer] = {}
    for part in sorted(cache_dir.glob("part-*.parquet")):
        for row in pq.read_table(part).to_pylist():
            out[row["request_id"]] = TeacherAnswer(**row)
    return out


def teacher_answers(decoder: Decoder, requests: Sequence[TrainingRequest], segmenter: Segmenter,
                    cache_dir: Path, *, with_drafts: bool, chunk: int = 8,
                    on_answer: Callable[[int], None] | None = None) -> dict[str, TeacherAnswer]:
    """Answers for every request, from the cache where present; new ones are written every ``chunk``."""
    done = read_cache(cache_dir)
    todo = [r for r in requests if r.request_id not in done]
    log.info("teacher answers: %d cached, %d to generate in %s", len(done), len(todo), cache_dir)
    if on_answer:
        on_answer(len(requests) - len(todo))
    next_part = len(list(cache_dir.glob("part-*.parquet")))
    for batch in _chunks(todo, chunk):
        answers = []
        for req in batch:
            answers.append(answer_one(decoder, req, segmenter, with_drafts))
            if on_answer:
                on_answer(1)
        write_parquet_atomic(to_table(answers, TeacherAnswer), cache_dir / f"part-{next_part:05d}.parquet")
        next_part += 1
        done.update((a.request_id, a) for a in answers)
    return {r.request_id: done[r.request_id] for r in requests}


def cache_key(model_cfg: object, max_new_tokens: int, with_drafts: bool) -> str:
    """A hash of what a teacher answer depends on (the cache folder's name)."""
    model = {k: v for k, v in asdict(model_cfg).items() if k not in ESTIMATE_ONLY_MODEL_FIELDS}  # type: ignore[call-overload]
    payload = {"model": model, "max_new_tokens": max_new_tokens, "with_drafts": with_drafts,
               "schema": TEACHER_SCHEMA}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _chunks(items: Sequence[TrainingRequest], n: int) -> Iterable[Sequence[TrainingRequest]]:
    for start in range(0, len(items), n):
        yield items[start : start + n]
