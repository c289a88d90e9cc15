"""An actor's host memory over many forwards: RSS after 10^5 metered forwards of a tiny model.

    python bench/bench_meter_rss.py                    # 100,000 forwards of the tiny llama, bounded log
    python bench/bench_meter_rss.py --unbounded        # the earlier meter: a log of every call
    python bench/bench_meter_rss.py --forwards 20000

Each forward is one metered call of the 2-layer tiny llama on one token (no cache), as a decode step
is. Prints the process's resident set size (``/proc/self/statm``) before the first forward and at every
tenth of the run, and the growth per forward. ``--unbounded`` gives the meter a plain list for its log,
which is what ``ForwardMeter.calls`` was before it became a bounded ``CallLog``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from streamgen.decoding.meter import ForwardMeter  # noqa: E402
from streamgen.models.weights import tiny_model  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--forwards", type=int, default=100_000)
    ap.add_argument("--unbounded", action="store_true", help="a log of every call (the earlier meter)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = tiny_model("llama", 0).eval()
    meter = ForwardMeter(calls=[]) if args.unbounded else ForwardMeter()
    ids = torch.tensor([[1]])
    with torch.inference_mode():
        model(ids)  # allocator and thread pools settle before the first reading
        start = rss_mb()
        print(f"log: {'unbounded list' if args.unbounded else 'bounded CallLog'}; RSS before: {start:.1f} MiB")
        tenth = max(1, args.forwards // 10)
        for i in range(1, args.forwards + 1):
            with meter.call("decode", 1):
                model(ids)
            if i % tenth == 0:
                print(f"  {i:>8,} forwards: RSS {rss_mb():.1f} MiB, log {len(meter.calls):,} calls")
    grown = rss_mb() - start
    print(f"grew {grown:.1f} MiB over {args.forwards:,} forwards ({grown * 2**20 / args.forwards:.0f} bytes/forward); "
          f"meter reading: {meter.reading().forwards:,} forwards")


if __name__ == "__main__":
    main()
