"""What the run's other CPU work does to its decoding on a CPU device: the cores are shared.

On a GPU the model actors' forwards run on the accelerator, and the CPU work beside them (scoring answers in the
sandbox, Ray starting the scorers' worker processes) does not slow them. On a CPU device it does: the calibration
(``streamgen.sizing.calibration``) times ``workers`` decoders at once with nothing else running, while a run's
decoders share the cores with that *company*. On two cores, two tiny-model actors, the scorer and its worker
start made the smoke grid's decodes 1.4× their CPU time (docs/estimate.md, "The company on a CPU").

The model is a fluid one: every busy process gets an equal share of the cores, at most one core each. ``workers``
decoders are busy during the decoding span T (the decode seconds summed over actors, ``W``, over ``workers``), and
the company's ``company_s`` CPU-seconds are spread evenly over that span: ``o = company_s / T`` more busy processes
on average, but never more than the company's own processes (``processes``: the scorers; a scorer uses at most one
core, so a company larger than that spills past the span). The calibrated seconds ``d`` already hold the decoders'
own sharing (``workers`` of them on ``cores``: each at ``min(1, cores / workers)`` of a core). With
``m = max(workers, cores)``, the decoders are slowed only when the busy processes outnumber the cores:

    W = d · max(1, (workers + o) / m),   o = min(processes, company_s · workers / W)

Where ``o`` is below ``processes`` that is ``m·W² − workers·d·W − workers·d·company_s = 0`` (W its positive root);
else ``W = d · max(1, (workers + processes) / m)``.
"""

from __future__ import annotations

import math
import os

__all__ = ["available_cores", "shared_decode_seconds"]


def shared_decode_seconds(decode_s: float, company_s: float, workers: int, cores: int, processes: int = 1) -> float:
    """The decode seconds (summed over the ``workers`` decoders) when ``company_s`` CPU-seconds of other work, done
    by ``processes`` processes, share ``cores`` cores with them; ``decode_s``: the same decoding timed with the
    decoders alone (module docstring)."""
    n, m, k = max(1, workers), max(1, workers, cores), max(1, processes)
    if decode_s <= 0 or company_s <= 0:
        return decode_s
    nd = n * decode_s
    spread = max(decode_s, (nd + math.sqrt(nd * nd + 4 * m * nd * company_s)) / (2 * m))
    if company_s * n / spread <= k:
        return spread
    return decode_s * max(1.0, (n + k) / m)  # the company's processes busy throughout: it runs on past the span


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity; the CPU count where the platform has none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
