"""What a local Ray costs while nothing runs: CPU seconds per process of a loopback Ray started as the
grid starts it (``jobs.run.local_ray.start_ray``), holding idle actors, over a fixed time.

    python bench/bench_ray_idle.py                # 2 idle actors (num_cpus=3, as a workers=2 grid), 30 s
    python bench/bench_ray_idle.py actors=1 seconds=60

Every process Ray starts (GCS, raylet, dashboard head and agent, runtime-env agent, log monitor,
monitor, the actors' own Ray threads) wakes up on its own timers. On a machine with as many cores as
model actors that CPU is taken from the actors (docs/grid.md, "Ray's own processes"): this prints it
per process, measured by one sample when the wait starts and one when it ends (no sampling in between,
so the bench adds next to nothing itself).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_grid import CpuByProcess  # noqa: E402


class Idle:
    """An actor that only answers ``ready`` (as a model actor waiting for its next unit)."""

    def ready(self) -> int:
        return os.getpid()


def main(argv: list[str]) -> int:
    opts = dict(a.split("=", 1) for a in argv)
    actors, seconds = int(opts.get("actors", 2)), float(opts.get("seconds", 30))
    from jobs.run.local_ray import start_ray, stop_ray  # sets the loopback environment before ray is imported
    from streamgen.config import grid_config

    grid = grid_config("smoke", [f"workers={actors}"])
    session = start_ray(grid.ray, default_num_cpus=grid.workers + grid.score_workers)
    try:
        import ray

        handles = [ray.remote(Idle).options(num_cpus=1).remote() for _ in range(actors)]
        ray.get([h.ready.remote() for h in handles], timeout=120)
        time.sleep(5)  # start-up is over: imports, connections, first reports
        with CpuByProcess(interval_s=seconds + 60, from_now=True) as cpu:  # one sample at each end
            time.sleep(seconds)
        per = cpu.seconds()
    finally:
        stop_ray(session)
    total = sum(per.values())
    from ray._private.utils import get_dashboard_dependency_error  # what Ray itself checks to run minimal

    minimal = get_dashboard_dependency_error() is not None
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {actors} idle actors; "
          f"ray {ray.__version__}; dashboard dependencies {'absent (minimal)' if minimal else 'present'}")
    print(f"CPU seconds over {seconds:.0f} s: {total:.2f} ({total / seconds:.3f} of a core)")
    for label, s in per.most_common():
        print(f"  {label:28s} {s:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
