"""Prefix → answer training pairs (paper §7: the answer to the complete request, given only a prefix).

Each request is cut by the segmenter the caller passes; the pipeline always passes the sentence
segmenter (the default grid's granularity), whatever ``granularity`` an evaluation grid uses
(docs/adaptation.md). Prefix ``i`` is segments 1..i. Pairs are made for the incomplete prefixes 1..n−1, plus the complete request when
``include_complete`` is set, so the model keeps answering complete requests as before. A request of
one segment has no incomplete prefix (and is excluded from evaluation alike, paper §4).

The target is the teacher's answer to the complete request (its exact token ids, EOS included) or
the corpus answer (``pairs.target=corpus``; tokenised at training time, EOS appended). In the
draft-refinement variant the user turn also shows the draft the stream procedure holds when that
prefix arrives (``pairs.draft_template``); prefix-to-answer shows the bare prefix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from streamgen.adapt.config import PairSettings
from streamgen.adapt.sources import TrainingRequest
from streamgen.adapt.teacher import TeacherAnswer
from streamgen.config import ConfigError
from streamgen.requests.chat import Message
from streamgen.requests.segment import Segmenter


@dataclass(frozen=True)
class TrainingPair:
    """One (request prefix → answer) pair; token lists are JSON text (Parquet-friendly, exact)."""

    request_id: str
    prefix_index: int  # i: segments 1..i are present
    n_segments: int
    prefix_chars: int
    messages_json: str  # the chat messages the model sees (system, history, user turn), without the model's own system prompt
    draft_text: str | None  # draft_refinement: the held draft shown in the user turn
    target_text: str
    target_token_ids_json: str | None  # teacher targets: exact ids (EOS included); None: tokenise target_text
    target_source: str  # teacher | corpus

    @property
    def messages(self) -> list[Message]:
        return list(json.loads(self.messages_json))

    @property
    def target_token_ids(self) -> list[int] | None:
        return None if self.target_token_ids_json is None else list(json.loads(self.target_token_ids_json))


def prefix_indices(n_segments: int, include_complete: bool) -> range:
    """Which prefixes become pairs: 1..n−1 (incomplete), plus n when ``include_complete``."""
    if n_segments < 2:
        return range(0)
    return range(1, n_segments + 1 if include_complete else n_segments)


def _target(req: TrainingRequest, cfg: PairSettings, teacher: Mapping[str, TeacherAnswer]) -> tuple[str, str | None]:
    if cfg.target == "corpus":
        if req.answer is None:
            raise ConfigError([f"request {req.request_id}: pairs.target=corpus but the source gives no answer"])
        return req.answer, None
    answer = teacher[req.request_id]
    return answer.text, answer.token_ids_json


def request_pairs(req: TrainingRequest, segments: Sequence[str], cfg: PairSettings,
                  teacher: Mapping[str, TeacherAnswer], decode: Callable[[Sequence[int]], str]) -> list[TrainingPair]:
    """The pairs of one request (``decode`` turns held-draft token ids into text)."""
    if "".join(segments) != req.request:
        raise AssertionError(f"segmenter lost text of request {req.request_id}")
    text, ids = _target(req, cfg, teacher)
    drafts = teacher[req.request_id].drafts if cfg.variant == "draft_refinement" else ()
    pairs = []
    for i in prefix_indices(len(segments), cfg.include_complete):
        prefix = "".join(segments[:i])
        draft = decode(drafts[i - 1]) if drafts else None
        user = cfg.draft_template.format(prefix=prefix, draft=draft) if draft is not None else prefix
        pairs.append(TrainingPair(req.request_id, i, len(segments), len(prefix), json.dumps(req.messages(user)),
                                  draft, text, ids, cfg.target))
    return pairs


def build_pairs(requests: Sequence[TrainingRequest], segmenter: Segmenter, cfg: PairSettings,
                teacher: Mapping[str, TeacherAnswer], decode: Callable[[Sequence[int]], str]) -> list[TrainingPair]:
    """Every request's pairs, in request order then prefix order."""
    out: list[TrainingPair] = []
    for req in requests:
        out.extend(request_pairs(req, segmenter(req.request), cfg, teacher, decode))
    return out
