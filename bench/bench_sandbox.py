"""Sandbox throughput and overhead against a bare `subprocess.run` of the same program, side by side,
and against the previous (block-list) view of the host, loaded from git.

    python bench/bench_sandbox.py                   # every usable backend, old and new view, 30 programs
    python bench/bench_sandbox.py --n 100 --backends bwrap --workers 2
    python bench/bench_sandbox.py --old-rev none    # skip the old view

Latency: the same program run one at a time, bare and through every runner alternately (so load
drifts hit all alike); overhead = median / median bare. Throughput: N programs per runner on a
W-thread pool, in interleaved rounds. The program is a small HumanEval-style solution plus asserts
(what the scorer mostly runs). Runners named `<backend>-old` are the sandbox as of `--old-rev`
(`--ro-bind / /` plus hidden dirs), imported from `git show` into private modules: the library
itself has only the allow-list view.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from streamgen.scoring import sandbox

# The last commit whose sandbox showed the whole host read-only minus a block-list.
OLD_REV = "6af7dcdfe260a68262a789d21dca94f3752afc62"
REPO = Path(__file__).resolve().parents[1]

PROGRAM = '''
def has_close_elements(numbers, threshold):
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i != j and abs(a - b) < threshold:
                return True
    return False

assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3)
assert not has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05)
assert sum(has_close_elements(list(range(k)), 0.5) for k in range(40)) == 0
'''


Runner = Callable[[], None]


def bare_runner(path: str) -> Runner:
    def run() -> None:
        # own session like the sandbox: with sched autogroup each session gets its own CPU share
        subprocess.run([sys.executable, "-I", path], check=True, capture_output=True, timeout=30,
                       start_new_session=True)
    return run


def sandbox_runner(execute: Callable[..., object], backend: str) -> Runner:
    def run() -> None:
        result = execute(PROGRAM, timeout_s=30, backend=backend)
        if result.status != "passed":  # type: ignore[attr-defined]
            raise RuntimeError(f"benchmark program did not pass under {backend}: {result}")
    return run


def old_sandbox(rev: str) -> object:
    """The sandbox module as of `rev` (its _isolation and sandbox files), importable beside today's."""
    folder = Path(tempfile.mkdtemp(prefix="bench-old-sandbox-"))
    for name in ("_isolation", "sandbox"):
        text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:streamgen/scoring/{name}.py"],
                              check=True, capture_output=True, text=True).stdout
        text = text.replace("from streamgen.scoring import _isolation as iso", "import old_isolation as iso")
        text = text.replace("from streamgen.scoring._isolation import", "from old_isolation import")
        (folder / f"old{name if name.startswith('_') else '_' + name}.py").write_text(text)
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module("old_sandbox")
    finally:
        sys.path.remove(str(folder))
        shutil.rmtree(folder)


def runners(backends: list[str], path: str, old_rev: str) -> dict[str, Runner]:
    found: dict[str, Runner] = {"bare": bare_runner(path)}
    old = None if old_rev == "none" else old_sandbox(old_rev)
    old_usable = old.available_backends() if old is not None else ()  # type: ignore[attr-defined]
    for b in backends:
        found[b] = sandbox_runner(sandbox.execute, b)
        if b in old_usable and b != "rlimit-only":  # rlimit-only has no view to compare
            found[f"{b}-old"] = sandbox_runner(old.execute, b)  # type: ignore[union-attr]
        elif old is not None and b != "rlimit-only":
            print(f"note: the old view's {b} backend does not work here (see its probe log); not measured")
    return found


def seconds(run: Runner) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def latency(runs: dict[str, Runner], n: int) -> dict[str, list[float]]:
    for run in runs.values():  # warm-up, untimed: backend probes, the interpreter's view resolution
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(n):
        for name, run in runs.items():
            times[name].append(seconds(run))
    return times


def batch_seconds(run: Runner, n: int, workers: int) -> float:
    """Wall seconds to run `n` programs with `workers` at once."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda _: run(), range(n)))
    return time.perf_counter() - start


def throughput(runs: dict[str, Runner], n: int, workers: int) -> dict[str, float]:
    """Programs per second, measured in interleaved rounds of 2*workers programs per runner."""
    names = list(runs)
    spent = dict.fromkeys(names, 0.0)
    done = 0
    while done < n:
        k = min(2 * workers, n - done)
        for name in names if (done // k) % 2 == 0 else names[::-1]:
            spent[name] += batch_seconds(runs[name], k, workers)
        done += k
    return {name: n / t for name, t in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=30, help="programs per measurement")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backends", nargs="*", default=None, help="default: every usable backend")
    parser.add_argument("--old-rev", default=OLD_REV, help="git revision of the old view ('none': skip it)")
    args = parser.parse_args()
    backends = args.backends or list(sandbox.available_backends())
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(PROGRAM)
    try:
        report(runners(backends, fh.name, args.old_rev), args.n, args.workers)
    finally:
        os.unlink(fh.name)


def report(runs: dict[str, Runner], n: int, workers: int) -> None:
    print(f"host: {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}; "
          f"n={n}; workers={workers}; view {sandbox.VIEW_VERSION}")
    times = latency(runs, n)
    bare_med = statistics.median(times["bare"])
    print(f"{'runner':<12} {'median ms':>10} {'p90 ms':>8} {'overhead':>9}")
    for name, ts in times.items():
        p90 = statistics.quantiles(ts, n=10)[-1]
        print(f"{name:<12} {1000 * statistics.median(ts):>10.1f} {1000 * p90:>8.1f} "
              f"{statistics.median(ts) / bare_med:>8.2f}x")
    tps = throughput(runs, n, workers)
    print(f"throughput with {workers} workers (programs/s, interleaved rounds):")
    for name, tp in tps.items():
        print(f"  {name:<12} {tp:6.1f} programs/s  ({tp / tps['bare']:.2f}x of bare)")
    for name in [r for r in tps if f"{r}-old" in tps]:
        lat = statistics.median(times[name]) / statistics.median(times[f"{name}-old"])
        print(f"  {name} new view / old view: latency {lat:.2f}x, throughput {tps[name] / tps[name + '-old']:.2f}x")


if __name__ == "__main__":
    main()
