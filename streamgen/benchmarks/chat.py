"""Multi-turn chat, scored by token F1: earlier turns are history, only the final user turn streams.

Local (MT-Bench): history = user turn 1 + the answer file's turn-1 answer; streamed request =
user turn 2; reference = the answer file's turn-2 answer (``options.answers_file``, relative to the
data directory; the offline files are model outputs, not human references). ``options.turn: 1``
streams turn 1 with no history instead. Hub (e.g. ``HuggingFaceH4/ultrachat_200k``, split
``test_sft``): rows with a ``messages`` list; the last assistant message is the reference, the user
message before it is streamed, everything earlier is history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamgen.benchmarks.base import BenchmarkDataError, Example
from streamgen.benchmarks.sources import read_local, render
from streamgen.benchmarks.text_benchmark import TextBenchmark
from streamgen.config import BenchmarkConfig
from streamgen.requests.chat import Message


def _turn(role: str, content: str) -> Message:
    return {"role": role, "content": content}


class ChatTask:
    """The chat-specific functions of :class:`TextBenchmark`."""

    scorer_version = "1"  # bump when a change here alters any verdict (analysis.rescore re-scores)

    def examples(self, cfg: BenchmarkConfig, rows: list[dict[str, Any]], data_dir: Path) -> list[Example]:
        if rows and "messages" in rows[0]:
            return [e for e in (self.from_messages(cfg, r, i) for i, r in enumerate(rows)) if e is not None]
        answers_file = cfg.options.get("answers_file")
        if not answers_file:
            raise BenchmarkDataError(f"benchmark {cfg.name}: MT-Bench rows need options.answers_file "
                                     "(e.g. chat/mt_bench/reference_answer/gpt-4-turbo.jsonl)")
        answers = {a["question_id"]: a["choices"][0]["turns"] for a in read_local(data_dir, answers_file)}
        turn = int(cfg.options.get("turn", 2))
        return [self.from_mt_bench(cfg, q, answers[q["question_id"]], turn)
                for q in rows if q["question_id"] in answers]

    @staticmethod
    def from_mt_bench(cfg: BenchmarkConfig, question: dict[str, Any], answers: list[str], turn: int) -> Example:
        history = () if turn == 1 else (_turn("user", question["turns"][0]), _turn("assistant", answers[0]))
        return Example(
            benchmark=cfg.name,
            example_id=f"mt_bench/{question['question_id']}/turn{turn}",
            history=history,
            request=render(cfg, {"request": question["turns"][turn - 1]}),
            reference=answers[turn - 1],
            payload={"category": question.get("category", "")},
            system_prompt=cfg.system_prompt,
        )

    @staticmethod
    def from_messages(cfg: BenchmarkConfig, row: dict[str, Any], index: int) -> Example | None:
        msgs = [_turn(m["role"], m["content"]) for m in row["messages"]]
        last = max((i for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 0
                    and msgs[i - 1]["role"] == "user"), default=None)
        if last is None:
            return None
        return Example(
            benchmark=cfg.name,
            example_id=str(row.get("prompt_id") or row.get("id") or index),
            history=tuple(msgs[: last - 1]),
            request=render(cfg, {"request": msgs[last - 1]["content"]}),
            reference=msgs[last]["content"],
            payload={},
            system_prompt=cfg.system_prompt,
        )

    def references(self, example: Example) -> list[str]:
        return [example.reference]


def build(cfg: BenchmarkConfig) -> TextBenchmark:
    return TextBenchmark(cfg, ChatTask())
