"""Try streaming generation on one request by hand.

    python -m streamgen.try_request "Write a function that adds two numbers. It should handle floats."
    python -m streamgen.try_request "REQUEST" model=tiny-llama max_new_tokens=32
    python -m streamgen.try_request "REQUEST" acceptance=threshold tau=0.9 device=cuda

Prints the segments, each stream step (draft in, accepted, generated, forwards, tokens fed, wall
clock, the new draft truncated), then base vs residual cost and the speedups. The first argument is
the request; every other argument is a ``key=value`` override of :class:`TryConfig`. A user error
prints one message naming the fix and exits with status 2.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from streamgen.acceptance_rules import make_rule, rule_label
from streamgen.config import ConfigError, load, model_config, raise_if_problems, rule_problems
from streamgen.families.registry import load_decoder
from streamgen.requests.segment import segment
from streamgen.stream import PairOutcome, StreamRequest, run_pair

USAGE = 'usage: python -m streamgen.try_request "REQUEST" [model=smollm2] [acceptance=greedy|threshold tau=0.9] ' \
        "[max_new_tokens=128] [device=cpu]"


@dataclass(frozen=True)
class TryConfig:
    model: str = "smollm2"
    acceptance: str = "greedy"
    tau: float | None = None
    max_new_tokens: int = 128
    device: str = "cpu"
    base_first: bool = True
    threads: int = 1  # torch CPU threads
    show_chars: int = 60  # drafts are shown truncated to this many characters


def parse_args(argv: Sequence[str]) -> tuple[str, TryConfig]:
    if not argv or ("=" in argv[0] and argv[0].split("=", 1)[0] in TryConfig.__dataclass_fields__):
        raise ConfigError(["give the request as the first argument, in quotes", USAGE], "no request")
    cfg = load(TryConfig, overrides=list(argv[1:]))
    problems = rule_problems(cfg.acceptance, {"tau": cfg.tau})
    if cfg.max_new_tokens < 1:
        problems.append(f"max_new_tokens={cfg.max_new_tokens} must be ≥ 1")
    if not argv[0].strip():
        problems.append("the request is empty: give a non-empty request in quotes")
    raise_if_problems(problems, "bad arguments")
    return argv[0], cfg


def _short(text: str, n: int) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= n else text[: n - 1] + "…"


def report(outcome: PairOutcome, cfg: TryConfig) -> str:
    """The human-readable summary of one paired run."""
    assert outcome.request is not None
    segs = outcome.request.segments
    lines = [f"segments ({len(segs)}):", *(f"  {i}. {_short(s, 100)!r}" for i, s in enumerate(segs, 1)), "",
             f"{'step':>4} {'draft_in':>8} {'accepted':>8} {'generated':>9} {'forwards':>8} {'fed':>5} "
             f"{'wall_s':>7}  draft"]
    for i, st in enumerate(outcome.steps, 1):
        lines.append(f"{i:>4} {st.draft_tokens_in:>8} {st.accepted_tokens:>8} {st.generated_tokens:>9} "
                     f"{st.answer.forwards:>8} {st.answer.meter.tokens_fed:>5} {st.answer.wall_s:>7.3f}  "
                     f"{_short(st.answer.text, cfg.show_chars)!r}")
    base, fin = outcome.base, outcome.final.answer
    lines += ["",
              f"base:        {base.forwards:>4} forwards  {base.wall_s:8.3f} s  ({base.meter.tokens_fed} tokens fed)",
              f"residual:    {fin.forwards:>4} forwards  {fin.wall_s:8.3f} s  ({fin.meter.tokens_fed} tokens fed)",
              f"speculative: {outcome.speculative_forwards:>4} forwards  {outcome.speculative_wall_s:8.3f} s",
              f"speedup:     {outcome.speedup_forwards:.2f}x forwards, {outcome.speedup_wall:.2f}x wall clock",
              f"stream answer == base answer: {'yes' if fin.token_ids == base.token_ids else 'no'}",
              "", "answer:", fin.text]
    if len(segs) < 2:
        lines.insert(0, "note: a single-segment request has nothing to stream (the grid excludes it)\n")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv):  # not a request to run
        print(__doc__)
        return 0
    try:
        text, cfg = parse_args(argv)
        import torch

        torch.set_num_threads(cfg.threads)
        model = model_config(cfg.model)
        rule = make_rule(cfg.acceptance, {"tau": cfg.tau})
        decoder = load_decoder(model, device=cfg.device, max_new_tokens=cfg.max_new_tokens)
        request = StreamRequest("try", (), tuple(segment(text)), model.system_prompt)
        print(f"model {model.name} ({model.family}, {cfg.device}), acceptance {rule_label(rule)}, "
              f"max_new_tokens {cfg.max_new_tokens}")
        outcome = run_pair(decoder, request, rule, base_first=cfg.base_first)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report(outcome, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
