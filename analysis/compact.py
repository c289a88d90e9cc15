"""Merge a results directory's per-shard files into one pairs and one steps file (docs/grid.md, 'Compaction').

    python -m analysis.compact results/study      # under the directory's lock; a live run is waited for by nobody:
                                                  # the command says which run holds it and exits 1

A run compacts at its start and end, and a reader compacts a directory that holds many loose shards when
no run holds it, so this is for a directory a killed run left behind, or before copying it elsewhere.
Rows, reports and resume are the same before and after; only the number of files changes.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from streamgen.results.compaction import compact
from streamgen.results.manifest import ManifestError
from streamgen.results.results_dir import ResultsDirError, hold


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.compact", description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not (args.results_dir / "pairs").is_dir():
        print(f"error: {args.results_dir} has no pairs/ folder. Fix: pass the directory a grid run wrote "
              "(it holds pairs/, steps/, runs/)", file=sys.stderr)
        return 2
    try:
        with hold(args.results_dir, "compaction") as lock:
            done = compact(lock)
    except (ResultsDirError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.results_dir}: {done.shards} shards merged ({done.pairs_rows} pairs rows, {done.steps_rows} "
          f"steps rows), {done.left_loose} files left as they are, {done.removed} per-shard files removed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
