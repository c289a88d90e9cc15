"""The simulator picks one cell setting in Arrow (``one_setting_table``); the plain Python version over
dicts (``one_setting``) is the reference, compared on generated rows with nulls, empty strings and τs."""

from __future__ import annotations

import random

import pyarrow as pa

from analysis.simulate import one_setting, one_setting_table


def rows(rng: random.Random, n: int) -> list[dict]:
    return [{"model": rng.choice(["m1", "m2"]), "acceptance": rng.choice(["greedy", "tau"]),
             "tau": rng.choice([None, 0.5, 0.9]), "variant": rng.choice([None, "", "adapted"]),
             "verifier_mode": rng.choice([None, "visible", "hidden"]), "settings_tag": rng.choice([None, "", "t"]),
             "example_id": f"e{i}", "step": i % 4} for i in range(n)]


def test_the_arrow_choice_equals_the_python_reference() -> None:
    rng = random.Random(0)
    for _ in range(200):
        data = rows(rng, rng.randint(1, 40))
        assert one_setting_table(pa.Table.from_pylist(data)) == one_setting(data)


def test_null_and_empty_variant_are_one_setting_and_row_order_is_kept() -> None:
    base = {"model": "m", "acceptance": "greedy", "tau": None, "verifier_mode": None, "settings_tag": None}
    data = [{**base, "variant": v, "example_id": f"e{i}"} for i, v in enumerate([None, "adapted", "", None])]
    picked = one_setting_table(pa.Table.from_pylist(data))
    assert [r["example_id"] for r in picked] == ["e0", "e2", "e3"]  # "" and null both sort first, as ""
