"""The extras `.ci/run` installs are the ones pyproject declares, and on CI they are really installed.

pip 23.2 does not normalise a requested extra's name (PEP 685): `pip install -e ".[lm_eval]"` asked for an
extra that the package's metadata calls `lm-eval`; pip warned, installed nothing, and on a fresh machine the
lm-eval tests would skip (``pytest.importorskip``) without a word. So the names are written normalised
everywhere, and CI (``STREAMGEN_REQUIRE_EXTRAS=1`` in `.ci/run`) checks every requirement of every extra it
installs against what is installed.
"""

from __future__ import annotations

import os
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def declared() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def ci_extras(text: str | None = None) -> list[str]:
    """The extras of `.ci/run`'s editable install: ``-e ".[a,b,c]"``."""
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8") if text is None else text
    found = re.findall(r'-e "\.\[([^\]]+)\]"', text)
    assert len(found) == 1, f".ci/run should install the project once with its extras, found {found}"
    return [e.strip() for e in found[0].split(",")]


def unnormalised(names: list[str]) -> list[str]:
    return [n for n in names if n != canonicalize_name(n)]


def missing_requirements(extras: list[str], table: dict[str, list[str]]) -> list[str]:
    """Each requirement of ``extras`` that is not installed, or installed at a version outside its range."""
    out = []
    for extra in extras:
        for text in table[extra]:
            req = Requirement(text)
            try:
                version = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                out.append(f"{extra}: {text} is not installed")
                continue
            if not req.specifier.contains(version, prereleases=True):
                out.append(f"{extra}: {text} but {version} is installed")
    return out


def test_extra_names_are_written_normalised_in_pyproject_and_ci() -> None:
    table = declared()
    assert not unnormalised(list(table)), "pyproject's extras must be named as PEP 685 normalises them"
    extras = ci_extras()
    assert not unnormalised(extras), f"{extras}: pip 23.2 installs nothing for an unnormalised extra name"
    assert set(extras) <= set(table), set(extras) - set(table)
    assert "ds1000" not in extras  # its old pins go into .venv-ds1000 only (scripts/ds1000_env.sh)


def test_the_checks_catch_the_lm_eval_spelling_and_a_missing_package() -> None:
    """The two checks on inputs built here: the spelling that slipped through, and a package not installed."""
    assert unnormalised(ci_extras('pip install -e ".[dev,lm_eval]"')) == ["lm_eval"]
    table = {"x": ["pytest>=1", "no-such-package-streamgen>=1", "pytest<1"]}
    problems = missing_requirements(["x"], table)
    assert len(problems) == 2 and "no-such-package-streamgen>=1 is not installed" in problems[0]
    assert problems[1].startswith("x: pytest<1 but ")


def test_every_requirement_of_the_extras_ci_installs_is_installed() -> None:
    if not os.environ.get("STREAMGEN_REQUIRE_EXTRAS"):
        pytest.skip("checked on CI (STREAMGEN_REQUIRE_EXTRAS=1 in .ci/run), where every extra is installed")
    assert not missing_requirements(ci_extras(), declared())
