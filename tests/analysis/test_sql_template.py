"""analysis/sql_template.py: the setting key written out once, and a per-pair column declared once.

The key: every form expands to the text the SQL files used to spell out by hand; no SQL file spells
the key out any more; an unknown placeholder or column is refused with the file named. The per-pair
column: a field declared with ``records.reported`` reaches pair_rows, cells (per cell, pooled),
models (macro = mean of the benchmarks') and the report's Table 1, with no other file touched.
"""

from __future__ import annotations

import re
import statistics
import typing
from pathlib import Path

import pytest

from analysis import sql_template
from analysis.report import write_report
from analysis.sql_template import CELL_KEY, NOT_NULL, SqlTemplateError, expand, key_sql
from analysis.table_specs import TABLE1
from analysis.tables import SQL_DIR, build_tables, sql_text
from streamgen.results.records import PairRecord, ReportColumn, report_columns, reported
from tests.support.analysis_fixtures import RecordSet, pair_record, write_record_set

N = "NULLS FIRST"


def test_each_form_writes_the_key_out_as_the_files_did() -> None:
    assert expand("{cols cell}") == "model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag"
    assert expand("{cols setting p}") == "p.model, p.acceptance, p.tau, p.variant, p.verifier_mode, p.settings_tag"
    assert expand("{cols name}") == "model, benchmark, acceptance, tau, variant, verifier_mode"
    assert expand("{cols setting -acceptance -tau}") == "model, variant, verifier_mode, settings_tag"
    # NULLS FIRST on exactly the columns that may be NULL: greedy (tau NULL) before τ, plain before variants
    assert expand("{order setting}") == (
        f"model, acceptance, tau {N}, variant {N}, verifier_mode {N}, settings_tag {N}")
    assert expand("{match cell -variant a b}") == (
        "a.model = b.model AND a.benchmark = b.benchmark AND a.acceptance = b.acceptance"
        " AND a.tau IS NOT DISTINCT FROM b.tau AND a.verifier_mode IS NOT DISTINCT FROM b.verifier_mode"
        " AND a.settings_tag IS NOT DISTINCT FROM b.settings_tag")
    assert expand("{coalesce setting -tau -variant -verifier_mode -settings_tag a b}") == (
        "coalesce(a.model, b.model) AS model, coalesce(a.acceptance, b.acceptance) AS acceptance")


def test_not_null_columns_are_the_records_non_optional_fields() -> None:
    """``=`` and the default sort order only where a pairs row can never hold NULL."""
    hints = typing.get_type_hints(PairRecord)
    for column in CELL_KEY:
        if column == "settings_tag":  # the analysis's own column, NULL when a name has one fingerprint
            assert column not in NOT_NULL
            continue
        optional = type(None) in typing.get_args(hints[column])
        assert (column in NOT_NULL) == (not optional), column


def _code(path: Path) -> str:
    return re.sub(r"--[^\n]*", "", path.read_text())


def test_no_sql_file_spells_the_key_out() -> None:
    files = sorted(SQL_DIR.glob("*.sql"))
    assert len(files) > 20
    spelled = [f.name for f in files if re.search(r"\bverifier_mode\b", _code(f))]
    assert spelled == [], f"{spelled}: name the key by reference ({{cols cell}}, analysis/sql_template.py)"
    for f in files:  # every file expands completely, and no placeholder hides in a comment (it would expand there)
        assert "{" not in sql_text(f.stem), f.name
        assert not re.search(r"--[^\n]*\{", f.read_text()), f"{f.name}: a placeholder in a comment"


@pytest.mark.parametrize("text, words", [
    ("{colz cell}", "unknown placeholder"),
    ("{cols cells}", "unknown key"),
    ("{cols setting -benchmark}", "cannot drop ['benchmark']"),
    ("{match cell a}", "takes 2 table alias"),
    ("{order cell a b}", "takes 0 or 1 table alias"),
])
def test_a_bad_placeholder_names_the_file_and_the_cause(text: str, words: str) -> None:
    with pytest.raises(SqlTemplateError) as info:
        expand(f"SELECT {text}", source="analysis/sql/x.sql")
    assert str(info.value).startswith("analysis/sql/x.sql: ") and words in str(info.value)


def test_no_field_is_declared_today_so_the_placeholders_add_nothing() -> None:
    """The tables are byte-identical to before issue 40: nothing declared yet, nothing added."""
    assert report_columns(PairRecord) == ()
    assert expand("x{pair_columns}{pair_aggregates}{pair_macros}y") == "xy"


# --- a per-pair column declared in one place reaches every table it should --------------------------

DECLARED = ("residual_tokens_fed", ReportColumn("quantile_cont({col}, 0.5)", "median_residual_fed",
                                                "Tokens fed after final", "num"))


def test_reported_is_field_metadata_read_in_field_order() -> None:
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class Rec:
        a: int
        b: int | None = field(default=None, metadata=reported("max({col})", "max_b", "B", "x"))

    assert report_columns(Rec) == (("b", ReportColumn("max({col})", "max_b", "B", "x")),)


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if PairRecord.residual_tokens_fed carried ``metadata=reported(...)``."""
    monkeypatch.setattr(sql_template, "report_columns", lambda record: (DECLARED,))


def _rows() -> list[PairRecord]:
    """Two benchmarks of one setting; an excluded and an error row with a huge value that must not count."""
    fed = {"humaneval": [4, 10, 6], "mbpp": [20, 2]}
    rows = [pair_record(benchmark=b, example_id=f"{b}-{i}", residual_tokens_fed=v)
            for b, values in fed.items() for i, v in enumerate(values)]
    rows.append(pair_record(benchmark="mbpp", example_id="x", residual_tokens_fed=10**6, excluded_reason="single"))
    rows.append(pair_record(benchmark="mbpp", example_id="y", residual_tokens_fed=10**6, error_type="Boom"))
    return rows


def test_a_declared_column_reaches_cells_models_and_table_1(declared: None, tmp_path: Path) -> None:
    root = write_record_set(tmp_path / "r", RecordSet(_rows(), []), with_steps=False)
    tables = build_tables(root, ["cells", "models"], threads=1)
    cells = {(r["scope"], r["benchmark"]): r["median_residual_fed"] for r in tables["cells"].to_pylist()}
    median_he, median_mbpp = statistics.median([4, 10, 6]), statistics.median([20, 2])  # 6, 11
    assert cells == {("benchmark", "humaneval"): median_he, ("benchmark", "mbpp"): median_mbpp,
                     ("pooled", None): statistics.median([4, 10, 6, 20, 2])}  # included rows only
    macro = [r for r in tables["models"].to_pylist() if r["scope"] == "macro"]
    assert [r["median_residual_fed"] for r in macro] == [(median_he + median_mbpp) / 2]

    report = write_report(root, out_dir=tmp_path / "out", threads=1, with_figures=False)
    table1 = report.markdown_path.read_text().split("## Table 1")[1].split("## ")[0]
    assert "Tokens fed after final" in table1 and "| 11 |" in table1
    assert "median_residual_fed" in (tmp_path / "out" / "cells.csv").read_text().splitlines()[0]
    assert [c.name for c in TABLE1][-1] == "median_speedup_wall"  # the hand-written list is untouched


def test_pair_rows_carries_the_declared_field_only_on_included_rows(declared: None) -> None:
    assert "CASE WHEN is_included THEN residual_tokens_fed END AS residual_tokens_fed" in sql_text("_views")
    assert "quantile_cont(residual_tokens_fed, 0.5) AS median_residual_fed" in sql_text("cells")
    assert "avg(median_residual_fed) AS median_residual_fed" in sql_text("models")
    assert key_sql("cols", "cell") in sql_text("_views")


@pytest.mark.parametrize("field, spec, words", [
    ("residual_tokens_fed", ReportColumn("median(residual_tokens_fed)", "m", "M"), "never reads the field"),
    ("residual_tokens_fed", ReportColumn("max({col})", "m", "M", "percent"), "unknown format 'percent'"),
    ("model", ReportColumn("max({col})", "m", "M"), "a key column"),
])
def test_a_declaration_that_cannot_work_is_refused_with_its_fix(
        monkeypatch: pytest.MonkeyPatch, field: str, spec: ReportColumn, words: str) -> None:
    monkeypatch.setattr(sql_template, "report_columns", lambda record: ((field, spec),))
    with pytest.raises(SqlTemplateError, match=f"PairRecord.{field}: .*{re.escape(words)}"):
        sql_text("cells")


def test_two_declarations_of_one_column_name_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    twice = (("base_tokens_fed", ReportColumn("max({col})", "m", "M")), ("residual_tokens_fed", ReportColumn("min({col})", "m", "M")))
    monkeypatch.setattr(sql_template, "report_columns", lambda record: twice)
    with pytest.raises(SqlTemplateError, match="'m' declared twice"):
        sql_text("cells")


def test_the_cli_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from analysis.report import main

    root = write_record_set(tmp_path / "r", RecordSet(_rows(), []), with_steps=False)
    monkeypatch.setattr(sql_template, "report_columns",
                        lambda record: (("residual_tokens_fed", ReportColumn("max({col})", "m", "M", "bad")),))
    assert main([str(root), "--no-figures", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "unknown format 'bad'" in err and "Traceback" not in err
