"""Grid machinery figures: forward share of actor time, 1 vs 2 actors, where a grid's wall time goes.

    python bench/bench_grid.py                       # smoke grid with workers=1, then workers=2
    python bench/bench_grid.py grid=smoke models=[tiny-llama]    # any overrides of the grid
    python bench/bench_grid.py --only grid=local     # one run of the embedded default grid
    python bench/bench_grid.py --scaling             # 2 vs 1 actors on a grid where start-up is < 10 %
    python bench/bench_grid.py --scaling --repeat=3  # three pairs (1 then 2, 2 then 1, 1 then 2), median ratio
    python bench/bench_grid.py --per-model           # forward share per model, one in-process actor each

Each run goes to a fresh temporary results directory (nothing is resumed). Printed per run:
wall (end to end), Ray start, plan, model load (summed over actors), decode (actor run_shard time,
load excluded), forward (time inside model forwards), scoring, writing; the forward share
(forward / decode), the start-up share (Ray start + plan + one actor's model load, over the wall) and
examples per second of wall time. With two runs, the throughput ratio: end to end, without Ray start,
and at equal decode CPU per example (:func:`equal_cpu_ratio`: the machine's speed drift between the two
runs taken out, everything the grid adds kept). ``--per-model`` runs each model's
shards through one in-process :class:`~jobs.run.actors.ModelActor` (no Ray) and prints its forward share
(what the rest of each family's decode time is: docs/experiments.md, issue 15). Every grid run also
prints the CPU seconds of the actor processes and of everything else it started (Ray's daemons, CPU
workers, this driver): what shares the cores with the actors. ``bench/bench_cores.py`` measures the
ceiling the cores themselves allow two actors.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.grid.plan import plan_grid  # noqa: E402
from jobs.run.actors import ModelActor  # noqa: E402
from jobs.run.driver import GridSummary, run_grid  # noqa: E402
from streamgen.config import grid_config  # noqa: E402

# A grid big enough that Ray start, planning and model load are < 10 % of the run with 1 and with 2
# actors (all 747 CoEdIT examples × {greedy, τ = 0.5}, tiny model; text scoring: no sandbox competes with
# the actors). At 32 tokens, sharing made it too fast: the 2-actor run's start-up share was 12.5 %.
SCALING = ["grid=smoke", "models=[tiny-llama]", "benchmarks=[coedit]", "limit=1000", "shard_size=25",
           "max_new_tokens=64"]


class CpuByProcess:
    """CPU seconds of this process and every descendant (Ray's daemons, actors, CPU workers), sampled
    each ``interval_s`` while a run lasts: who else used the cores the actors decode on."""

    def __init__(self, interval_s: float = 1.0, *, from_now: bool = False) -> None:
        """``interval_s``: each sample walks the process tree (~2 ms). ``from_now``: processes already
        running count from their CPU at the first sample (default: only this process does; the others
        are taken to have started with the run)."""
        import psutil

        self._psutil, self.interval_s, self._from_now = psutil, interval_s, from_now
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> CpuByProcess:
        self._sample(baseline=self._from_now)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()  # what ran since the last sample (processes still alive)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self, baseline: bool = False) -> None:
        """``baseline``: every process's CPU so far predates the run (``from_now``'s first sample)."""
        me = self._psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    label = "driver (this process)" if proc.pid == me.pid else _label(proc.cmdline())
            except self._psutil.Error:  # exited between listing and reading
                continue
            self._record(proc.pid, label, t.user + t.system, first=baseline or proc.pid == me.pid)

    def _record(self, pid: int, label: str, cpu: float, first: bool = False) -> None:
        """A sample of ``pid``; ``first``: its CPU so far predates the run (this process), else counts."""
        self._first.setdefault(pid, cpu if first else 0.0)
        if label == "?" and pid in self._last:  # an exiting process (a killed actor) has no cmdline left
            label = self._last[pid][0]
        self._last[pid] = (label, cpu)

    def seconds(self) -> Counter[str]:
        """CPU seconds per process label over the run (a process's last sample: up to ``interval_s`` lost)."""
        out: Counter[str] = Counter()
        for pid, (label, cpu) in self._last.items():
            out[label] += cpu - self._first.get(pid, 0.0)
        return out


def _label(cmdline: list[str]) -> str:
    """``ray::ModelActor.run_unit`` → ``ray::ModelActor``; a daemon by its program's file name."""
    if not cmdline:
        return "?"
    if cmdline[0].startswith("ray::"):
        return cmdline[0].split()[0].split(".")[0]
    prog = next((Path(a).name for a in cmdline[1:] if a.endswith(".py")), Path(cmdline[0]).name)
    return prog


def run_once(name: str, overrides: list[str]) -> GridSummary:
    with tempfile.TemporaryDirectory(prefix="bench_grid_") as tmp, CpuByProcess() as cpu:
        grid = grid_config(name, [*overrides, f"results_dir={tmp}"])
        summary = run_grid(grid, progress=False)
    report_cpu(cpu.seconds(), summary.wall_s)
    return summary


def report_cpu(seconds: Counter[str], wall_s: float) -> None:
    actors = sum(v for k, v in seconds.items() if k == "ray::ModelActor")
    others = {k: v for k, v in seconds.items() if k != "ray::ModelActor"}
    top = ", ".join(f"{k} {v:.1f}" for k, v in sorted(others.items(), key=lambda kv: -kv[1])[:6])
    print(f"CPU seconds during the run: actor processes {actors:.1f}; everything else {sum(others.values()):.1f} "
          f"({sum(others.values()) / max(wall_s, 1e-9):.2f} of a core on average): {top}")


def report(label: str, s: GridSummary) -> None:
    t = s.timings
    rate = s.examples / s.wall_s if s.wall_s else float("nan")
    print(f"{label}: wall {s.wall_s:.1f} s | ray start {t.ray_start_s:.1f} | plan {t.plan_s:.1f} | "
          f"load {t.load_s:.1f} | decode {t.decode_s:.1f} (forwards {t.forward_s:.1f}, CPU {t.decode_cpu_s:.1f}) | "
          f"scoring {t.score_s:.1f} | writing {t.write_s:.2f} | actors {len(s.devices)}")
    print(f"{label}: {s.examples} examples, {s.shards_done} shards, {s.errors} errors; "
          f"forward share of actor decode time {s.forward_share:.3f}; "
          f"of decode+load {t.forward_s / max(t.decode_s + t.load_s, 1e-9):.3f}; {rate:.3f} examples/s; "
          f"start-up share {startup_share(s):.3f}")


def startup_share(s: GridSummary) -> float:
    """(Ray start + planning + one actor's model load) / wall: the part more actors cannot shorten
    (actors load in parallel, so the summed load is divided by their number)."""
    t = s.timings
    return (t.ray_start_s + t.plan_s + t.load_s / max(len(s.devices), 1)) / s.wall_s if s.wall_s else float("nan")


def equal_cpu_ratio(one: GridSummary, two: GridSummary) -> float:
    """2-vs-1 throughput as if both runs had decoded at the same speed: the end-to-end ratio times the
    actors' decode CPU per example of the 2-actor run over the 1-actor run's. This machine's speed
    drifts (the same work took 9.8-13.2 s from one 10-s run to the next, docs/experiments.md), so the
    raw ratio of two runs minutes apart measures the machine as much as the grid; what this keeps is
    everything the grid adds (start-up, co-tenancy: actors waiting for a core, the tail). It also
    removes what two decoding processes cost each other in CPU time, which ``bench_cores.py`` measures
    (0.99-1.03x on this machine): divide by that for the raw ratio a steady machine would give."""
    return throughput_ratio(one, two) * cpu_per_example_ratio(one, two)


def throughput_ratio(one: GridSummary, two: GridSummary) -> float:
    """Examples per second of wall time, ``two`` over ``one`` (end to end)."""
    return (two.examples / two.wall_s) / (one.examples / one.wall_s)


def cpu_per_example_ratio(one: GridSummary, two: GridSummary) -> float:
    """The actors' decode CPU per example, ``two`` over ``one``."""
    return (two.timings.decode_cpu_s / two.examples) / (one.timings.decode_cpu_s / one.examples)


def per_model_share(name: str, overrides: list[str]) -> None:
    """Each model's shards through one in-process actor (its first shard warms it up, uncounted)."""
    plan = plan_grid(grid_config(name, overrides))
    for model, cfg in plan.models.items():
        tasks = [plan.task(sh, "bench", "bench") for sh in plan.shards if sh.cell.model.name == model]
        actor = ModelActor(cfg, threads=1)
        decoded = [actor.run_shard(t) for t in tasks]
        busy, fwd = sum(d.busy_s for d in decoded[1:]), sum(d.forward_wall_s for d in decoded[1:])
        print(f"{model}: {len(tasks) - 1} shards after one warm-up, decode {busy:.1f} s, forwards {fwd:.1f} s, "
              f"forward share {fwd / busy if busy else float('nan'):.3f}")


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING)
    print(f"load average at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    only, per_model = "--only" in argv, "--per-model" in argv
    repeat = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--repeat=")), 1)
    args = [a for a in argv if a not in ("--only", "--per-model", "--scaling") and not a.startswith("--repeat=")]
    if "--scaling" in argv:
        args = [*SCALING, *args]
    name = next((a.split("=", 1)[1] for a in args if a.startswith("grid=")), "smoke")
    overrides = [a for a in args if not a.startswith("grid=")]
    if per_model:
        per_model_share(name, overrides)
        return 0
    if only:
        report(name, run_once(name, overrides))
        return 0
    ratios: list[tuple[float, float]] = []
    for i in range(repeat):  # 1 2, 2 1, 1 2, ...: the machine's speed drifts over minutes; pairs bracket it,
        tag = f" (pair {i + 1} of {repeat})" if repeat > 1 else ""  # and a steady drift favours neither side
        runs: dict[int, GridSummary] = {}
        for workers in ((1, 2) if i % 2 == 0 else (2, 1)):
            runs[workers] = run_once(name, [*overrides, f"workers={workers}"])
            report(f"{name} workers={workers}{tag}", runs[workers])
        one, two = runs[1], runs[2]
        end_to_end = throughput_ratio(one, two)
        sched = [s.wall_s - s.timings.ray_start_s - s.timings.plan_s for s in (one, two)]
        ratios.append((end_to_end, sched[0] / sched[1], equal_cpu_ratio(one, two)))
        print(f"throughput ratio 2 vs 1 actors (examples/s, end to end){tag}: {end_to_end:.2f}")
        print(f"throughput ratio without Ray start and planning{tag}: {sched[0] / sched[1]:.2f}")
        print(f"throughput ratio at equal decode CPU per example{tag}: {ratios[-1][2]:.2f} (the 2-actor run's "
              f"actors took {cpu_per_example_ratio(one, two):.3f}x the CPU per example of the 1-actor run's: the machine's speed between the runs, and the two actors' cost to each other)")
    if repeat > 1:
        def listed(k: int) -> str:
            return f"{', '.join(f'{r[k]:.2f}' for r in ratios)} (median {statistics.median(r[k] for r in ratios):.2f})"
        print(f"over {repeat} pairs: end to end {listed(0)}; without Ray start {listed(1)}; "
              f"at equal decode CPU {listed(2)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
