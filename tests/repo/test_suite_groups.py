"""The xdist groups of tests/conftest.py stay true: a test file that starts Ray, runs a grid, submits to
Slurm or drives a browser is in the one "machine" group (so it never runs beside another such file), or
is named below with the reason it takes nothing of the machine."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import MACHINE_FILES

TESTS = Path(__file__).resolve().parents[1]
# every test file by its name: MACHINE_FILES are file names, unique under tests/ (test_test_layout.py)
FILES = {p.name: p for p in TESTS.rglob("test_*.py")}
TAKES_THE_MACHINE = re.compile(r'start_ray\(|ray\.init\(|run_grid\(|run_grid_on_cluster\(|submit_grid\(|'
                               r'sync_playwright|browser_support|"full_grid\.py"|"nightly\.py"|"adapt\.py"')
NOT_MACHINE = {
    "test_analysis_report.py": "names full_grid.py in an error message it checks",
    "test_analysis_stats.py": "names full_grid.py in an error message it checks",
    "test_help.py": "runs the workflows' --help only",
    "test_local_ray.py": "its ray.init is a stand-in: no Ray starts",
    "test_snapshot_resume.py": "its submit_grid is refused by the pre-flight before anything is queued",
}


def test_every_file_that_takes_the_machine_is_in_its_group() -> None:
    found = {name for name, p in FILES.items()
             if name != Path(__file__).name and TAKES_THE_MACHINE.search(p.read_text())}
    missing = sorted(found - MACHINE_FILES - NOT_MACHINE.keys())
    assert not missing, f"add these to MACHINE_FILES in tests/conftest.py (or to NOT_MACHINE, saying why): {missing}"
    assert all(name in FILES for name in MACHINE_FILES | NOT_MACHINE.keys()), "a listed file is gone"
    assert not MACHINE_FILES & NOT_MACHINE.keys()


def test_the_files_of_the_machine_group_share_one_xdist_group(pytestconfig) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import MACHINE_GROUP, _unit

    class Item:  # the one attribute _unit reads
        def __init__(self, name: str) -> None:
            self.fspath = TESTS / name

    assert {_unit(Item(n)) for n in MACHINE_FILES} == {MACHINE_GROUP}  # type: ignore[arg-type]
    assert _unit(Item("test_config.py")) == "test_config.py"  # type: ignore[arg-type]
