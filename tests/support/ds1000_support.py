"""DS-1000's interpreter (``bash scripts/ds1000_env.sh``): its tests skip without it on a contributor's
machine, and fail on CI, where ``.ci/run`` builds it and sets ``STREAMGEN_REQUIRE_DS1000=1`` (a skip there
would drop the reference sweep from CI without a word)."""

from __future__ import annotations

import os

import pytest


def skip_without_ds1000(reason: str) -> None:
    if os.environ.get("STREAMGEN_REQUIRE_DS1000"):
        pytest.fail(f"{reason} (STREAMGEN_REQUIRE_DS1000 is set: build it with bash scripts/ds1000_env.sh)")
    pytest.skip(reason)
