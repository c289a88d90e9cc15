"""The report over a results directory: ``RESULTS_DIR/report/`` with report.md, CSVs and PNGs.

    python -m analysis.report results/local                       # report + main tables on stdout
    python -m analysis.report results/local --compare results/old # adds B − A deltas (B = --compare)
    python -m analysis.report results/local --latest              # per cell, only the newest run's settings
    python -m analysis.report results/local --keylog logs.jsonl   # waits of logged typists (docs/typists.md)

Python: ``write_report(results_dir, compare_dir=None) -> Report``; ``summary_text(results_dir)``
(the main tables as markdown); ``print_summary(results_dir)`` writes that text to stdout (the grid
calls it at the end of a run) and returns it. Definitions of every statistic: docs/analysis.md.

This module builds the tables, writes the files and holds the CLI; what each table shows is in
``analysis.table_specs`` and how the markdown lays them out in ``analysis.report_sections``.
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

import analysis.figures as figures
import analysis.timing_figures as timing_figures
from analysis.figure_pool import FigurePool
from analysis.population import LoggedTypists, build_population, population_section
from analysis.render import markdown
from analysis.report_sections import main_tables, sections
from analysis.sql_template import SqlTemplateError
from analysis.table_specs import COMPARE
from analysis.tables import TABLES, ResultsNotFoundError, build_tables, compare_tables
from analysis.typing_table import build_typing, typing_section, typing_settings
from streamgen.config import ConfigError, TypingConfig
from streamgen.results.manifest import ManifestError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Report:
    """What ``write_report`` wrote."""

    markdown_path: Path
    csv_paths: tuple[Path, ...]
    figure_paths: tuple[Path, ...]
    summary: str  # the main tables (markdown)
    comparison: str | None  # the side-by-side table when a second run was given


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



def write_report(
    results_dir: str | Path,
    *,
    compare_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    threads: int | None = None,
    with_figures: bool = True,
    latest: bool = False,
    typing_config: TypingConfig | None = None,
    keylog: str | Path | None = None,
) -> Report:
    """Build every table and figure; write report.md, one CSV per table and the PNGs.

    ``latest``: per cell name, only the fingerprint of the most recent run (``analysis.fingerprints``).
    ``keylog``: a keystroke-log file (docs/typists.md); its requests join the population table as typed.
    """
    root = Path(results_dir)
    out = Path(out_dir) if out_dir else root / "report"
    out.mkdir(parents=True, exist_ok=True)
    with FigurePool() as pool:  # figures are drawn while the later tables are built
        tables = build_tables(root, [*TABLES, "per_example"], threads=threads, latest=latest)
        if with_figures:
            pool.submit(figures.speedup_distributions(tables["per_example"], out)
                        + figures.model_distributions(tables["per_example"], out)
                        + figures.tau_sweeps(tables["tau_sweep"], out))
        compare = compare_tables(root, compare_dir, threads=threads) if compare_dir else None
        csvs = [_write_csv(tables[name], out / f"{name}.csv") for name in TABLES]
        typing = build_typing(root, typing_config, threads=threads, latest=latest)
        csvs += [_write_csv(typing.summary, out / "typing.csv"), _write_csv(typing.cost_models, out / "cost_models.csv")]
        logged = LoggedTypists.read(keylog) if keylog is not None else None
        people_cfg = typing_config or TypingConfig()
        people = build_population(root, people_cfg, threads=threads, logged=logged, latest=latest) \
            if people_cfg.populations or logged is not None else None
        if people is not None:
            csvs.append(_write_csv(people.summary, out / "population.csv"))
        if compare is not None:
            csvs.append(_write_csv(compare, out / "compare.csv"))
        if with_figures:
            pool.submit(timing_figures.wait_against_rate(typing.summary, out))
            if people is not None:
                pool.submit(timing_figures.population_wait_cdfs(people.examples, out))
        figs = pool.paths()  # ~93 figures at the study's size, a process per core
    body = [
        f"# streamgen report — `{root}`\n",
        *sections(tables, compare, Path(compare_dir) if compare_dir else None),
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
    parser.add_argument("--keylog", type=Path, default=None, metavar="FILE",
                        help="a keystroke log (JSONL, docs/typists.md): its requests join the population table, "
                             "each typed as logged")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        typing_config = typing_settings(args.typing)
        report = write_report(
            args.results_dir, compare_dir=args.compare, out_dir=args.out, threads=args.threads,
            with_figures=not args.no_figures, latest=args.latest, typing_config=typing_config, keylog=args.keylog,
        )
    except (ResultsNotFoundError, ManifestError, ConfigError, SqlTemplateError) as exc:  # the last: a bad reported(...) declaration
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
