"""Sandbox throughput and overhead against a bare `subprocess.run` of the same program, side by side.

    python bench/bench_sandbox.py                   # every usable backend, 30 programs, 2 workers
    python bench/bench_sandbox.py --n 100 --backends bwrap --workers 2

Latency: the same program run one at a time, bare and sandboxed alternately (so load drifts hit
both alike); overhead = median sandboxed / median bare. Throughput: N programs through
`run_many(workers=W)` against N bare runs on a W-thread pool, in interleaved rounds. The program is a small
HumanEval-style solution plus asserts (what the scorer mostly runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from streamgen.scoring import sandbox
from streamgen.scoring.pool import run_many

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


def bare_run(path: str) -> float:
    start = time.perf_counter()
    # own session like the sandbox: with sched autogroup each session gets its own CPU share
    subprocess.run([sys.executable, "-I", path], check=True, capture_output=True, timeout=30,
                   start_new_session=True)
    return time.perf_counter() - start


def sandboxed_run(backend: str) -> float:
    start = time.perf_counter()
    result = sandbox.execute(PROGRAM, timeout_s=30, backend=backend)
    if result.status != "passed":
        raise RuntimeError(f"benchmark program did not pass under {backend}: {result}")
    return time.perf_counter() - start


def latency(backends: list[str], path: str, n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"bare": [], **{b: [] for b in backends}}
    for _ in range(n):
        times["bare"].append(bare_run(path))
        for b in backends:
            times[b].append(sandboxed_run(b))
    return times


def batch_seconds(backend: str | None, path: str, n: int, workers: int) -> float:
    """Wall seconds to run `n` programs with `workers` at once (bare when backend is None)."""
    start = time.perf_counter()
    if backend is None:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda _: bare_run(path), range(n)))
    else:
        results = run_many([PROGRAM] * n, timeout_s=30, workers=workers, backend=backend)
        assert all(r.status == "passed" for r in results), {r.status for r in results}
    return time.perf_counter() - start


def throughput(backends: list[str], path: str, n: int, workers: int) -> dict[str, float]:
    """Programs per second, measured in interleaved rounds of 2*workers programs per runner."""
    runners: list[str | None] = [None, *backends]
    spent = {r: 0.0 for r in runners}
    done = 0
    while done < n:
        k = min(2 * workers, n - done)
        for r in runners if (done // k) % 2 == 0 else runners[::-1]:
            spent[r] += batch_seconds(r, path, k, workers)
        done += k
    return {r or "bare": n / t for r, t in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=30, help="programs per measurement")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backends", nargs="*", default=None, help="default: every usable backend")
    args = parser.parse_args()
    backends = args.backends or list(sandbox.available_backends())
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(PROGRAM)
    try:
        report(backends, fh.name, args.n, args.workers)
    finally:
        os.unlink(fh.name)


def report(backends: list[str], path: str, n: int, workers: int) -> None:
    print(f"host: {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}; "
          f"n={n}; workers={workers}")
    times = latency(backends, path, n)
    bare_med = statistics.median(times["bare"])
    print(f"{'runner':<12} {'median ms':>10} {'p90 ms':>8} {'overhead':>9}")
    for name, ts in times.items():
        p90 = statistics.quantiles(ts, n=10)[-1]
        print(f"{name:<12} {1000 * statistics.median(ts):>10.1f} {1000 * p90:>8.1f} "
              f"{statistics.median(ts) / bare_med:>8.2f}x")
    tps = throughput(backends, path, n, workers)
    print(f"throughput with {workers} workers (programs/s, interleaved rounds):")
    for name, tp in tps.items():
        print(f"  {name:<12} {tp:6.1f} programs/s  ({tp / tps['bare']:.2f}x of bare)")

if __name__ == "__main__":
    main()
