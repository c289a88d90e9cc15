"""Draw the report's figures: each figure is a :class:`FigureJob` (a module-level draw function, its
small pre-aggregated inputs and its path), drawn in a process pool sized to the cores when there are
enough of them to pay for the workers' start.

At the study's size the report draws ~93 figures, each ~0.5–0.85 s of matplotlib layout and drawing
(fixed per figure, not per row), so the figures, not the SQL, set the report's time. The tables are
computed once in the report's process (DuckDB); a worker gets only the few arrays or rows its figure
plots, never a connection. Workers fork from a forkserver that has already imported the figure modules,
so each starts in milliseconds and no DuckDB or Arrow thread of the parent is forked.

The report's grid figures (the speedup histograms, the waits against typing rate: ~90 of the ~93) are
laid out by :func:`save_grid`: fixed margins in inches, one legend per figure, PNG at zlib level 1.
Measured on 3-panel speedup figures (CPU, 0.44 s each at load ~5): ``tight_layout`` was ~35 % of it (it
lays out every text once more to measure it), the three-entry legend in each panel ~20 %, the PNG's zlib
level 6 ~10 %. The study's 93 figures (6 panels each) went from 0.62 to 0.36-0.38 s each at load ~4
(``bench/bench_figures.py``; docs/analysis.md). Figures whose text sizes
vary with the data (the τ sweep's outside legend, the training curve) keep :func:`save`
(``tight_layout``): there are few of them.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
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
    if rect is None:
        fig.tight_layout()
    else:
        fig.tight_layout(rect=rect)
    _write(fig, path)


PNG_OPTIONS = {"compress_level": 1}
"""zlib level 1: the flat-coloured figures compress nearly as well as at the default 6, ~10 % of a figure's time less."""


@dataclass(frozen=True)
class GridMargins:
    """Margins and gaps of a grid of panels, in inches (so they do not change with the panel count):
    room for tick labels and axis labels (``left``, ``bottom``, ``wgap``), panel titles and the
    suptitle (``top``, ``hgap``) and a legend below the panels (``bottom``)."""

    left: float = 0.75
    right: float = 0.2
    bottom: float = 0.6
    top: float = 0.75
    wgap: float = 0.55
    hgap: float = 0.95


def save_grid(fig: Figure, path: Path, nrows: int, ncols: int, margins: GridMargins) -> None:
    """Place an ``nrows`` × ``ncols`` grid of panels by fixed ``margins`` (no ``tight_layout``: it lays out
    every text twice) and write the PNG at ``DPI``."""
    width, height = fig.get_size_inches()
    w = (width - margins.left - margins.right - (ncols - 1) * margins.wgap) / ncols
    h = (height - margins.bottom - margins.top - (nrows - 1) * margins.hgap) / nrows
    fig.subplots_adjust(left=margins.left / width, right=1 - margins.right / width,
                        bottom=margins.bottom / height, top=1 - margins.top / height,
                        wspace=margins.wgap / w, hspace=margins.hgap / h)
    _write(fig, path)


def _write(fig: Figure, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, pil_kwargs=PNG_OPTIONS)
    log.info("wrote %s", path)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _run(job: FigureJob) -> Path:
    job.draw(*job.args, job.path)
    return job.path


class FigurePool:
    """Figures drawn while the caller goes on: ``submit`` jobs as their tables are ready (the report submits
    the speedup figures before it builds the typing tables, so drawing overlaps that SQL and Python), then
    ``paths()`` waits for all. Workers (``workers``, default one per core) start once ``PARALLEL_FROM``
    jobs have been submitted; with fewer, ``paths()`` draws them in this process. Use as a context manager
    (the workers stop on leaving it, also on an error)."""

    def __init__(self, *, workers: int | None = None) -> None:
        self._workers = workers or cores()
        self._held: list[FigureJob] = []  # submitted before the pool started
        self._futures: list[Future[Path]] = []
        self._executor: ProcessPoolExecutor | None = None

    def __enter__(self) -> FigurePool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def submit(self, jobs: Sequence[FigureJob]) -> None:
        self._held += jobs
        if self._executor is None and self._workers > 1 and len(self._held) >= PARALLEL_FROM:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(_PRELOAD)
            self._executor = ProcessPoolExecutor(self._workers, mp_context=context)
        if self._executor is not None:
            self._futures += [self._executor.submit(_run, job) for job in self._held]
            self._held = []

    def paths(self) -> list[Path]:
        """Every submitted figure drawn; their paths in the order submitted."""
        drawn = [future.result() for future in self._futures]
        return drawn + [_run(job) for job in self._held]


def draw_all(jobs: Sequence[FigureJob], *, workers: int | None = None) -> list[Path]:
    """Draw every job (in a pool of ``workers`` processes, default one per core, when there are at least
    ``PARALLEL_FROM`` jobs); returns the paths in the jobs' order."""
    with FigurePool(workers=workers) as pool:
        pool.submit(jobs)
        return pool.paths()
