"""Waits over a typist population: every replayed example typed by every sampled user, per policy.

For each preset in ``typing.populations`` (:mod:`streamgen.timing.typists`), user u of ``typing.users``
types each included replayed example; its segments' arrivals replace the fixed-rate timeline and the
recorded steps are evaluated post hoc exactly as the ``typing`` table does (one lane per
(example, user), :func:`analysis.post_hoc.post_hoc_lanes`). The rows become the ``population_examples``
view and ``population.sql`` reduces them to p50/p90 wait, the share that keeps up and the wait against
the base run. Paragraph breaks come from the steps' ``arrived_text`` (the request rebuilt); a step
without it counts none. Definitions: docs/typists.md.

Recorded typists (:class:`LoggedTypists`, a keystroke-log file, ``python -m analysis.report DIR --keylog
FILE``) join as one more population: each logged request is typed once, by its logger, and its segments
arrive when the log says (:func:`streamgen.timing.keylog.replay_arrivals` over the request rebuilt from
the steps); examples without a log are left out of it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from analysis.post_hoc import StepColumns, post_hoc_lanes
from analysis.render import Column, markdown, setting_label
from analysis.tables import sql_text
from analysis.typing_table import CELL, example_offsets, fit_cost_columns, step_columns
from streamgen.config import ConfigError, TypingConfig
from streamgen.timing.keylog import KeyLog, read_keylog, replay_arrivals
from streamgen.timing.policies import policies_of
from streamgen.timing.timeline import PrefixCounts
from streamgen.timing.timeline import paragraph_ends as text_paragraph_ends
from streamgen.timing.typists import population

log = logging.getLogger(__name__)

COLUMNS = (*CELL, "device", "example_id", "preset", "users", "seed", "user", "user_wpm", "policy", "wait_s",
           "backlog_s", "base_wait_s", "keeps_up", "skipped", "modelled")
_TYPES = {"tau": pa.float64(), "users": pa.int64(), "seed": pa.int64(), "user": pa.int64(), "user_wpm": pa.float64(),
          "wait_s": pa.float64(), "backlog_s": pa.float64(), "base_wait_s": pa.float64(), "keeps_up": pa.bool_(),
          "skipped": pa.int64(), "modelled": pa.bool_()}
SCHEMA = pa.schema([(c, _TYPES.get(c, pa.string())) for c in COLUMNS])


@dataclass(frozen=True)
class LoggedTypists:
    """Recorded typists: a keystroke-log file's requests, each typed once by whoever logged it."""

    name: str  # the preset column's value: ``keylog:<file name>``
    logs: Mapping[str, KeyLog]  # example id → its log

    @classmethod
    def read(cls, path: str | Path) -> LoggedTypists:
        """The logs of ``path`` (ConfigError naming the file or line and the fix when it cannot be read)."""
        try:
            return cls(f"keylog:{Path(path).name}", read_keylog(path))
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError([f"cannot read the keystroke log {path}: {why}; pass a JSONL file in the format of "
                               "docs/typists.md (UTF-8), e.g. data/keylogs/example.jsonl"],
                              "bad keystroke log") from None


def request_text(arrived: Sequence[str | None], first_change: Sequence[int | None] | None = None) -> str | None:
    """The request as the steps sent it, rebuilt from their arrived text (None when any is missing).

    Corrections rows (``first_change`` recorded): each step's text is the last one's up to its first changed
    character plus what it inserted, so the request is rebuilt edit by edit, not by concatenation."""
    if any(a is None for a in arrived):
        return None
    text = ""
    for a, cut in zip(arrived, first_change or [None] * len(arrived), strict=True):
        text = (text if cut is None else text[:cut]) + str(a)
    return text


def paragraph_ends(prefix_chars: Sequence[int], arrived: Sequence[str | None],
                   first_change: Sequence[int | None] | None = None) -> list[int]:
    """Paragraph breaks strictly inside each prefix, from the steps' arrived text (all 0 when any is missing)."""
    text = request_text(arrived, first_change)
    return [0] * len(prefix_chars) if text is None else text_paragraph_ends(text, prefix_chars)


def example_counts(steps: StepColumns, e: int, arrived: Sequence[str | None],
                   first_change: Sequence[int | None] | None = None) -> list[PrefixCounts]:
    """:class:`PrefixCounts` of example ``e``'s steps, from its recorded columns."""
    rows = range(steps.offsets[e], steps.offsets[e + 1])
    chars = [int(steps.prefix_chars[i]) for i in rows]
    paragraphs = paragraph_ends(chars, [arrived[i] for i in rows],
                                None if first_change is None else [first_change[i] for i in rows])
    keys = [0] * len(chars) if steps.correction_keys is None else [int(steps.correction_keys[i]) for i in rows]
    return [PrefixCounts(c + k, int(steps.pasted_chars[i]), int(steps.sentence_ends[i]), p)  # keys are typed too
            for c, k, i, p in zip(chars, keys, rows, paragraphs, strict=True)]


def population_examples(inputs: pa.Table, cfg: TypingConfig, logged: LoggedTypists | None = None) -> pa.Table:
    """One row per (replayed example, preset, user, policy), in that order; ``logged`` adds one more
    population after the presets: its logged examples, one user each."""
    if not (cfg.populations or logged) or not inputs.num_rows:
        return SCHEMA.empty_table()
    offsets = example_offsets(inputs)
    firsts = inputs.take(offsets[:-1])
    replayed = np.array([e for e, p in enumerate(firsts.column("live_policy").to_pylist()) if p is None], np.int64)
    if not replayed.size:
        return SCHEMA.empty_table()
    steps = step_columns(inputs, offsets)
    fits = fit_cost_columns(inputs, offsets)
    fitted = [fits.get(k) for k in zip(firsts.column("model").to_pylist(), firsts.column("device").to_pylist(),
                                       strict=True)]
    a_ex = np.array([f.a_s if f else np.nan for f in fitted])
    b_ex = np.array([f.b_s if f else np.nan for f in fitted])
    arrived = inputs.column("arrived_text").to_pylist()
    first_change = (inputs.column("first_change_char").to_pylist() if "first_change_char" in inputs.column_names
                    else None)
    ids = firsts.column("example_id").to_pylist()
    parts = []
    counts = {int(e): example_counts(steps, int(e), arrived, first_change) for e in replayed} if cfg.populations else {}
    for name in cfg.populations:
        pop = population(name, cfg.users, cfg.seed, cfg.paste_code)
        arrivals = np.concatenate([pop.arrivals(counts[int(e)], ids[e]).ravel() for e in replayed])
        lane_ex, lane_user = np.repeat(replayed, pop.users), np.tile(np.arange(pop.users), replayed.size)
        typists = _Typists(name, pop.users, pop.seed, pop.speeds_wpm()[lane_user])
        parts.append(_preset_rows(steps, firsts, lane_ex, lane_user, typists, arrivals, a_ex, b_ex, cfg))
    if logged is not None:
        parts.append(_logged_rows(steps, firsts, replayed, logged, arrived, first_change, a_ex, b_ex, cfg))
    return pa.concat_tables(parts)


@dataclass(frozen=True)
class _Typists:
    name: str  # the preset column
    users: int
    seed: int
    lane_wpm: np.ndarray  # each lane's typist's mean speed


def _logged_rows(steps: StepColumns, firsts: pa.Table, replayed: np.ndarray, logged: LoggedTypists,
                 arrived: Sequence[str | None], first_change: Sequence[int | None] | None,
                 a_ex: np.ndarray, b_ex: np.ndarray, cfg: TypingConfig) -> pa.Table:
    """The rows of the logged population: each replayed example with a log, typed as logged."""
    ids = firsts.column("example_id").to_pylist()
    lanes, arrivals, wpm = [], [], []
    unrebuilt = 0
    for e in (int(e) for e in replayed if ids[e] in logged.logs):
        rows = range(steps.offsets[e], steps.offsets[e + 1])
        text = request_text([arrived[i] for i in rows], None if first_change is None else [first_change[i] for i in rows])
        if text is None:
            unrebuilt += 1
            continue
        ends = [int(steps.prefix_chars[i]) for i in rows]
        segments = [text[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        if "".join(segments) != text:
            raise ConfigError([f"example {ids[e]!r}: its steps' prefix lengths {ends} do not end at its request's "
                               f"length {len(text)}; the results look damaged: rerun the grid for it"],
                              "cannot replay a keystroke log")
        log_ = logged.logs[ids[e]]
        lanes.append(e)
        arrivals.append(np.asarray(replay_arrivals(log_, segments), float))
        wpm.append(len(text) / 5 / (log_.times_s[-1] / 60) if log_.times_s[-1] > 0 else np.nan)
    if unrebuilt:
        log.warning("%s: %d logged examples have steps without their text (rows older than the viewer's columns); "
                    "left out of the logged population", logged.name, unrebuilt)
    if not lanes:
        log.warning("%s: none of its %d logged example ids is a replayed example of these results (e.g. %s); the "
                    "log must name examples as the results do (`example_id`)", logged.name, len(logged.logs),
                    sorted(logged.logs)[:3])
        return SCHEMA.empty_table()
    lane_ex = np.array(lanes, np.int64)
    typists = _Typists(logged.name, 1, 0, np.array(wpm, float))
    return _preset_rows(steps, firsts, lane_ex, np.zeros(lane_ex.size, np.int64), typists,
                        np.concatenate(arrivals), a_ex, b_ex, cfg)


def _preset_rows(steps: StepColumns, firsts: pa.Table, lane_ex: np.ndarray, lane_user: np.ndarray,
                 typists: _Typists, arrivals: np.ndarray, a_ex: np.ndarray, b_ex: np.ndarray,
                 cfg: TypingConfig) -> pa.Table:
    """Rows of one population: one lane per (example, user), ``arrivals`` laid out lane after lane."""
    policies = policies_of(cfg)
    outs = [post_hoc_lanes(steps, arrivals, lane_ex, p, a_ex[lane_ex], b_ex[lane_ex]) for p in policies]
    lanes, n_pol = lane_ex.size, len(policies)
    lane = np.repeat(np.arange(lanes), n_pol)  # rows: lane-major, policy-minor
    pol = np.tile(np.arange(n_pol), lanes)
    pick = lambda field: np.stack([getattr(o, field) for o in outs])[pol, lane]  # noqa: E731
    miss = pick("failed")  # a policy that changes work with no cost model fitted: the figure is missing
    ids = firsts.select([*CELL, "device", "example_id", "base_wall_s"]).take(lane_ex[lane])
    cols = {c: ids.column(c) for c in (*CELL, "device", "example_id")}
    rows = lane.size
    cols.update({
        "preset": pa.array([typists.name] * rows, pa.string()), "users": pa.array(np.full(rows, typists.users)),
        "seed": pa.array(np.full(rows, typists.seed)), "user": pa.array(lane_user[lane]),
        "user_wpm": pa.array(typists.lane_wpm[lane]),
        "policy": pa.array(np.array([p.label for p in policies], dtype=object)[pol], pa.string()),
        "wait_s": pa.array(pick("wait_s"), pa.float64(), mask=miss),
        "backlog_s": pa.array(pick("backlog_s"), pa.float64(), mask=miss),
        "base_wait_s": ids.column("base_wall_s"),
        "keeps_up": pa.array(pick("keeps_up"), pa.bool_(), mask=miss),
        "skipped": pa.array(pick("skipped"), pa.int64(), mask=miss),
        "modelled": pa.array(pick("modelled"), pa.bool_(), mask=miss)})
    return pa.table({c: cols[c] for c in COLUMNS}).cast(SCHEMA)


def population_tables(con: duckdb.DuckDBPyConnection, cfg: TypingConfig,
                      logged: LoggedTypists | None = None) -> tuple[pa.Table, pa.Table]:
    """``(population_examples, population)`` on a connection from :func:`analysis.tables.connect`."""
    examples = population_examples(con.sql(sql_text("_typing_inputs")).to_arrow_table(), cfg, logged)
    con.register("population_examples", examples)
    return examples, con.sql(sql_text("population")).to_arrow_table()


@dataclass(frozen=True)
class PopulationTables:
    examples: pa.Table  # population_examples: one row per (example, preset, user, policy)
    summary: pa.Table  # population (population.sql)


def build_population(results_dir: Any, cfg: TypingConfig, *, threads: int | None = None,
                     logged: LoggedTypists | None = None, latest: bool = False) -> PopulationTables:
    """:func:`population_tables` over a results directory (its own connection; ``latest`` as the report's)."""
    from analysis.tables import connect

    con = connect(results_dir, threads=threads, latest=latest)
    try:
        return PopulationTables(*population_tables(con, cfg, logged))
    finally:
        con.close()


POPULATION_COLUMNS = [
    Column("setting", "Model · setting"), Column("benchmark", "Benchmark"), Column("preset", "Preset"),
    Column("users", "users", "num"), Column("seed", "seed", "num"), Column("policy", "Policy"),
    Column("n", "(user, request)", "num"), Column("p50_wait_s", "wait: p50 (s)", "num"),
    Column("p90_wait_s", "p90 (s)", "num"), Column("keeps_up_share", "keeps up", "share"),
    Column("median_base_wait_s", "base wait: median (s)", "num"),
    Column("median_wait_over_base", "wait / base: median", "x"), Column("beats_base_share", "below base", "share"),
    Column("modelled_share", "modelled", "share"),
]


def population_section(summary: pa.Table) -> str:
    """The report's population section (markdown)."""
    rows = [{**r, "setting": setting_label(r)} for r in summary.to_pylist()]
    return ("## Typist populations: the wait per (user, request)\n\nEach preset's sampled users type every "
            "replayed example (docs/typists.md; a `keylog:` preset is a keystroke-log file's requests, each typed "
            "once, as logged): p50 and p90 of the wait, the share of (user, request) pairs "
            "where drafting keeps up, and the wait against the base run (submit, then decode).\n\n"
            + markdown(rows, POPULATION_COLUMNS, blank_repeats="setting"))
