"""The report's figures one by one: how many of each kind and the CPU seconds each takes to draw, for two
checkouts side by side on the same results directory.

    python bench/bench_figures.py --dir /tmp/s --before /tmp/code-before    # a directory bench_results_scale built
    python bench/bench_figures.py --dir results/local                        # this checkout only

Each checkout runs in its own process: it builds the tables the figures need (not timed), makes the report's
figure jobs (``analysis.figures`` / ``analysis.timing_figures``) and draws them one after another in that
process (no pool), timing each with ``time.process_time`` (CPU, so a loaded machine moves it less than wall).
The report draws them in a process per core (``analysis.figure_pool``): its drawing wall is about the total
over the cores, plus the workers' start.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_DRAW = """
import json, sys, time
from pathlib import Path
from analysis import figures, timing_figures
from analysis.tables import build_tables
from analysis.typing_table import build_typing
root, out = Path(sys.argv[1]), Path(sys.argv[2])
tables = build_tables(root, ["tau_sweep", "per_example"], threads=1)
typing = build_typing(root, None, threads=1)
t0 = time.process_time()
jobs = (figures.speedup_distributions(tables["per_example"], out) + figures.model_distributions(tables["per_example"], out)
        + figures.tau_sweeps(tables["tau_sweep"], out) + timing_figures.wait_against_rate(typing.summary, out))
made = time.process_time() - t0
jobs[0].draw(*jobs[0].args, out / "warm-up.png")  # the first figure pays for fonts and caches once
seconds = {}
for job in jobs:
    t0 = time.process_time()
    job.draw(*job.args, job.path)
    seconds.setdefault(job.draw.__name__, []).append(time.process_time() - t0)
print(json.dumps({"made": made, "seconds": seconds}))
"""


def measure(code: Path, root: Path) -> dict:
    """One checkout's figure jobs drawn serially in a fresh process: {'made': s, 'seconds': {kind: [s, ...]}}."""
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([sys.executable, "-c", _DRAW, str(root), out], cwd=code, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(code)}, check=False)
    if proc.returncode:
        raise SystemExit(f"{code}: the figures failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="a results directory")
    parser.add_argument("--before", type=Path, default=None, help="another checkout, measured first")
    parser.add_argument("--cores", type=int, default=2, help="cores the report's pool would use (for the wall estimate)")
    args = parser.parse_args()
    codes = ([("before", args.before.resolve())] if args.before else []) + [("after", ROOT)]
    results = {label: measure(code, args.dir.resolve()) for label, code in codes}
    kinds = sorted({k for r in results.values() for k in r["seconds"]})
    print(f"{'figure kind':<20}" + "".join(f" {label + ' n':>9} {label + ' s/fig':>13}" for label, _ in codes))
    for kind in kinds:
        cells = [results[label]["seconds"].get(kind, []) for label, _ in codes]
        print(f"{kind:<20}" + "".join(f" {len(c):>9} {sum(c) / max(len(c), 1):>13.3f}" for c in cells))
    for label, _ in codes:
        every = [s for v in results[label]["seconds"].values() for s in v]
        total = sum(every)
        print(f"{label}: {len(every)} figures, {total:.1f} s CPU ({total / len(every):.3f} s/figure), jobs made in "
              f"{results[label]['made']:.2f} s; drawing on {args.cores} cores ≈ {total / args.cores:.1f} s")
    if args.before:
        b, a = (sum(s for v in results[x]["seconds"].values() for s in v) for x in ("before", "after"))
        print(f"after / before CPU: {a / b:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
