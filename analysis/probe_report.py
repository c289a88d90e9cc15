"""The §6.5 probe's table: ``RESULTS_DIR/probe/*.parquet`` (``workflows/verifier_probe.py``) → one markdown table.

    python -m analysis.probe_report results/probe     # writes results/probe/probe.md and probe.csv, prints the table

One row per (model, benchmark, verifier, draft kind); per acceptance rule (greedy, then each τ) the
share of draft tokens accepted and the share of drafts accepted whole, beside the median probability
(one verify forward per draft and verifier, so it does not depend on the rule). SQL:
``analysis/sql/probe_table.sql``; definitions in docs/analysis.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv

from analysis.render import Column, markdown
from analysis.tables import sql_text
from streamgen.acceptance_rules import column_label
from streamgen.results.records import PROBE_SCHEMA
from streamgen.results.result_files import literal_glob

log = logging.getLogger(__name__)

KEYS = ("model", "benchmark", "verifier", "draft_kind")


class ProbeResultsNotFoundError(FileNotFoundError):
    """The directory has no probe records."""


def probe_long(results_dir: str | Path) -> pa.Table:
    """``analysis/sql/probe_table.sql`` over the directory's probe files: one row per key and rule."""
    files = sorted(Path(results_dir, "probe").glob("*.parquet"))
    if not files:
        raise ProbeResultsNotFoundError(f"{results_dir}: no probe/*.parquet: run python workflows/verifier_probe.py "
                                        f"results_dir={results_dir} first")
    con = duckdb.connect(":memory:")
    names = ", ".join(PROBE_SCHEMA.names)
    listed = "[" + ", ".join("'" + literal_glob(f).replace("'", "''") + "'" for f in files) + "]"
    con.execute(f"CREATE TEMP VIEW probe AS SELECT {names} FROM read_parquet({listed}, union_by_name = true)")
    return con.sql(sql_text("probe_table")).to_arrow_table()


def rule_label(acceptance: str, tau: float | None) -> str:
    return column_label(acceptance, tau, table=True)


def probe_wide(long: pa.Table) -> tuple[list[dict], list[Column]]:
    """One row per (model, benchmark, verifier, draft kind), a pair of columns per rule, and the columns."""
    rows: dict[tuple, dict] = {}
    labels: list[str] = []
    for r in long.to_pylist():
        label = rule_label(r["acceptance"], r["tau"])
        if label not in labels:
            labels.append(label)
        row = rows.setdefault(tuple(r[k] for k in KEYS), {**{k: r[k] for k in KEYS}, "n": r["n_examples"],
                                                          "tokens": r["mean_draft_tokens"],
                                                          "median_prob": r["median_prob"]})
        row[f"acc {label}"], row[f"whole {label}"] = r["accepted_share"], r["whole_share"]
    columns = [Column("model", "Model"), Column("benchmark", "Benchmark"), Column("verifier", "Verifier"),
               Column("draft_kind", "Draft"), Column("n", "n", "num"), Column("tokens", "tokens (mean)", "num"),
               Column("median_prob", "median p", "prob")]
    for label in labels:
        columns += [Column(f"acc {label}", f"accepted {label}", "share"), Column(f"whole {label}", "whole", "share")]
    return list(rows.values()), columns


def write_probe_report(results_dir: str | Path) -> str:
    """``probe.md`` and ``probe.csv`` in ``results_dir``; returns the markdown table."""
    long = probe_long(results_dir)
    rows, columns = probe_wide(long)
    text = markdown(rows, columns, blank_repeats="model")
    Path(results_dir, "probe.md").write_text(text + "\n")
    pacsv.write_csv(long, Path(results_dir, "probe.csv"))
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir")
    args = parser.parse_args(argv)
    try:
        print(write_probe_report(args.results_dir))
    except ProbeResultsNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
