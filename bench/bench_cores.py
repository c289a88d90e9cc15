"""What this machine allows two actors: the same decode work in one process alone, then in two at once.

    python bench/bench_cores.py                  # the --scaling grid's first work units (tiny-llama, CoEdIT)
    python bench/bench_cores.py units=12         # more units per process
    python bench/bench_cores.py models=[tiny-refusion] benchmarks=[coedit]   # any grid overrides
    python bench/bench_cores.py --ray            # the same, in Ray actors (Ray's daemons running, no driver
                                                 # loop, no scoring): what Ray itself costs two actors

``bench/bench_grid.py --scaling`` compares a grid run with 2 actors against 1. On a machine with as many
cores as actors, that ratio is bounded by what the cores give two processes doing the same work at once,
with nothing else running: no Ray, no driver, no scoring. This bench measures that bound. Each process
builds one in-process :class:`~jobs.run.actors.ModelActor` (one torch thread, as the grid's actors), decodes
one warm-up unit, waits at a barrier, then decodes the same ``units`` work units. Printed: each run's
wall and CPU time, and the ceiling ``2 × T(one alone) / T(slower of two at once)``. The grid's own
ratio divided by this ceiling is what the harness keeps of what the cores allow.

``--ray`` runs the same units in Ray actors on a local Ray (as the grid starts it): the driver submits
each actor's units at once and waits; nothing is scored or written. The gap between the two ceilings
is what Ray's processes (raylet, GCS, dashboard agent, log monitor, idle workers) and the actors' own
Ray threads cost when every core decodes; the gap to the grid's ratio is the driver, scoring and writing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_grid import SCALING  # noqa: E402

SCALING_GRID = [a for a in SCALING if not a.startswith("grid=")]  # bench_grid.py --scaling's grid


def _units(overrides: list[str], count: int) -> tuple[object, list[tuple[object, ...]]]:
    from jobs.grid.plan import plan_grid
    from jobs.grid.units import group_shards
    from streamgen.config import grid_config

    plan = plan_grid(grid_config("smoke", overrides))
    units = group_shards(plan.shards, share=plan.grid.share_work)
    if len(units) < count + 1:
        raise SystemExit(f"the grid has {len(units)} work units; units={count} needs {count + 1} (one warm-up): "
                         "raise limit= or lower units=")
    model = plan.models[units[0][0].cell.model.name]
    return model, [tuple(plan.task(s, "bench", "bench") for s in u) for u in units[: count + 1]]


def _worker(overrides: list[str], count: int, barrier: object, out: object) -> None:
    from jobs.run.actors import ModelActor

    model, tasks = _units(overrides, count)
    actor = ModelActor(model, threads=1)
    actor.run_unit(tasks[0])  # warm-up, uncounted
    barrier.wait()  # type: ignore[attr-defined]
    wall, cpu = time.perf_counter(), time.process_time()
    for unit in tasks[1:]:
        actor.run_unit(unit)
    out.put((time.perf_counter() - wall, time.process_time() - cpu))  # type: ignore[attr-defined]


def run(processes: int, overrides: list[str], count: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each of ``processes`` processes decoding the same units at the same time."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(overrides, count, barrier, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"a bench process exited with {p.exitcode}")
    return results


def run_ray(actors: int, overrides: list[str], count: int) -> list[tuple[float, float]]:
    """:func:`run` in ``actors`` Ray actors: (wall, CPU) per actor, CPU as the actor measured it (its
    ``run_unit`` calls, Ray's threads in the process included); wall from the first unit submitted
    after the warm-up to that actor's last result."""
    import ray

    from jobs.run.actors import spawn_model_actor
    from jobs.run.local_ray import start_ray, stop_ray
    from streamgen.config import grid_config

    grid = grid_config("smoke", [*overrides, f"workers={actors}"])
    session = start_ray(grid.ray, default_num_cpus=grid.workers + grid.score_workers)
    try:
        model, tasks = _units(overrides, count)
        handles = [spawn_model_actor(model, use_gpu=False) for _ in range(actors)]
        ray.get([h.run_unit.remote(tasks[0]) for h in handles])  # load + warm-up, uncounted
        start = time.perf_counter()
        refs = [[h.run_unit.remote(unit) for unit in tasks[1:]] for h in handles]  # queued: back to back
        out = []
        for chain in refs:
            decoded = ray.get(chain)
            cpu = sum(d.cpu_s for unit in decoded for d in unit)  # a unit's first shard carries its CPU time
            out.append((time.perf_counter() - start, cpu))
        return out
    finally:
        stop_ray(session)


def main(argv: list[str]) -> int:
    count = 8
    overrides = list(SCALING_GRID)
    runner = run
    for a in argv:
        if a == "--ray":
            runner = run_ray
        elif a.startswith("units="):
            count = int(a.split("=", 1)[1])
        else:
            overrides.append(a)
    print(f"load average at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {count} work units per "
          f"process after one warm-up; grid overrides {overrides}")
    (one_wall, one_cpu), = runner(1, overrides, count)
    print(f"one process alone: wall {one_wall:.1f} s, CPU {one_cpu:.1f} s")
    two = runner(2, overrides, count)
    for i, (wall, cpu) in enumerate(two):
        print(f"two at once, process {i}: wall {wall:.1f} s, CPU {cpu:.1f} s")
    slower = max(w for w, _ in two)
    cpu_two = sum(c for _, c in two) / 2
    print(f"CPU time for the same work: {cpu_two / one_cpu:.2f}x alone's when both cores decode")
    print(f"ceiling for 2 actors vs 1 on this machine (2 x alone / slower of two): {2 * one_wall / slower:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
