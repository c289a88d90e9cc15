"""The report over a results directory: ``RESULTS_DIR/report/`` with report.md, CSVs and PNGs.

    python -m analysis.report results/local                       # report + main tables on stdout
    python -m analysis.report results/local --compare results/old # adds B − A deltas (B = --compare)
    python -m analysis.report results/local --latest              # per cell, only the newest run's settings

Python: ``write_report(results_dir, compare_dir=None) -> Report``; ``summary_text(results_dir)``
(the main tables as markdown); ``print_summary(results_dir)`` writes that text to stdout (the grid
calls it at the end of a run) and returns it. Definitions of every statistic: docs/analysis.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.csv as pacsv

from analysis import figures, timing_figures
from analysis.population import build_population, population_section
from analysis.render import Column, fmt, markdown, row_label, with_labels
from analysis.sql_template import declared_columns
from analysis.tables import TABLES, ResultsNotFoundError, build_tables, compare_tables
from analysis.timing import build_typing, typing_section, typing_settings
from streamgen.config import ConfigError, TypingConfig

log = logging.getLogger(__name__)

KEY_COLS = [Column("setting", "Model · setting"), Column("row", "Benchmark")]
TABLE1 = [
    *KEY_COLS,
    Column("n_total", "n", "num"),
    Column("n_included", "incl.", "num"),
    Column("n_excluded", "excl.", "num"),
    Column("n_error", "err.", "num"),
    Column("base_quality_pct", "Quality base (%)", "pct"),
    Column("stream_quality_pct", "stream (%)", "pct"),
    Column("median_base_forwards", "Fwd after final: base", "num"),
    Column("median_residual_forwards", "stream", "num"),
    Column("mean_speedup_forwards", "Speedup fwd: mean", "x"),
    Column("median_speedup_forwards", "median", "x"),
    Column("mean_speedup_wall", "Speedup wall: mean", "x"),
    Column("median_speedup_wall", "median", "x"),
]


def table1() -> list[Column]:
    """Table 1's columns: ``TABLE1`` and then every per-pair column ``PairRecord`` declares for the
    report (``streamgen.results.records.reported``; cells.sql aggregates it under its name)."""
    return [*TABLE1, *(Column(spec.name, spec.label, spec.kind) for _, spec in declared_columns())]


TABLE2 = [
    *KEY_COLS,
    Column("n_included", "n", "num"),
    *[c for c in TABLE1 if c.name.endswith(("_pct", "speedup_forwards", "speedup_wall"))],
]
GAIN = [
    *KEY_COLS,
    Column("n_included", "n", "num"),
    Column("share_below_1x", "< 1×", "share"),
    Column("share_below_0_9x", "< 0.9×", "share"),
    Column("share_below_0_8x", "< 0.8×", "share"),
    Column("share_below_1x_wall", "< 1× wall", "share"),
    Column("median_speedup_losers", "median of losers (×)", "x"),
    Column("share_one_forward", "1 residual fwd", "share"),
    Column("share_at_floor", "at floor", "share"),
]
KEPT = [
    *KEY_COLS,
    Column("share_keep_none", "keep none", "share"),
    Column("share_keep_all", "keep all", "share"),
    Column("share_keep_part", "keep part", "share"),
    Column("share_no_draft", "no draft", "share"),
    Column("share_first_draft", "answer = first draft", "share"),
]
LIMIT = [
    *KEY_COLS,
    Column("median_attainable", "attainable limit (median ×)", "x"),
    Column("median_achieved", "share achieved (median)", "share"),
    Column("mean_overhead", "overhead: mean ×", "x"),
    Column("median_overhead", "median ×", "x"),
    Column("share_forwards_removed", "forwards removed (Σ)", "share"),
]
EXCLUSIONS = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("kind", "Kind"),
    Column("reason", "Reason"),
    Column("n", "n", "num"),
]
RESCORED = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("scorer_version_before", "Scorer at decoding"),
    Column("scorer_version", "Scorer now"),
    Column("n_rescored", "Re-scored", "num"),
    Column("n_changed", "Quality changed", "num"),
    Column("examples_changed", "Examples changed"),
]
ADAPT = [
    Column("setting", "Model · variant"),
    Column("row", "Benchmark"),
    Column("n_before", "n before", "num"),
    Column("n_after", "n after", "num"),
    Column("quality_before_pct", "quality before (%)", "pct"),
    Column("quality_after_pct", "after (%)", "pct"),
    Column("median_speedup_before", "median speedup before", "x"),
    Column("median_speedup_after", "after", "x"),
    Column("mean_speedup_before", "mean before", "x"),
    Column("mean_speedup_after", "after", "x"),
    Column("accept_ratio_before", "accept ratio before", "share"),
    Column("accept_ratio_after", "after", "share"),
    Column("preserved_share_before", "draft preserved before", "share"),
    Column("preserved_share_after", "after", "share"),
    Column("one_forward_share_before", "1 residual fwd before", "share"),
    Column("one_forward_share_after", "after", "share"),
]
ADAPT_CI = [
    Column("setting", "Model · variant"),
    Column("bench", "Benchmark"),
    Column("n_shown", "n paired"),
    Column("metric", "Metric"),
    Column("plain", "plain"),
    Column("adapted", "adapted"),
    Column("diff", "Δ (adapted − plain)"),
    Column("interval", "95 % interval of Δ"),
]
ADAPT_CI_METRICS = (  # adaptation_ci's column prefix, label, format (wall shown in ms)
    ("preserved_share", "draft preserved", "share"),
    ("kept_whole_share", "kept whole draft", "share"),
    ("one_forward_share", "1 residual fwd", "share"),
    ("mean_residual_forwards", "mean residual fwd", "x"),
    ("mean_residual_wall_s", "mean residual wall (ms)", "ms"),
    ("median_speedup_forwards", "median speedup fwd", "x"),
    ("median_speedup_wall", "median speedup wall", "x"),
    ("stream_quality_pct", "stream quality (%)", "pct"),
)
ATTAIN = [
    *KEY_COLS,
    Column("n_included", "n", "num"),
    Column("median_speedup_forwards", "median speedup", "x"),
    Column("median_attainable", "median attainable", "x"),
    Column("share_of_medians", "share (ratio of medians)", "share"),
    Column("median_achieved", "share (per-example median)", "share"),
]
CROSS = [
    *KEY_COLS,
    Column("speed", "Speed"),
    Column("answer", "Answer"),
    Column("n", "n", "num"),
    Column("share", "share", "share"),
    Column("n_quality_changed", "quality changed", "num"),
    Column("n_quality_up", "up", "num"),
    Column("n_quality_down", "down", "num"),
    Column("mean_quality_delta", "mean Δ quality", "x"),
]
STABLE = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("n_examples", "n", "num"),
    Column("n_steps_compared", "steps compared", "num"),
    Column("share_steps_unchanged", "draft unchanged from previous step", "share"),
    Column("share_final_unchanged", "final answer = previous draft", "share"),
]
DIVERGENCE = [
    Column("setting", "Model · setting"),
    Column("dtype", "dtype"),
    Column("benchmark", "Benchmark"),
    Column("n", "n", "num"),
    Column("equality_rate", "stream = base", "share"),
    Column("diverged", "diverged", "num"),
    Column("margin_p50", "margin p50 (sp)", "num"),
    Column("near_tie_le1", "≤ 1 sp", "share"),
    Column("near_tie_le4", "≤ 4 sp", "share"),
    Column("draft_branch_share", "draft branch", "share"),
    Column("draft_after_mean", "draft tokens after", "num"),
    Column("dq_mean", "Δq diverged", "x"),
    Column("dq_lo", "95 % lo", "x"),
    Column("dq_hi", "95 % hi", "x"),
    Column("dq_all", "Δq all", "x"),
    Column("accepted_mean", "accepted", "num"),
    Column("residual_fwd_mean", "residual fwd", "num"),
]

BY_MODEL = [
    Column("setting", "Model · setting"),
    Column("n", "n", "num"),
    Column("n_benchmarks", "benchmarks", "num"),
    Column("median_speedup_forwards", "median ×", "x"),
    Column("mean_speedup_forwards", "mean ×", "x"),
    Column("min_speedup_forwards", "min ×", "x"),
    Column("max_speedup_forwards", "max ×", "x"),
    Column("share_below_1x", "< 1×", "share"),
]
PRINTS = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("cell_fingerprint", "Fingerprint"),
    Column("kept", "used"),
    Column("n_rows", "rows", "num"),
    Column("n_examples", "examples", "num"),
    Column("n_duplicates", "duplicates", "num"),
    Column("n_runs", "runs", "num"),
    Column("last_run", "last run"),
]
SWEEP = [
    Column("setting", "Model · setting"),
    Column("row", "Benchmark"),
    Column("n_included", "n", "num"),
    Column("stream_quality_pct", "stream quality (%)", "pct"),
    Column("quality_delta_pct", "Δ vs base", "pct"),
    Column("median_speedup_forwards", "median speedup fwd", "x"),
    Column("mean_speedup_forwards", "mean", "x"),
    Column("median_speedup_wall", "median wall", "x"),
]
STEPS = [
    Column("setting", "Model · setting"),
    Column("benchmark", "Benchmark"),
    Column("n_examples", "n", "num"),
    Column("mean_steps", "steps / request", "x"),
    Column("mean_speculative_forwards", "speculative fwd / request", "x"),
    Column("accept_ratio_all", "accepted / draft (all steps)", "share"),
    Column("accept_ratio_final", "(final step)", "share"),
    Column("n_residual_mismatch", "residual mismatch", "num"),
]
RUNS = [
    Column("run_id", "Run"),
    Column("grid", "Grid"),
    Column("code_version", "Code"),
    Column("host", "Host"),
    Column("started_at", "Started"),
    Column("finished_at", "Finished"),
    Column("status", "Status"),
    Column("shards_done", "shards done", "num"),
    Column("shards_skipped", "skipped", "num"),
    Column("shards_total", "total", "num"),
    Column("forwards_executed", "model calls executed", "num"),
]
COMPARE = [
    Column("setting", "Model · setting"),
    Column("row", "Benchmark"),
    *[
        Column(f"{name}_{side}", f"{head} {side.upper() if side != 'delta' else 'Δ'}", kind)
        for name, head, kind in (
            ("stream_quality_pct", "quality", "pct"),
            ("median_speedup_forwards", "median fwd", "x"),
            ("median_speedup_wall", "median wall", "x"),
        )
        for side in ("a", "b", "delta")
    ],
]


@dataclass(frozen=True)
class Report:
    """What ``write_report`` wrote."""

    markdown_path: Path
    csv_paths: tuple[Path, ...]
    figure_paths: tuple[Path, ...]
    summary: str  # the main tables (markdown)
    comparison: str | None  # the side-by-side table when a second run was given


def _rows(table: pa.Table, **where: object) -> list[dict]:
    rows = table.to_pylist()
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def main_tables(tables: dict[str, pa.Table]) -> str:
    """Table 2 (benchmark rows, macro average, pooled) and the pooled/macro gain summary."""
    gain = [r for r in tables["distribution"].to_pylist() if r["scope"] != "benchmark"]
    return (
        "### Quality and residual speedup (Table 2 layout)\n\n"
        + markdown(tables["models"], TABLE2, blank_repeats="setting")
        + "\n### Distribution of the gain (macro and pooled)\n\n"
        + markdown(gain, GAIN, blank_repeats="setting")
    )


def summary_text(results_dir: str | Path, *, threads: int | None = None) -> str:
    """The main tables of a results directory as markdown text."""
    return main_tables(build_tables(results_dir, ["models", "distribution"], threads=threads))


def print_summary(results_dir: str | Path, *, file: TextIO | None = None) -> str:
    """Write the main tables to ``file`` (default stdout) and return them; used by the grid.

    A directory without pairs files gives a one-line note instead of an exception, so that the end
    of a grid whose shards all failed still reports what happened.
    """
    try:
        text = summary_text(results_dir)
    except ResultsNotFoundError as exc:
        text = f"no tables: {exc}"
    print(text, file=file or sys.stdout)
    return text


def fingerprint_note(fingerprints: pa.Table) -> str | None:
    """The note at the top of the report when a cell name has several fingerprints, rows were written
    twice, or --latest dropped fingerprints; None when every cell has one meaning and no duplicates."""
    rows = fingerprints.to_pylist()
    split = sorted({r["setting"] + " / " + str(r["benchmark"]) for r in with_labels(rows)
                    if r["n_fingerprints"] > 1 and r["kept"]})
    dropped = [r for r in rows if not r["kept"]]
    duplicates = sum(r["n_duplicates"] for r in rows if r["kept"])
    if not (split or dropped or duplicates):
        return None
    lines = ["## Cells with several settings in this directory\n"]
    if split:
        lines.append(f"{len(split)} cell(s) appear under several fingerprints (different settings); each "
                     "is shown as its own row, labelled [by the settings that differ]. Pass `--latest` to "
                     "keep only the most recent run's. Cells: " + "; ".join(split) + ".")
    if dropped:
        lines.append(f"`--latest`: {len(dropped)} older fingerprint(s) left out "
                     f"({sum(r['n_rows'] for r in dropped)} rows).")
    if duplicates:
        lines.append(f"{duplicates} row(s) repeat a (cell, example) already written by another run: each "
                     "(cell, example) is counted once, from its most recent run.")
    used = [r for r in rows if r["kept"] or r["n_fingerprints"] > 1]
    return "\n\n".join(lines) + "\n\n" + markdown(used, PRINTS)


def _scorer_split(cells: pa.Table) -> list[str]:
    """The cells counted under several scorer versions (their rows' tags carry ``scorer <version>``)."""
    return sorted({r["setting"] for r in with_labels(cells.to_pylist()) if "scorer " in (r["settings_tag"] or "")})


def rescored_section(tables: dict[str, pa.Table]) -> str:
    """Which counted rows carry scores from ``python -m analysis.rescore``, and the cells whose rows
    mix scorer versions (shown as separate rows until a rescore brings them to one version)."""
    text = ("## Re-scored rows\n\nRows whose qualities come from `python -m analysis.rescore` (the newest "
            "re-score of each row) instead of the grid's own scoring.\n\n" + markdown(tables["rescored"], RESCORED))
    split = _scorer_split(tables["cells"])
    if split:
        text += (f"\n{len(split)} setting(s) hold rows scored by different scorer versions; each version is "
                 "its own row, tagged `scorer <version>` (run `python -m analysis.rescore DIR` to bring "
                 "them to the current scorers): " + "; ".join(split) + ".\n")
    return text


def _ci_text(value: float | None, kind: str) -> str:
    """One adaptation_ci value as the report shows it (``ms``: seconds shown in milliseconds)."""
    if kind == "ms":
        return fmt(None if value is None else 1000 * value, "num")
    return fmt(value, kind)


def adaptation_ci_rows(table: pa.Table) -> list[dict]:
    """``adaptation_ci`` in long form for the report: one row per (cell, metric) with the plain and
    adapted values, their difference and its bootstrap interval as text (the cell's keys kept)."""
    out = []
    for r in table.to_pylist():
        for k, (prefix, label, kind) in enumerate(ADAPT_CI_METRICS):
            v = {side: _ci_text(r[f"{prefix}_{side}"], kind) for side in ("plain", "adapted", "diff", "lo", "hi")}
            first = k == 0  # the cell's benchmark and n once, on its first metric
            out.append({**r, "bench": row_label(r) if first else "", "n_shown": fmt(r["n"], "num") if first else "",
                        "metric": label, "plain": v["plain"], "adapted": v["adapted"], "diff": v["diff"],
                        "interval": f"[{v['lo']}, {v['hi']}]"})
    return out


def _sections(tables: dict[str, pa.Table], compare: pa.Table | None, compare_dir: Path | None) -> list[str]:
    cells = _rows(tables["cells"], scope="benchmark")
    dist = tables["distribution"]
    note = fingerprint_note(tables["fingerprints"])
    out = [
        *([note] if note else []),
        "## Runs\n\n" + markdown(tables["run_list"], RUNS),
        "## Table 1 — quality and residual cost per cell\n\nQuality in percent; forwards after the final "
        "token are medians; speedups are per-request base / residual, summarised by mean and median. "
        "Only included requests enter a statistic; the count columns say how many rows were excluded or "
        "errors.\n\n" + markdown(cells, table1(), blank_repeats="setting"),
        "## Table 2 — per model, with macro average and pooled\n\n`average (macro)` is the mean of the "
        "benchmarks' statistics; `pooled` is the statistic over all included requests of that setting.\n\n"
        + markdown(tables["models"], TABLE2, blank_repeats="setting"),
        "## Distribution of the gain\n\nShares of included requests (speedup in forwards unless marked "
        "wall).\n\n" + markdown(dist, GAIN, blank_repeats="setting"),
        "## Draft kept at the final update\n\n" + markdown(dist, KEPT, blank_repeats="setting"),
        "## Attainable limit and speculative overhead\n\nAttainable = base forwards / the family's minimum "
        "residual; overhead = (speculative + residual forwards) / base forwards.\n\n"
        + markdown(dist, LIMIT, blank_repeats="setting"),
        "## Share of the attainable speedup\n\nThe paper's share is a ratio of medians (median speedup / "
        "median attainable); the per-example share is the median of each request's speedup / attainable.\n\n"
        + markdown(tables["attainable"], ATTAIN, blank_repeats="setting"),
        "## Per-model speedup, pooled over benchmarks (Figure 2)\n\n" + markdown(tables["model_speedups"], BY_MODEL),
        "## Speed against correctness\n\nIncluded requests by speed (speedup in forwards vs 1×) and by "
        "whether the stream answer differs from the base answer; quality changed = stream and base scores "
        "differ.\n\n" + markdown(tables["speed_quality"], CROSS, blank_repeats="setting"),
        "## Excluded and error rows\n\n" + markdown(tables["exclusions"], EXCLUSIONS),
    ]
    if tables["rescored"].num_rows or _scorer_split(tables["cells"]):
        out.insert(1, rescored_section(tables))
    if tables["divergence"].num_rows:
        out.append(
            "## Greedy stream vs base: where they part (numerics)\n\nIncluded greedy pairs. Margins are "
            "the base run's top-1 − top-2 logit at the first differing token, in spacings of the dtype at "
            "that logit (sp); draft branch = the stream's token there was an accepted draft token; Δq = "
            "stream − base quality (diverged pairs, 95 % bootstrap interval; all pairs). docs/numerics.md.\n\n"
            + markdown(tables["divergence"], DIVERGENCE, blank_repeats="setting"))
    if tables["adaptation"].num_rows:
        out.append(
            "## Adaptation before → after (Table 3)\n\n"
            + markdown(tables["adaptation"], ADAPT, blank_repeats="setting")
        )
    if tables["adaptation_ci"].num_rows:
        out.append(
            "## Table 3 with paired 95 % intervals\n\nOver the examples included for both the plain model "
            "and the variant, paired by example id; Δ = adapted − plain with a percentile bootstrap interval "
            "(1000 resamples of the paired examples; the average row resamples each benchmark on its own). "
            "Shares and their Δ in percent (points); `analysis/sql/adaptation_ci.sql`.\n\n"
            + markdown(adaptation_ci_rows(tables["adaptation_ci"]), ADAPT_CI, blank_repeats="setting")
        )
    if len({(r["acceptance"], r["tau"]) for r in tables["tau_sweep"].to_pylist()}) > 1:
        out.append("## τ sweep — quality against median speedup\n\n" + markdown(tables["tau_sweep"], SWEEP))
    if tables["step_summary"].num_rows:
        out.append(
            "## Steps of the stream runs\n\n"
            + markdown(tables["step_summary"], STEPS, blank_repeats="setting")
        )
        out.append(
            "## Drafts that did not change\n\nA step's draft compared with the previous step's (by the hash "
            "of its token ids).\n\n" + markdown(tables["draft_stability"], STABLE, blank_repeats="setting")
        )
    if compare is not None:
        out.append(
            f"## Comparison — A = this run, B = `{compare_dir}`\n\nΔ = B − A.\n\n"
            + markdown(compare, COMPARE, blank_repeats="setting")
        )
    return out


def write_report(
    results_dir: str | Path,
    *,
    compare_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    threads: int | None = None,
    with_figures: bool = True,
    latest: bool = False,
    typing_config: TypingConfig | None = None,
) -> Report:
    """Build every table and figure; write report.md, one CSV per table and the PNGs.

    ``latest``: per cell name, only the fingerprint of the most recent run (``analysis.fingerprints``).
    """
    root = Path(results_dir)
    out = Path(out_dir) if out_dir else root / "report"
    out.mkdir(parents=True, exist_ok=True)
    tables = build_tables(root, [*TABLES, "per_example"], threads=threads, latest=latest)
    compare = compare_tables(root, compare_dir, threads=threads) if compare_dir else None
    csvs = [_write_csv(tables[name], out / f"{name}.csv") for name in TABLES]
    typing = build_typing(root, typing_config, threads=threads)
    csvs += [_write_csv(typing.summary, out / "typing.csv"), _write_csv(typing.cost_models, out / "cost_models.csv")]
    people = build_population(root, typing_config, threads=threads) if typing_config and typing_config.populations else None
    if people is not None:
        csvs.append(_write_csv(people.summary, out / "population.csv"))
    if compare is not None:
        csvs.append(_write_csv(compare, out / "compare.csv"))
    figs = []
    if with_figures:
        figs = figures.speedup_distributions(tables["per_example"], out)
        figs += figures.model_distributions(tables["per_example"], out)
        figs += figures.tau_sweeps(tables["tau_sweep"], out)
        figs += timing_figures.wait_against_rate(typing.summary, out)
        if people is not None:
            figs += timing_figures.population_wait_cdfs(people.examples, out)
    body = [
        f"# streamgen report — `{root}`\n",
        *_sections(tables, compare, Path(compare_dir) if compare_dir else None),
    ]
    if typing.summary.num_rows:
        body.append(typing_section(typing))
    if people is not None and people.summary.num_rows:
        body.append(population_section(people.summary))
    body.append(f"## Examples one by one\n\n`python -m analysis.view {root}` writes [the results viewer](viewer/index.html)"
                " (open it from disk: every example's steps, kept and thrown drafts, both answers).\n")
    if figs:
        body.append("## Figures\n\n" + "\n\n".join(f"![{p.stem}]({p.name})" for p in figs) + "\n")
    md = out / "report.md"
    md.write_text("\n".join(body))
    log.info("wrote %s (%d CSVs, %d figures)", md, len(csvs), len(figs))
    comparison = None if compare is None else markdown(compare, COMPARE, blank_repeats="setting")
    return Report(md, tuple(csvs), tuple(figs), main_tables(tables), comparison)


def _write_csv(table: pa.Table, path: Path) -> Path:
    pacsv.write_csv(table, path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", type=Path)
    parser.add_argument(
        "--compare", type=Path, default=None, help="a second results dir (B); deltas are B − A"
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default RESULTS_DIR/report)")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: all cores)")
    parser.add_argument("--no-figures", action="store_true", help="tables and CSVs only")
    parser.add_argument("--latest", action="store_true",
                        help="per cell, only the most recent run's settings (fingerprint)")
    parser.add_argument("--typing", nargs="*", default=[], metavar="KEY=VALUE",
                        help="typing analysis settings, e.g. chars_per_s=[4,10] sentence_pause_s=0.5 (docs/timing.md); "
                             "populations=[desktop,mobile] users=200 seed=0 (docs/typists.md)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        typing_config = typing_settings(args.typing)
        report = write_report(
            args.results_dir, compare_dir=args.compare, out_dir=args.out, threads=args.threads,
            with_figures=not args.no_figures, latest=args.latest, typing_config=typing_config,
        )
    except (ResultsNotFoundError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. a read-only results directory: the report goes elsewhere
        out = args.out or args.results_dir / "report"
        print(f"error: cannot write the report to {exc.filename or out}: {exc.strerror or exc}. Fix: pass "
              f"--out DIR with a writable directory (the results are only read)", file=sys.stderr)
        return 1
    print(report.summary)
    if report.comparison:
        print(
            f"### Comparison: A = {args.results_dir}, B = {args.compare} (Δ = B − A)\n\n{report.comparison}"
        )
    print(f"report: {report.markdown_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
