"""Time from submission to first result: the smoke grid as one Slurm job vs in this process.

    python bench/slurm_latency.py [--repeats 1] [--executors slurm,local]

Prints, per executor: submit → job running (Slurm's own Start − Submit, from sacct; 1 s resolution),
submit → first shard file written, submit → done (the workflow has the summary). Needs the local cluster for ``slurm``
(``sudo bash .ci/slurm.sh start``). Each run writes to a fresh temporary results directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.cluster import executors  # noqa: E402
from jobs.run.driver import run_grid  # noqa: E402
from streamgen.config import cluster_config, grid_config  # noqa: E402


def _first_file(pairs: Path, t0: float, out: dict[str, float], stop: threading.Event) -> None:
    while not stop.is_set():
        if list(pairs.glob("**/*.parquet")):
            out["first_result_s"] = time.perf_counter() - t0
            return
        time.sleep(0.1)


def _slurm_queue_wait(job_id: str) -> float | None:
    out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "Submit,Start"], capture_output=True,
                         text=True, timeout=30, check=False).stdout.split()
    if not out:
        return None
    submit, start = (dt.datetime.fromisoformat(x) for x in out[0].split("|"))
    return (start - submit).total_seconds()


def measure(executor: str, root: Path) -> dict[str, float | None]:
    grid = dataclasses.replace(grid_config("smoke"), results_dir=str(root / executor / "r"))
    marks: dict[str, float | None] = {}
    stop = threading.Event()
    t0 = time.perf_counter()
    watcher = threading.Thread(target=_first_file, args=(Path(grid.results_dir) / "pairs", t0, marks, stop))
    watcher.start()
    try:
        if executor == "local":
            run_grid(grid, progress=False)
        else:
            cluster = dataclasses.replace(cluster_config(executor), log_dir=str(root / executor / "logs"))
            job = executors.submit_grid(grid, cluster)
            executors.follow(job, poll_s=0.5)
            marks["queue_wait_s"] = _slurm_queue_wait(job.job_id) if executor == "slurm" else None
    finally:
        marks["done_s"] = time.perf_counter() - t0
        stop.set()
        watcher.join()
    return marks


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--executors", default="slurm,local")
    args = p.parse_args()
    print("executor  run  queue_wait_s  first_result_s  done_s   (grid=smoke, configs/grid/smoke.yaml)")
    with tempfile.TemporaryDirectory(prefix="slurm-latency-") as tmp:
        for i in range(args.repeats):
            for ex in args.executors.split(","):
                m = measure(ex, Path(tmp) / str(i))
                fmt = {k: "-" if m.get(k) is None else f"{m[k]:.1f}" for k in ("queue_wait_s", "first_result_s", "done_s")}
                print(f"{ex:8s}  {i:3d}  {fmt['queue_wait_s']:>12s}  {fmt['first_result_s']:>14s}  {fmt['done_s']:>6s}",
                      flush=True)


if __name__ == "__main__":
    main()
