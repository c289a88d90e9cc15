"""Draw the report's figures: each figure is a :class:`FigureJob` (a module-level draw function, its
small pre-aggregated inputs and its path), drawn in a process pool sized to the cores when there are
enough of them to pay for the workers' start.

At the study's size the report draws ~93 figures, each ~0.5–0.85 s of matplotlib layout and drawing
(fixed per figure, not per row), so the figures, not the SQL, set the report's time. The tables are
computed once in the report's process (DuckDB); a worker gets only the few arrays or rows its figure
plots, never a connection. Workers fork from a forkserver that has already imported the figure modules,
so each starts in milliseconds and no DuckDB or Arrow thread of the parent is forked.

A figure costs ~0.85 s of CPU whatever its layout mode: measured per 6-panel figure, ``tight_layout`` then
``savefig`` 0.85–0.89 s, the tight or constrained layout engine set at construction 0.88–0.97 s, the
figure built at the dpi it is saved at 0.81–0.91 s (building the axes ~0.17 s, the layout ~0.17 s, the
drawing and PNG ~0.5 s). So the drawing is kept as it was (the PNGs are pixel for pixel the same) and
the time is cut by drawing figures side by side.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

log = logging.getLogger(__name__)

DPI = 110
PARALLEL_FROM = 8
"""Fewer figures than this are drawn in the report's process (a small run's report: no worker start)."""
_PRELOAD = ["analysis.figures", "analysis.timing_figures"]


@dataclass(frozen=True)
class FigureJob:
    """One figure: ``draw(*args, path)`` writes the PNG at ``path``; ``draw`` is a module-level function
    and ``args`` plain data (numbers, strings, numpy arrays, lists of dicts), so the job pickles."""

    draw: Callable[..., None]
    args: tuple[Any, ...]
    path: Path


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure on the Agg canvas (no pyplot state)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: Path, rect: tuple[float, float, float, float] | None = None) -> None:
    """``tight_layout`` (within ``rect``) and write the PNG at ``DPI``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if rect is None:
        fig.tight_layout()
    else:
        fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=DPI)
    log.info("wrote %s", path)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _run(job: FigureJob) -> Path:
    job.draw(*job.args, job.path)
    return job.path


def draw_all(jobs: Sequence[FigureJob], *, workers: int | None = None) -> list[Path]:
    """Draw every job (in a pool of ``workers`` processes, default one per core, when there are at least
    ``PARALLEL_FROM`` jobs); returns the paths in the jobs' order."""
    n = min(workers or cores(), len(jobs))
    if n <= 1 or len(jobs) < PARALLEL_FROM:
        return [_run(job) for job in jobs]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    chunk = max(1, len(jobs) // (n * 4))
    with ProcessPoolExecutor(n, mp_context=context) as pool:
        return list(pool.map(_run, jobs, chunksize=chunk))
