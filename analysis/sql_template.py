"""The placeholders of ``analysis/sql/*.sql``: the setting key, named once, and the declared per-pair columns.

Every table is keyed by the cell's setting, seven columns (docs/analysis.md, "Grouping"). They are
written out ONCE, in ``CELL_KEY``; a SQL file names the key by reference and ``expand`` (called by
``analysis.tables.sql_text``, so every reader of the SQL gets the expanded text) writes the columns
out in the form the clause needs:

    {cols cell}          model, benchmark, acceptance, tau, variant, verifier_mode, settings_tag
    {cols cell p}        p.model, p.benchmark, …               (qualified by a table alias)
    {cols setting}       the key without benchmark: a model setting, pooled over benchmarks
    {cols name}          the key without settings_tag: the cell name a fingerprint belongs to
    {cols cell -variant} the key less the columns named after ``-`` (a sub-key: say which and why)
    {order setting}      model, acceptance, tau NULLS FIRST, …  (NULLS FIRST on the nullable columns)
    {match cell a b}     a.model = b.model AND … AND a.tau IS NOT DISTINCT FROM b.tau AND …
    {coalesce setting a b}  coalesce(a.model, b.model) AS model, …   (a full outer join's key)
    {pair_columns}       the per-pair fields records.py declares for the report (``report_columns``),
    {pair_aggregates}    as pair_rows columns, their per-cell aggregates (cells.sql) and the mean of the
    {pair_macros}        benchmarks' values (models.sql); each item starts with ", " (nothing when none)

Why generated text rather than a DuckDB macro or view: a macro returns a value, not a column list, so
it cannot stand in a GROUP BY, a GROUPING SETS, a PARTITION BY, an ORDER BY with NULLS FIRST or a join
condition; ``COLUMNS(…)`` selects columns but not in every one of those clauses, and a view would move
the grouping, not name it. Text substitution leaves the SQL that runs exactly what the file said
before (same plan, same results) and the expanded text is what DuckDB reports errors against
(``analysis.tables.sql_text(name)`` returns it). An unknown placeholder, key or column raises ``SqlTemplateError``.
"""

from __future__ import annotations

import re

from streamgen.results.records import PairRecord, ReportColumn, report_columns

CELL_NAME: tuple[str, ...] = ("model", "benchmark", "acceptance", "tau", "variant", "verifier_mode")
"""A cell's name: the pairs record fields that label it (several fingerprints may share one name)."""

CELL_KEY: tuple[str, ...] = (*CELL_NAME, "settings_tag")
"""The setting key: one row of Table 1, the name plus ``settings_tag`` (the analysis's own column:
what tells the fingerprints of one name apart, ``analysis.fingerprints``)."""

NOT_NULL: frozenset[str] = frozenset({"model", "benchmark", "acceptance"})
"""Key columns a pairs row always carries (record fields typed ``str``, checked by a test): compared
with ``=`` and sorted in DuckDB's default order; the others may be NULL, so they are compared with
``IS NOT DISTINCT FROM`` and sorted NULLS FIRST (greedy before τ, the plain model before variants)."""

KEYS: dict[str, tuple[str, ...]] = {
    "cell": CELL_KEY,
    "setting": tuple(c for c in CELL_KEY if c != "benchmark"),  # a model setting: pooled over benchmarks
    "name": CELL_NAME,
}

_FORMS = ("cols", "order", "match", "coalesce")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)((?: +-?[a-z_]+)*)\}")


class SqlTemplateError(ValueError):
    """A SQL file names a placeholder, key, column or alias this module does not know."""


def key_columns(key: str, drop: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The columns of named key ``key`` without those in ``drop`` (each must be in the key)."""
    if key not in KEYS:
        raise SqlTemplateError(f"unknown key {key!r}; the keys are {sorted(KEYS)} (analysis/sql_template.py)")
    unknown = [c for c in drop if c not in KEYS[key]]
    if unknown:
        raise SqlTemplateError(f"cannot drop {unknown} from key {key!r} {KEYS[key]}: not in it")
    return tuple(c for c in KEYS[key] if c not in drop)


def _qualified(alias: str | None, column: str) -> str:
    return f"{alias}.{column}" if alias else column


def key_sql(form: str, key: str, *, drop: tuple[str, ...] = (), aliases: tuple[str, ...] = ()) -> str:
    """One key written out in one form (``cols``, ``order``, ``match``, ``coalesce``; module docstring)."""
    columns = key_columns(key, drop)
    wanted = {"cols": (0, 1), "order": (0, 1), "match": (2,), "coalesce": (2,)}[form]
    if len(aliases) not in wanted:
        raise SqlTemplateError(f"{{{form} {key}}} takes {' or '.join(map(str, wanted))} table alias(es), "
                               f"got {list(aliases)}")
    if form == "cols":
        alias = aliases[0] if aliases else None
        return ", ".join(_qualified(alias, c) for c in columns)
    if form == "order":
        alias = aliases[0] if aliases else None
        return ", ".join(_qualified(alias, c) + ("" if c in NOT_NULL else " NULLS FIRST") for c in columns)
    a, b = aliases
    if form == "coalesce":
        return ", ".join(f"coalesce({a}.{c}, {b}.{c}) AS {c}" for c in columns)
    return " AND ".join(f"{a}.{c} {'=' if c in NOT_NULL else 'IS NOT DISTINCT FROM'} {b}.{c}" for c in columns)


KINDS = ("num", "pct", "share", "x", "prob", "text")
"""The formats ``analysis.render.fmt`` knows."""


def declared_columns() -> tuple[tuple[str, ReportColumn], ...]:
    """(pairs field, declaration) of every per-pair column ``PairRecord`` declares for the report
    (``records.reported``): what ``{pair_columns}`` and friends write out and Table 1 shows. A
    declaration that cannot work raises ``SqlTemplateError`` naming the field, the cause and the fix."""
    declared = report_columns(PairRecord)
    problems = []
    names = [spec.name for _, spec in declared]
    for field, spec in declared:
        where = f"PairRecord.{field}: reported({spec.aggregate!r}, {spec.name!r}, …)"
        if "{col}" not in spec.aggregate:
            problems.append(f"{where}: the aggregate never reads the field; write it over {{col}}, "
                            "e.g. 'quantile_cont({col}, 0.5)'")
        if spec.kind not in KINDS:
            problems.append(f"{where}: unknown format {spec.kind!r}; use one of {list(KINDS)}")
        if field in CELL_KEY:
            problems.append(f"{where}: a key column is already in every table; declare a measured field")
        if names.count(spec.name) > 1:
            problems.append(f"{where}: column name {spec.name!r} declared twice; give each its own name")
    if problems:
        raise SqlTemplateError("; ".join(problems))
    return declared


def pair_sql(form: str) -> str:
    """The declared per-pair columns in one form (module docstring), each item led by ", "."""
    items = []
    for field, spec in declared_columns():
        if form == "pair_columns":  # NULL unless included, like every derived column of pair_rows
            items.append(f"CASE WHEN is_included THEN {field} END AS {field}")
        elif form == "pair_aggregates":
            items.append(f"{spec.aggregate.replace('{col}', field)} AS {spec.name}")
        else:  # pair_macros: the macro row is the mean of the benchmarks' values, as for every cells column
            items.append(f"avg({spec.name}) AS {spec.name}")
    return "".join(f",\n    {item}" for item in items)


def expand(text: str, *, source: str = "SQL") -> str:
    """``text`` with every placeholder written out (``source`` names the file in errors)."""

    def one(match: re.Match[str]) -> str:
        form, args = match.group(1), match.group(2).split()
        try:
            if form in ("pair_columns", "pair_aggregates", "pair_macros") and not args:
                return pair_sql(form)
            if form not in _FORMS or not args:
                raise SqlTemplateError(f"unknown placeholder {match.group(0)!r}; the forms are "
                                       f"{list(_FORMS)} + a key, or pair_columns / pair_aggregates / pair_macros")
            key, rest = args[0], args[1:]
            drop = tuple(a[1:] for a in rest if a.startswith("-"))
            aliases = tuple(a for a in rest if not a.startswith("-"))
            return key_sql(form, key, drop=drop, aliases=aliases)
        except SqlTemplateError as exc:
            raise SqlTemplateError(f"{source}: {exc}") from None

    return _PLACEHOLDER.sub(one, text)
