"""What a requeue loses: a work unit killed mid-way, rerun without and with the unit's spool.

    python bench/bench_requeue.py                           # tiny-llama, CoEdIT, 16 examples × 2 cells, kill after 6
    python bench/bench_requeue.py kill_after=3 limit=8      # any grid override; kill_after= is this script's

For each mode the same grid (ONE work unit: every example in one shard per cell, one actor) runs as
``workflows/full_grid.py`` in its own session; once ``kill_after`` examples are in the unit's spool
(``jobs/run/spool.py``) the whole process group gets SIGTERM, as Slurm's time limit sends it, and SIGKILL
0.5 s later (Slurm's ``KillWait``, shortened: the actor decodes on after SIGTERM). Then the
same grid is rerun (here, in-process): ``before`` with the spool switched off (``jobs.run.driver.prepare_spool``
swapped for one returning None: main's behaviour, every example decoded again), ``after`` as shipped.
Printed side by side: examples finished before the kill, examples the rerun decoded, examples decoded
twice, the decode seconds those had cost the killed attempt (their measured ``wall_s``, read from the
spool), and the rerun's own decode seconds and model calls (``runs.forwards_executed``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.run import driver  # noqa: E402
from jobs.run.spool import spool_dir  # noqa: E402
from streamgen.config import REPO_ROOT, grid_config  # noqa: E402

DEFAULTS = ["grid=smoke", "models=[tiny-llama]", "benchmarks=[coedit]", "limit=16", "shard_size=16",
            "acceptance=[greedy,threshold]", "taus=[0.5]", "max_new_tokens=32", "workers=1"]


@dataclass(frozen=True)
class Outcome:
    finished_before_kill: int  # examples in the spool when the run was killed
    first_attempt_s: dict[str, float]  # example id → its decode seconds in the killed attempt (all cells)
    rerun_decoded: int  # examples the rerun decoded (not taken from the spool)
    rerun_decode_s: float
    rerun_forwards: int
    examples: int


def spooled_seconds(results: Path) -> dict[str, float]:
    """Example id → decode seconds (wall, every cell's pair) of each example in the unit's spool; the
    file is this script's own, so its results are unpickled without a check."""
    out: dict[str, float] = {}
    for path in spool_dir(results).glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            doc = json.loads(line)
            out[doc["example_id"]] = sum(r.wall_s for r in pickle.loads(base64.b64decode(doc["results"])))
    return out


def kill_after_spooled(args: list[str], results: Path, kill_after: int, grace_s: float = 0.5,
                       timeout_s: float = 900) -> None:
    """Run the workflow in its own session; once ``kill_after`` examples are spooled, SIGTERM its group
    and SIGKILL it ``grace_s`` later (a Ray actor mid-call does not stop at SIGTERM; Slurm sends SIGKILL
    after ``KillWait``, 30 s by default)."""
    proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "workflows" / "full_grid.py"), *args,
                             f"results_dir={results}"], cwd=REPO_ROOT, start_new_session=True, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    deadline = time.monotonic() + timeout_s
    try:
        while sum(p.read_bytes().count(b"\n") for p in spool_dir(results).glob("*.jsonl")) < kill_after:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the run ended or stalled before {kill_after} examples were spooled:\n"
                                 f"{proc.communicate()[1][-2000:]}")
            time.sleep(0.01)
        tree = psutil.Process(proc.pid).children(recursive=True)  # Ray's processes, some in their own sessions
        os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(grace_s)  # Slurm's KillWait, shortened: the actors decode on until SIGKILL
        for p in tree:  # Slurm kills the job's whole cgroup; these are the run's own processes, by pid
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=300)
        psutil.wait_procs(tree, timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def measure(mode: str, args: list[str], kill_after: int, root: Path) -> Outcome:
    results = root / mode
    kill_after_spooled(args, results, kill_after)
    first = spooled_seconds(results)
    grid = grid_config(args[0].split("=", 1)[1], [*args[1:], f"results_dir={results}"])
    shipped = driver.prepare_spool
    if mode == "before":
        driver.prepare_spool = lambda root, finished: None  # type: ignore[assignment]
    try:
        summary = driver.run_grid(grid, progress=False)
    finally:
        driver.prepare_spool = shipped  # type: ignore[assignment]
    cells = summary.shards_done
    resumed = summary.examples_resumed // cells
    return Outcome(len(first), first, summary.examples // cells - resumed, summary.timings.decode_s,
                   summary.forwards_executed, summary.examples // cells)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    kill_after = int(next((a.split("=", 1)[1] for a in argv if a.startswith("kill_after=")), "6"))
    args = [*DEFAULTS, *(a for a in argv if not a.startswith("kill_after="))]
    grid_name = [a for a in args if a.startswith("grid=")][-1]
    args = [grid_name, *(a for a in args if not a.startswith("grid="))]
    with tempfile.TemporaryDirectory(prefix="bench_requeue_") as tmp:
        got = {mode: measure(mode, args, kill_after, Path(tmp)) for mode in ("before", "after")}
    rows = [("examples in the unit", lambda o: f"{o.examples}"),
            ("finished before the kill", lambda o: f"{o.finished_before_kill}"),
            ("decoded by the rerun", lambda o: f"{o.rerun_decoded}"),
            ("decoded twice", lambda o: f"{o.rerun_decoded + o.finished_before_kill - o.examples}"),
            ("decode s lost (their first attempt)", lambda o: f"{lost(o):.1f}"),
            ("rerun decode s", lambda o: f"{o.rerun_decode_s:.1f}"),
            ("rerun model calls", lambda o: f"{o.rerun_forwards}")]
    print(f"one unit of {' '.join(args)}; SIGTERM, then SIGKILL 0.5 s later, to the run's process group "
          f"after {kill_after} examples spooled")
    print(f"{'':40s} {'before (no spool)':>18s} {'after (spool)':>14s}")
    for label, cell in rows:
        print(f"{label:40s} {cell(got['before']):>18s} {cell(got['after']):>14s}")
    before, after = got["before"], got["after"]
    print(f"rerun decode time after/before: {after.rerun_decode_s / before.rerun_decode_s:.2f} "
          f"(model calls {after.rerun_forwards / before.rerun_forwards:.2f})")
    return 0


def lost(o: Outcome) -> float:
    """Decode seconds the killed attempt spent on examples the rerun decoded again: every spooled one
    without the spool, none with it (the example in flight at the kill is lost either way, not counted)."""
    twice = o.rerun_decoded + o.finished_before_kill - o.examples
    if twice not in (0, o.finished_before_kill):
        return float("nan")  # some spooled lines were skipped: which ones is in the run's warning
    return sum(o.first_attempt_s.values()) if twice else 0.0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
