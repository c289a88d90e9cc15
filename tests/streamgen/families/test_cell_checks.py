"""streamgen/families/registry.py's CELL_CHECKS: the families' cell checks without torch, from their descriptors. The
table names the very functions the decoder modules' FAMILY plug-ins use, and the study's dry run (plan, checks, estimate, the
complete-shard search) runs in a process that never imports torch (~1.5 s of every dry run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from streamgen.families.registry import CELL_CHECKS, FAMILIES

ROOT = Path(__file__).resolve().parents[3]


def test_the_table_names_the_checks_the_family_plug_ins_use() -> None:
    assert set(CELL_CHECKS) <= set(FAMILIES)
    for name, family in FAMILIES.items():
        assert getattr(family, "check", None) is CELL_CHECKS.get(name), name


_DRY_RUN = """
import json, sys
from jobs.cluster.dry_run import dry_run_report
from jobs.grid.plan import cell_problems
from streamgen.config import benchmark_config, grid_config, model_config
text, problems = dry_run_report(grid_config("full", [f"results_dir={sys.argv[1]}"]))
grid = grid_config("full", [f"results_dir={sys.argv[1]}"])
bad = model_config("refusion-8b", ["decoding.serial_num_blocks=3"])
found = cell_problems(grid, {"bad": bad}, {"mbpp": benchmark_config("mbpp")})
print(json.dumps({"torch": "torch" in sys.modules, "complete": "already complete" in text, "bad": found}))
"""


def test_the_study_dry_run_checks_every_cell_without_importing_torch(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _DRY_RUN, str(tmp_path / "results")], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["complete"], "the dry run reached its complete-shard search"
    # the refusion check ran in that process: 3 blocks cannot split a slot-padded buffer into whole slots
    assert out["bad"] and "serial_num_blocks=3" in out["bad"][0]
    assert out["torch"] is False
