"""Paper §6.5's probe, for every family: what a verifier says about drafts it should and should not keep.

Under the complete request of each example, every verifier of the model (causal for the autoregressive
family and ReFusion; ``visible`` and ``hidden`` for LLaDA/Dream and DiffusionGemma) scores three drafts
in one verify forward each:

- ``own``: the model's own base answer (greedy: what a kept draft would be at best);
- ``unrelated``: the next example's base answer (rotated: example i gets example i+1's), so it answers
  another request — the study's Byzantine Empire offered for a Python exercise;
- ``random``: as many tokens as ``own``, drawn from the tokenizer's ordinary tokens, seeded per example.

Each verdict is kept under greedy and every τ (one forward serves them all) as a
:class:`~streamgen.results.records.ProbeRecord`: median probability of the draft's tokens and the accepted
leading run. Base answers are shared work: decoded once per (model, benchmark, example) — the own draft of
one example is the unrelated draft of the previous one — or reused from a results directory's pairs
(:func:`reused_answers`). ``analysis/probe_report.py`` turns the records into the report table.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from streamgen.acceptance_rules import AcceptanceRule, column_param, make_rule
from streamgen.config import VERIFIER_MODE_FAMILIES, ConfigError, check_tau
from streamgen.decoding.verification import Verification, accepted_length
from streamgen.requests.chat import Message
from streamgen.results.records import SCHEMA_VERSION, ProbeRecord
from streamgen.results.result_files import readable_files

log = logging.getLogger(__name__)

DRAFT_KINDS = ("own", "unrelated", "random")


@dataclass(frozen=True)
class ProbeConfig:
    """``workflows/verifier_probe.py``'s settings (``key=value`` on its command line; unknown keys are errors)."""

    models: list[str] = field(default_factory=lambda: ["smollm2", "tiny-llada", "tiny-dream"])
    benchmarks: list[str] = field(default_factory=lambda: ["humaneval", "coedit"])
    limit: int = 40  # the first examples of each benchmark
    taus: list[float] = field(default_factory=lambda: [0.5, 0.9])  # besides greedy
    max_new_tokens: int = 192  # the answer budget of the base runs (the default grid's)
    seed: int = 0  # of the random drafts
    results_dir: str = "results/probe"
    reuse: str | None = None  # a grid's results directory whose base answers to reuse (same budget)
    device: str = "cpu"
    threads: int = 1  # torch threads on the CPU (more oversubscribe a shared 2-core machine)


def validate_probe(cfg: ProbeConfig) -> list[str]:
    """Every problem of ``cfg``, each naming the fix (the models and benchmarks are checked on load)."""
    p = [q for tau in cfg.taus for q in check_tau(tau, "taus")]
    if cfg.limit < 2:
        p.append(f"limit={cfg.limit}: the unrelated draft is another example's answer, so limit must be ≥ 2")
    if cfg.threads < 1:
        p.append(f"threads={cfg.threads} must be ≥ 1 (torch threads on the CPU)")
    if cfg.max_new_tokens < 1:
        p.append(f"max_new_tokens={cfg.max_new_tokens} must be ≥ 1")
    if not cfg.models or not cfg.benchmarks:
        p.append("models and benchmarks must each name at least one (e.g. models=[smollm2] benchmarks=[coedit])")
    if cfg.reuse is not None and not Path(cfg.reuse).is_dir():
        p.append(f"reuse={cfg.reuse}: no such results directory (omit reuse= to decode the base answers here)")
    return p


@dataclass(frozen=True)
class ProbeExample:
    """One example under its complete request, with the model's base answer (EOS included if it ended)."""

    example_id: str
    messages: tuple[Message, ...]
    own: tuple[int, ...]


def rules(taus: Sequence[float]) -> list[AcceptanceRule]:
    """Greedy, then a threshold rule per τ."""
    return [make_rule("greedy"), *(make_rule("threshold", {"tau": t}) for t in taus)]


def verifiers(decoder: Any) -> tuple[str, ...]:
    """The verifier modes of a decoder's family: ``visible`` and ``hidden`` where the family has them."""
    return ("visible", "hidden") if decoder.family in VERIFIER_MODE_FAMILIES else ("causal",)


def text_tokenizer(decoder: Any) -> Any:
    """The tokenizer a decoder renders with (a diffusion decoder's autoregressive ``text`` carries it)."""
    return getattr(decoder, "text", decoder).tokenizer


def token_pool(decoder: Any) -> list[int]:
    """Ordinary tokens for random drafts: the tokenizer's ids minus its special ids, EOS ids and the mask."""
    tok = text_tokenizer(decoder)
    skip = set(getattr(tok, "all_special_ids", ()) or ()) | set(_eos_ids(decoder))
    skip.add(int(getattr(decoder, "mask_id", -1)))
    return [i for i in range(len(tok)) if i not in skip]


def _eos_ids(decoder: Any) -> frozenset[int]:
    return frozenset(getattr(decoder, "eos_ids", None) or decoder.eos_token_ids)


def drafts(examples: Sequence[ProbeExample], i: int, pool: Sequence[int], seed: int) -> dict[str, list[int]]:
    """The three drafts of example ``i``: its own answer, example ``i+1``'s (rotated), random tokens."""
    own = list(examples[i].own)
    rng = random.Random(f"{seed}:{examples[i].example_id}")  # a str seed: stable across processes
    return {"own": own, "unrelated": list(examples[(i + 1) % len(examples)].own),
            "random": [pool[rng.randrange(len(pool))] for _ in own]}


def verify(decoder: Any, messages: Sequence[Message], draft: Sequence[int], verifier: str) -> Verification:
    """ONE verify forward of ``decoder`` over the complete request + ``draft`` (cut as the stream cuts it)."""
    args: tuple[Any, ...] = (list(messages), draft) if verifier == "causal" else (list(messages), draft, verifier)
    return decoder.score(*args)[0]


def probe_example(decoder: Any, examples: Sequence[ProbeExample], i: int, rule_list: Sequence[AcceptanceRule],
                  *, pool: Sequence[int], seed: int, columns: dict[str, Any]) -> Iterator[ProbeRecord]:
    """Every (draft kind, verifier, rule) record of example ``i``: one verify forward per (kind, verifier)."""
    ex = examples[i]
    for kind, draft in drafts(examples, i, pool, seed).items():
        content = decoder.content(draft)
        if not content:
            continue  # an empty base answer: nothing to score (never seen: an answer holds at least its EOS)
        for verifier in verifiers(decoder):
            verification = verify(decoder, ex.messages, content, verifier)
            for rule in rule_list:
                yield ProbeRecord(**columns, example_id=ex.example_id, draft_kind=kind, verifier=verifier,
                                  acceptance=rule.name, tau=column_param(rule, "tau"), draft_tokens=len(content),
                                  accepted_tokens=accepted_length(content, verification, rule),
                                  median_prob=verification.median_prob, seed=seed, schema_version=SCHEMA_VERSION)


def reused_answers(results_dir: str | Path, model: str, benchmark: str, max_new_tokens: int,
                   decoder: Any) -> dict[str, tuple[int, ...]]:
    """Base answers of ``model`` on ``benchmark`` in a grid's results (rows without error, run at the same
    budget), as token ids: the stored text tokenised again, plus EOS where the base run ended (its token
    count exceeds the text's). A re-tokenisation can split text differently from the decode; the probe's
    records say ``base_source = 'reused'``."""
    tok, eos = text_tokenizer(decoder), min(_eos_ids(decoder))
    out: dict[str, tuple[int, ...]] = {}
    cols = ["model", "benchmark", "example_id", "error_type", "base_answer", "base_answer_tokens", "cell_settings"]
    for path in readable_files(results_dir, "pairs").files:
        table = pq.read_table(path)
        for row in table.select([c for c in cols if c in table.column_names]).to_pylist():
            if (row["model"], row["benchmark"]) != (model, benchmark) or row.get("error_type") is not None:
                continue
            settings = json.loads(row.get("cell_settings") or "{}")
            if settings.get("max_new_tokens") != max_new_tokens or row["base_answer"] is None:
                continue
            ids = tok(row["base_answer"], add_special_tokens=False)["input_ids"]
            ended = (row["base_answer_tokens"] or 0) > len(ids)
            out.setdefault(row["example_id"], tuple([*ids, eos] if ended else ids))
    return out


def require_answers(found: dict[str, tuple[int, ...]], wanted: Sequence[str], where: str) -> None:
    """A ConfigError when a reused results directory lacks some of the examples' base answers."""
    missing = [e for e in wanted if e not in found]
    if missing:
        raise ConfigError([f"{where}: no base answer for {len(missing)} of {len(wanted)} examples "
                           f"(first: {missing[0]}): omit reuse= to decode them, or run that grid with this "
                           "limit and max_new_tokens first"])


def examples_with_answers(decoder: Any, cfg: ProbeConfig, model: str, benchmark: str,
                          on_example: Any = None) -> tuple[list[ProbeExample], str]:
    """The first ``cfg.limit`` examples of ``benchmark`` with ``model``'s base answers: reused from
    ``cfg.reuse`` when given, else decoded here (one base run each). Returns them and their source."""
    from streamgen.benchmarks import load_benchmark
    from streamgen.config import benchmark_config, model_config
    from streamgen.results.cells import effective_system_prompt

    model_prompt = model_config(model).system_prompt
    items = load_benchmark(benchmark_config(benchmark)).examples(limit=cfg.limit)
    found: dict[str, tuple[int, ...]] = {}
    if cfg.reuse is not None:
        found = reused_answers(cfg.reuse, model, benchmark, cfg.max_new_tokens, decoder)
        require_answers(found, [ex.example_id for ex in items], f"reuse={cfg.reuse} ({model} on {benchmark})")
    out = []
    for ex in items:
        system = effective_system_prompt(model_prompt, ex.system_prompt)
        messages = tuple([{"role": "system", "content": system}] if system else []) + tuple(ex.history) + (
            {"role": "user", "content": ex.request},)
        own = found[ex.example_id] if found else tuple(decoder.generate(list(messages)).token_ids)
        out.append(ProbeExample(ex.example_id, messages, own))
        if on_example is not None:
            on_example()
    return out, "reused" if found else "decoded"


def probe_cell(decoder: Any, cfg: ProbeConfig, model: str, benchmark: str, *, probe_id: str,
               code_version: str, on_example: Any = None) -> list[ProbeRecord]:
    """Every record of one (model, benchmark): base answers once, then each example's three drafts."""
    examples, source = examples_with_answers(decoder, cfg, model, benchmark, on_example)
    columns = {"probe_id": probe_id, "model": model, "family": decoder.family, "benchmark": benchmark,
               "base_source": source, "max_new_tokens": cfg.max_new_tokens, "code_version": code_version}
    pool, rule_list = token_pool(decoder), rules(cfg.taus)
    out: list[ProbeRecord] = []
    for i in range(len(examples)):
        out.extend(probe_example(decoder, examples, i, rule_list, pool=pool, seed=cfg.seed, columns=columns))
    log.info("probe %s on %s: %d examples (%s base answers), %d records", model, benchmark, len(examples),
             source, len(out))
    return out
