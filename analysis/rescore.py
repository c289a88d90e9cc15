"""Re-score stored answers with today's scorers, without decoding anything.

    python -m analysis.rescore results/local                       # every benchmark in the directory
    python -m analysis.rescore results/local benchmarks=[mbpp,humaneval] workers=4
    python -m analysis.rescore results/local force=true            # also rows already at today's version

Every pairs row the grid scored (neither an error nor an exclusion) whose scorer version
(``pairs.scorer_version``, or its newest re-score's) differs from the benchmark's current
``scorer_version`` — or whose answers the sandbox could not run (status ``error``) — is scored again:
code in the same sandbox as the grid, ``workers`` sandboxes at once on this machine's CPUs (no model,
no Ray), F1 in process. Each re-scored shard becomes one ``ScoreRecord`` file,
``scores/<rescore_id>/<shard>-<run>.parquet``, written atomically; the pairs files are never touched.
A killed rescore loses at most the shard in progress: running it again skips every row already at the
current version. The analysis (``_cells.sql``) uses each row's newest re-score; the report lists the
re-scored rows (``rescored.csv``). Docs: docs/analysis.md, "Re-scoring".

A row is re-scored under the benchmark config it was decoded with (the run's resolved config,
``runs.config_yaml``; today's ``configs/benchmarks/<name>.yaml`` for rows without a run record), which
must give the settings the row recorded (``cell_settings``), with today's data at the row's data
version; a row where either differs is skipped with one warning naming why.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import os
import sys
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from tqdm import tqdm

from analysis.tables import ResultsNotFoundError, connect_keyed
from streamgen.benchmarks import Benchmark, Example, load_benchmark
from streamgen.benchmarks.base import score_columns
from streamgen.benchmarks.data_manifest import data_version, versioned
from streamgen.config import BenchmarkConfig, ConfigError, benchmark_config, load, resolve_data_dir
from streamgen.results.cells import config_settings, stable_hash
from streamgen.results.manifest import ManifestError
from streamgen.results.records import SCHEMA_VERSION, ScoreRecord, to_table, write_parquet_atomic
from streamgen.results.version import code_version

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RescoreConfig:
    """The command's ``key=value`` settings."""

    benchmarks: list[str] | None = None  # None: every benchmark in the directory
    workers: int = 0  # sandboxes at once; 0: this machine's CPU count
    force: bool = False  # also re-score rows already at the current scorer version


@dataclass
class RescoreSummary:
    rescore_id: str
    scored_rows: int = 0  # rows the grid scored, in the benchmarks asked for
    rescored: int = 0
    current: int = 0  # already at the current scorer version: skipped
    skipped: int = 0  # settings or data changed since decoding: not re-scored (warned)
    sandbox_errors: int = 0  # answers the sandbox still could not run (status error): rerun to retry
    files: list[Path] = field(default_factory=list)
    by_benchmark: dict[str, int] = field(default_factory=dict)


_ROWS_QUERY = """
SELECT run_id, shard_id, example_id, any_value(cell_fingerprint) AS cell_fingerprint,
       any_value(model) AS model, any_value(benchmark) AS benchmark,
       any_value(benchmark_version) AS benchmark_version, any_value(cell_settings) AS cell_settings,
       any_value(base_answer) AS base_answer, any_value(stream_answer) AS stream_answer,
       any_value(scorer_version) AS scorer_version, any_value(base_score_status) AS base_status,
       any_value(stream_score_status) AS stream_status,
       any_value(r.config_yaml) AS config_yaml
FROM pairs_keyed p LEFT JOIN runs r USING (run_id)
WHERE error_type IS NULL AND excluded_reason IS NULL {where}
GROUP BY run_id, shard_id, example_id
ORDER BY run_id, shard_id, example_id
"""
"""One row per stored scored pairs row (verbatim copies once), with its effective scorer version."""


def stored_rows(results_dir: str | Path, benchmarks: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The rows the grid scored, with their newest scorer version and the run's config text."""
    con = connect_keyed(results_dir)
    try:
        present = {r[0] for r in con.execute("SELECT DISTINCT benchmark FROM pairs_keyed").fetchall()}
        missing = sorted(set(benchmarks or ()) - present)
        if missing:
            raise ConfigError([f"benchmarks={list(benchmarks or ())}: {results_dir} holds no rows of {missing}; "
                               f"it holds {sorted(present)}"], "nothing to re-score")
        where, params = ("AND benchmark IN (SELECT unnest(?))", [list(benchmarks)]) if benchmarks else ("", [])
        cursor = con.execute(_ROWS_QUERY.format(where=where), params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()


class _Benchmarks:
    """Each (benchmark, run config) resolved once: its scorer and examples by id, or why not."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[Benchmark, dict[str, Example]] | str] = {}

    def get(self, row: dict[str, Any]) -> tuple[Benchmark, dict[str, Example]] | str:
        key = (row["benchmark"], row["config_yaml"] or "")
        if key not in self._cache:
            self._cache[key] = self._resolve(row)
        return self._cache[key]

    @staticmethod
    def _resolve(row: dict[str, Any]) -> tuple[Benchmark, dict[str, Example]] | str:
        run = OmegaConf.to_container(OmegaConf.create(row["config_yaml"] or "{}"))
        assert isinstance(run, dict)
        ran_in = Path(run["data_dir"]) if run.get("data_dir") else None
        data_dir = resolve_data_dir(ran_in if ran_in is not None and ran_in.is_dir() else None)
        recorded = (run.get("benchmarks") or {}).get(row["benchmark"])
        cfg = load(BenchmarkConfig, recorded) if recorded else versioned(benchmark_config(row["benchmark"]), data_dir)
        problem = settings_problem(cfg, row, data_dir)
        if problem:
            return problem
        benchmark = load_benchmark(cfg)
        return benchmark, {e.example_id: e for e in benchmark.examples(data_dir)}


def settings_problem(cfg: BenchmarkConfig, row: dict[str, Any], data_dir: Path) -> str | None:
    """Why ``cfg`` is not the benchmark the row was decoded with, or today's data is not the row's
    data version (None when all agree)."""
    today = data_version(dataclasses.replace(cfg, version=benchmark_config(cfg.name).version), data_dir)
    if today != row["benchmark_version"]:
        return f"data version {row['benchmark_version']!r} at decoding, {today!r} now"
    if row["cell_settings"] is None:
        return None  # rows before fingerprints recorded no settings: today's config, as the analysis reads them
    recorded = {k: v for k, v in json.loads(row["cell_settings"]).items() if k.startswith("benchmark.")}
    now = config_settings("benchmark", cfg)
    differ = sorted(k for k in recorded.keys() | now.keys() if recorded.get(k, "<absent>") != now.get(k, "<absent>"))
    return f"settings changed since decoding: {', '.join(differ)}" if differ else None


def needs_rescore(row: dict[str, Any], current_version: str, force: bool) -> bool:
    """Force, a scorer version other than today's, or an answer the sandbox could not run."""
    return force or row["scorer_version"] != current_version or "error" in (row["base_status"], row["stream_status"])


def new_rescore_id() -> str:
    """UTC start time to the microsecond, then random hex: later rescores sort after earlier ones."""
    return f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S.%fZ}-{uuid.uuid4().hex[:6]}"


def rescore(results_dir: str | Path, cfg: RescoreConfig = RescoreConfig(), *,
            progress: bool | None = None) -> RescoreSummary:
    """Re-score what needs it (module docstring); returns the counts and the files written."""
    root, summary = Path(results_dir), RescoreSummary(new_rescore_id())
    rows, benches = stored_rows(root, cfg.benchmarks), _Benchmarks()
    summary.scored_rows = len(rows)
    todo: dict[tuple[str, str], list[tuple[dict[str, Any], Benchmark, Example]]] = defaultdict(list)
    warned: set[str] = set()
    for row in rows:
        resolved = benches.get(row)
        if isinstance(resolved, str) or row["example_id"] not in resolved[1]:
            why = resolved if isinstance(resolved, str) else f"example {row['example_id']} not in today's data"
            summary.skipped += 1
            if why not in warned:
                warned.add(why)
                log.warning("%s (run %s): not re-scored: %s", row["benchmark"], row["run_id"], why)
            continue
        benchmark, examples = resolved
        if needs_rescore(row, benchmark.scorer_version, cfg.force):
            todo[(row["run_id"], row["shard_id"])].append((row, benchmark, examples[row["example_id"]]))
        else:
            summary.current += 1
    _score_shards(root, todo, summary, workers=cfg.workers or os.cpu_count() or 1, progress=progress)
    return summary


def _score_shards(root: Path, todo: dict[tuple[str, str], list[tuple[dict[str, Any], Benchmark, Example]]],
                  summary: RescoreSummary, *, workers: int, progress: bool | None) -> None:
    total = sum(len(v) for v in todo.values())
    enabled = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(total=total, unit="row", desc="rescore", file=sys.stderr, disable=not enabled, dynamic_ncols=True)
    version = code_version()
    try:
        for (run_id, shard_id), items in todo.items():
            records = _score_items(summary.rescore_id, items, version, workers)
            path = root / "scores" / summary.rescore_id / f"{shard_id}-{stable_hash(run_id, 8)}.parquet"
            summary.files.append(write_parquet_atomic(to_table(records, ScoreRecord), path))
            summary.rescored += len(records)
            summary.sandbox_errors += sum((r.base_score_status == "error") + (r.stream_score_status == "error")
                                          for r in records)
            bench = items[0][0]["benchmark"]
            summary.by_benchmark[bench] = summary.by_benchmark.get(bench, 0) + len(records)
            bar.update(len(records))
            if bar.disable:
                log.info("rescore: %d/%d rows (shard %s of run %s)", summary.rescored, total, shard_id, run_id)
    finally:
        bar.close()


def _score_items(rescore_id: str, items: list[tuple[dict[str, Any], Benchmark, Example]], version: str,
                 workers: int) -> list[ScoreRecord]:
    """Both answers of every row of one shard (one benchmark), scored in one batch."""
    benchmark = items[0][1]
    examples = [ex for _, _, ex in items for _ in (0, 1)]
    answers = [a for row, _, _ in items for a in (row["base_answer"] or "", row["stream_answer"] or "")]
    scores = benchmark.score_many(examples, answers, workers=workers)
    return [ScoreRecord(
        rescore_id=rescore_id, run_id=row["run_id"], shard_id=row["shard_id"], example_id=row["example_id"],
        cell_fingerprint=row["cell_fingerprint"], model=row["model"], benchmark=row["benchmark"],
        code_version=version, schema_version=SCHEMA_VERSION,
        **score_columns(scores[2 * i], scores[2 * i + 1], benchmark.scorer_version),
    ) for i, (row, _, _) in enumerate(items)]


def parse_config(overrides: Sequence[str]) -> RescoreConfig:
    return load(RescoreConfig, overrides=overrides)


def summary_line(s: RescoreSummary) -> str:
    per = ", ".join(f"{b} {n}" for b, n in sorted(s.by_benchmark.items())) or "none"
    return (f"rescore {s.rescore_id}: {s.rescored} of {s.scored_rows} scored rows re-scored ({per}); "
            f"{s.current} already at the current scorer version; {s.skipped} skipped (settings changed); "
            f"{s.sandbox_errors} answers the sandbox could not run")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.rescore", description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("settings", nargs="*", metavar="KEY=VALUE", help="benchmarks=[a,b] workers=N force=true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        summary = rescore(args.results_dir, parse_config(args.settings))
    except (ConfigError, ResultsNotFoundError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary_line(summary))
    if summary.sandbox_errors:
        print("some answers could not be run by the sandbox: run the same command again to retry them",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
