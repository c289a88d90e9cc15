"""Every `python workflows/...` command the README shows passes `--dry-run`.

The commands are parsed from README.md (inline code spans), so a command added there is covered
without touching this file. Each runs in process (the workflow's ``main``) with ``--dry-run``
appended: the grid, its cluster config, models' weights, benchmark data and scorers are validated,
the plan is printed, and nothing starts (no Ray, no Slurm, nothing written).
"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from streamgen.config import REPO_ROOT
from tests.support.ds1000_support import skip_without_ds1000
from tests.support.fs_support import repo_results_lock

README = REPO_ROOT / "README.md"
COMMAND = re.compile(r"`(?:[^`]*&&\s*)?(python3? workflows/[a-z_]+\.py[^`]*)`")
DS1000_VENV = REPO_ROOT / ".venv-ds1000"

pytestmark = pytest.mark.slow


def readme_commands() -> list[str]:
    """The distinct `python workflows/...` commands in README.md, in order of appearance."""
    found = [m.group(1).strip() for m in COMMAND.finditer(README.read_text())]
    return list(dict.fromkeys(c for c in found if "..." not in c and "nope" not in c))


def test_the_readme_shows_the_commands_users_rely_on() -> None:
    commands = readme_commands()
    assert "python workflows/full_grid.py" in commands
    assert "python workflows/nightly.py" in commands
    assert any("--dry-run" in c for c in commands)
    assert any("benchmarks=[mbpp,chat]" in c for c in commands)


def _needs_a_download(line: str) -> bool:
    """A pre-flight line of a checkpoint missing from the cache, or the DS-1000 interpreter's."""
    return ("not in the Hugging Face cache" in line and "hf download" in line) or \
        (not DS1000_VENV.exists() and "benchmark ds1000" in line)


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_passes_dry_run(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO_ROOT)
    argv = shlex.split(command)
    script = Path(argv[1])
    args = [a for a in argv[2:] if a != "--dry-run"]
    workflow = importlib.import_module(f"workflows.{script.stem}")
    with repo_results_lock():  # no other test writes the repository's results/ meanwhile (pytest -n)
        before = {p for p in (REPO_ROOT / "results").rglob("*")} if (REPO_ROOT / "results").exists() else set()
        code = workflow.main([*args, "--dry-run"])
        after = {p for p in (REPO_ROOT / "results").rglob("*")} if (REPO_ROOT / "results").exists() else set()
    out, err = capsys.readouterr()
    if code == 2 and not DS1000_VENV.exists() and "ds1000" in err and err.count("\n  - ") == 1:
        skip_without_ds1000(f"{command}: needs the DS-1000 interpreter (bash scripts/ds1000_env.sh): {err.strip()}")
    problems = [line for line in err.splitlines() if line.startswith("  - ")]
    if code == 2 and problems and all(_needs_a_download(line) for line in problems):
        # the study's hub checkpoints are not cached here: the pre-flight must say so, one line each
        # (tests/jobs/grid/test_snapshot_resume.py runs the same grid on scaled-down copies of them)
        pytest.skip(f"{command}: the hub checkpoints are not in this machine's cache ({len(problems)} lines)")
    assert code == 0, err
    assert "dry run of grid" in out and "cells" in out and "already complete" in out
    if "probe.py" not in command:  # the probe is one verify per draft: it prints its work, not a GPU-hour estimate
        assert "estimate:" in out and "assumptions" in out
    written = {p.name for p in after - before if p.is_file()}
    if "--calibrate" in args:  # the files --calibrate is asked to write: its caches (docs/estimate.md), which an
        caches = {"calibration.json", "calibration.pilot.json"}  # earlier run in this checkout may have left
        assert written <= caches <= {p.name for p in after if p.is_file()} and "calibrated on" in out
        after = {p for p in after if p in before or not (p.name in caches or p.is_dir())}
    assert after == before, "a dry run wrote files"


def test_dry_run_counts_complete_shards_and_estimates_from_earlier_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rows in results_dir: the plan names the complete shard, and the estimate takes the rows' mean base
    answer length (10 tokens) for the autoregressive model. One cell, so per example: base L + step 1 L +
    each later step 1 verify + (L − 1) = L × (segments + 1) forwards (jobs/grid/gpu_hours.py)."""
    from jobs.cluster.dry_run import answer_lengths, plan_dry_run
    from jobs.grid.plan import plan_grid
    from jobs.run.writer import ResultWriter
    from streamgen.config import grid_config
    from streamgen.results.cells import settings_json
    from tests.support.analysis_fixtures import pair_record

    grid = grid_config("smoke", ["models=[tiny-llama]", "benchmarks=[mbpp]", "acceptance=[greedy]",
                                 "limit=3", "shard_size=2", f"results_dir={tmp_path}"])
    plan = plan_grid(grid)
    first = plan.shards[0]
    settings = settings_json(first.cell.settings())
    rows = [pair_record(shard_id=first.shard_id, example_id=e, model="tiny-llama", benchmark="mbpp", n_segments=3,
                        base_answer_tokens=answer, cell_settings=settings)
            for e, answer in zip(first.example_ids, (8, 12), strict=True)]
    ResultWriter(tmp_path).write_shard(first, rows, [])
    assert answer_lengths(tmp_path) == {("tiny-llama", "mbpp"): pytest.approx(10.0)}
    text = plan_dry_run(grid)
    label = first.cell.label
    assert label == "tiny-llama / mbpp / greedy"  # cells.cell_label: the one spelling
    line = next(x for x in text.splitlines() if x.startswith(label)).removeprefix(label)
    assert line.split()[0:4] == ["3", "0", "2", "1"]  # examples, excluded, shards, done
    want = sum(10 * (len(plan.segments[("mbpp", e)]) + 1) for s in plan.shards for e in s.example_ids
               if not plan.excluded[("mbpp", e)])
    (est,) = [x for x in text.splitlines() if x.startswith("tiny-llama ") and x.split()[1] == "mbpp"]
    assert est.split()[4] == f"{want:,}"  # model, benchmark, examples, units, forwards
    assert "1 already complete" in text and "estimate:" in text and "answer lengths from earlier rows" in text
