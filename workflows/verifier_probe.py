"""Paper §6.5's probe as a table: every verifier of each model scores, under the complete request, the
model's own base answer, another example's (rotated: unrelated) and random tokens of the same length;
median probability and accepted share under greedy and every τ (``streamgen/diagnostics/probe_drafts.py``).

Local (in this process; SmolLM2 + tiny LLaDA/Dream on HumanEval and CoEdIT, 40 examples each)::

    python workflows/verifier_probe.py
    python workflows/verifier_probe.py models=[tiny-llada,tiny-dream] limit=8 results_dir=/tmp/probe
    python workflows/verifier_probe.py reuse=results/local        # the base answers of a grid run, not decoded again
    python workflows/verifier_probe.py --dry-run                  # validate, print what is on disk and what would run

Arguments are ``key=value`` fields of ``streamgen.diagnostics.probe_drafts.ProbeConfig``. Each (model, benchmark) is one
Parquet file under ``<results_dir>/probe/`` named by its settings; a rerun keeps the files it finds
(shared work: delete one to redo it). The table: ``<results_dir>/probe.md`` (``python -m analysis.probe_report
DIR`` rebuilds it). On a GPU: ``device=cuda``. No cluster mode: a probe is a base run and three verify
forwards per example and verifier.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages first

from streamgen.config import ConfigError, load, model_config, raise_if_problems  # noqa: E402
from streamgen.diagnostics.probe_drafts import ProbeConfig, probe_cell, validate_probe  # noqa: E402

log = logging.getLogger("probe")


def cell_file(cfg: ProbeConfig, model: str, benchmark: str) -> Path:
    """The (model, benchmark) file, named by every setting that changes its records."""
    key = f"{cfg.limit}|{cfg.max_new_tokens}|{cfg.seed}|{sorted(cfg.taus)}|{cfg.reuse}"
    tag = hashlib.sha256(key.encode()).hexdigest()[:10]
    return Path(cfg.results_dir) / "probe" / f"{model}__{benchmark}__{tag}.parquet"


def name_problems(cfg: ProbeConfig) -> list[str]:
    """What is wrong with the models and benchmarks named (each must exist and validate)."""
    from streamgen.config import benchmark_config, validate_benchmark, validate_model

    problems: list[str] = []
    for name in cfg.models:
        try:
            problems += validate_model(model_config(name))
        except ConfigError as exc:
            problems += exc.problems
    for name in cfg.benchmarks:
        try:
            problems += validate_benchmark(benchmark_config(name))
        except ConfigError as exc:
            problems += exc.problems
    return problems


def plan_text(cfg: ProbeConfig) -> str:
    """--dry-run: the (model × benchmark) cells, those already on disk, what a run would decode."""
    cells = [(m, b) for m in cfg.models for b in cfg.benchmarks]
    done = [c for c in cells if cell_file(cfg, *c).exists()]
    source = f"reused from {cfg.reuse}" if cfg.reuse else "decoded here (one base run each)"
    return (f"dry run of grid probe: {len(cells)} cells (model × benchmark), {len(done)} already complete "
            f"under {cfg.results_dir}/probe; {cfg.limit} examples each, base answers {source}, then one verify "
            "forward per draft (own, unrelated, random) and verifier; no estimate (nothing timed yet)")


def run(cfg: ProbeConfig) -> None:
    """Every (model, benchmark) not on disk yet: load each model once, probe, write its file."""
    import torch
    from tqdm import tqdm

    from streamgen.families.registry import load_decoder
    from streamgen.results.records import ProbeRecord, to_table, write_parquet_atomic
    from streamgen.results.version import code_version

    torch.set_num_threads(cfg.threads)
    probe_id = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    for model in cfg.models:
        todo = [b for b in cfg.benchmarks if not cell_file(cfg, model, b).exists()]
        if not todo:
            log.info("%s: every benchmark's probe is on disk already", model)
            continue
        decoder = load_decoder(model_config(model), device=cfg.device, max_new_tokens=cfg.max_new_tokens)
        for bench in todo:
            bar = tqdm(total=cfg.limit, desc=f"{model} · {bench} base answers", unit="ex", mininterval=30)
            records = probe_cell(decoder.for_benchmark(bench), cfg, model, bench, probe_id=probe_id,
                                 code_version=code_version(), on_example=bar.update)
            bar.close()
            write_parquet_atomic(to_table(records, ProbeRecord), cell_file(cfg, model, bench))


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("streamgen").setLevel(logging.WARNING)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    from analysis import write_probe_report

    try:
        cfg = load(ProbeConfig, overrides=[a for a in argv if a != "--dry-run"])
        raise_if_problems(validate_probe(cfg) + name_problems(cfg), "invalid probe settings")
        if "--dry-run" in argv:
            print(plan_text(cfg))
            return 0
        run(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(write_probe_report(cfg.results_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
