"""The results viewer at study scale: write time and size, then load times in headless chromium.

    python bench/bench_view.py                      # 10^5 pairs, ~10^6 steps (synthetic, tests/support/synthetic.py)
    python bench/bench_view.py --pairs 10000 --keep /tmp/v

Generates (or, with ``--keep DIR``, reuses) the synthetic results directory of
``bench/bench_analysis.py``, writes the viewer with ``analysis.view.write_viewer`` (2 DuckDB threads),
then opens ``index.html`` from disk in Debian's chromium (playwright, as the browser tests do) and
times the page load to the first cell's example list, opening one example, and switching to the
largest cell file. The synthetic rows carry no answer texts, so a real study's files are larger.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.view import write_viewer  # noqa: E402
from bench.bench_analysis import data  # noqa: E402
from tests.support.browser_support import chromium  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--steps-per-pair", type=float, default=10.4)
    ap.add_argument("--keep", type=Path, default=None, help="write here and keep the files (reused next time)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-view-"))
    try:
        data(root, args.pairs, args.steps_per_pair)
        t = time.perf_counter()
        viewer = write_viewer(root, threads=2)
        print(f"write_viewer: {time.perf_counter() - t:.1f} s, {viewer.n_cells} cells, {viewer.n_pairs:,} pairs, "
              f"{viewer.n_steps:,} steps, {viewer.bytes_written / 1e6:.1f} MB")
        cells = sorted((p.stat().st_size, p) for p in (viewer.page.parent / "data").glob("cell-*.js"))
        size, largest = cells[-1]
        with chromium({"width": 1100, "height": 1200}) as browser:
            page = browser.new_page()
            t = time.perf_counter()
            page.goto(viewer.page.as_uri())
            page.wait_for_function("document.body.dataset.cell !== undefined", timeout=120_000)
            print(f"page load to the first cell's example list: {time.perf_counter() - t:.2f} s")
            t = time.perf_counter()
            page.locator("#examples tbody tr").first.click()
            page.wait_for_function("document.body.dataset.example !== undefined", timeout=120_000)
            print(f"open an example: {time.perf_counter() - t:.2f} s")
            t = time.perf_counter()
            page.select_option("#cell", largest.stem)
            page.wait_for_function(f"document.body.dataset.cell === {largest.stem!r}", timeout=120_000)
            print(f"switch to the largest cell ({size / 1e6:.1f} MB, "
                  f"{page.get_attribute('#examples', 'data-count')} examples): {time.perf_counter() - t:.2f} s")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
