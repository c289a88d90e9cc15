"""Which cell fingerprints the tables use, and the label that tells fingerprints of one cell apart.

A cell *name* is (model, benchmark, acceptance, τ, variant, verifier mode). One results directory
can hold a name under several fingerprints (two runs with different budgets, limits, system
prompts…; see ``streamgen/results/cells.py``, which writes them). :func:`cell_tags` gives each fingerprint a
``settings_tag`` naming the settings whose values differ between the name's fingerprints
(``max_new_tokens=16``), NULL when the name has one fingerprint, and says whether the tables keep
it (``latest=True``: only the fingerprint of the most recent run per name). ``_cells.sql`` joins
the result.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from analysis.sql_template import CELL_NAME  # the name, written out once there

MAX_VALUE_CHARS = 32

CELL_TAGS_SCHEMA = pa.schema([
    ("cell_fingerprint", pa.string()), ("settings_tag", pa.string()), ("kept", pa.bool_()),
    ("n_fingerprints", pa.int64()),
])

FINGERPRINT_QUERY = f"""
SELECT {", ".join(CELL_NAME)}, cell_fingerprint, any_value(cell_settings) AS cell_settings,
       max(run_id) AS last_run
FROM pairs_keyed GROUP BY ALL ORDER BY ALL
"""
"""One row per fingerprint with its cell name, settings JSON and most recent run (input of cell_tags)."""


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = " ".join(text.split())
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def _settings(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)


def differing_keys(settings: Sequence[dict[str, Any] | None]) -> list[str]:
    """Keys whose values are not the same in every settings dict (a missing key counts as differing)."""
    known = [s for s in settings if s is not None]
    keys = sorted({k for s in known for k in s})
    return [k for k in keys if len({json.dumps(s.get(k, "<absent>"), sort_keys=True) for s in known}) > 1]


def _tags(group: list[dict[str, Any]]) -> dict[str, str]:
    """fingerprint → label of what differs, for one cell name's fingerprints (two or more)."""
    settings = [_settings(r["cell_settings"]) for r in group]
    keys = differing_keys(settings)
    tags = {}
    for row, s in zip(group, settings, strict=True):
        fp = row["cell_fingerprint"]
        if s is None:
            tags[fp] = f"fingerprint {fp[:13]} (no settings recorded)"
        elif keys:
            tags[fp] = ", ".join(f"{k}={_short(s.get(k))}" for k in keys)
        else:
            tags[fp] = f"fingerprint {fp[:8]}"
    counts: dict[str, int] = defaultdict(int)
    for tag in tags.values():
        counts[tag] += 1
    return {fp: (f"{t} #{fp[:6]}" if counts[t] > 1 else t) for fp, t in tags.items()}


def cell_tags(rows: Sequence[dict[str, Any]], *, latest: bool = False) -> pa.Table:
    """``rows`` from :data:`FINGERPRINT_QUERY` → the ``cell_tags`` table (``CELL_TAGS_SCHEMA``)."""
    by_name: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_name[tuple(r[c] for c in CELL_NAME)].append(r)
    out: list[dict[str, Any]] = []
    for group in by_name.values():
        newest = max(group, key=lambda r: (r["last_run"] or "", r["cell_fingerprint"]))
        kept = [newest] if latest else group
        kept_fps = {r["cell_fingerprint"] for r in kept}
        tags = _tags(kept) if len(kept) > 1 else {}
        for r in group:
            fp = r["cell_fingerprint"]
            out.append({"cell_fingerprint": fp, "settings_tag": tags.get(fp), "kept": fp in kept_fps,
                        "n_fingerprints": len(group)})
    return pa.Table.from_pylist(out, schema=CELL_TAGS_SCHEMA)
