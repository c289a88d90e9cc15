"""analysis/figure_pool.py: the report's figures drawn in worker processes are the figures drawn in the
report's process, byte for byte, in the jobs' order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis import figure_pool, figures


def _jobs(out: Path) -> list[figure_pool.FigureJob]:
    rng = np.random.default_rng(7)
    return [figure_pool.FigureJob(figures._draw_distribution,
                                  (f"setting {i}", {f"bench{b}": rng.lognormal(0.3, 0.5, 30) for b in range(i % 3 + 1)}),
                                  out / f"fig-{i}.png")
            for i in range(figure_pool.PARALLEL_FROM)]


def test_figures_drawn_in_a_pool_are_the_figures_drawn_in_process(tmp_path: Path) -> None:
    serial = figure_pool.draw_all(_jobs(tmp_path / "serial"), workers=1)
    pooled = figure_pool.draw_all(_jobs(tmp_path / "pool"), workers=2)
    assert [p.name for p in pooled] == [p.name for p in serial] == [f"fig-{i}.png" for i in range(len(serial))]
    for a, b in zip(serial, pooled, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_few_figures_start_no_worker(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker process was started for a small report")

    monkeypatch.setattr(figure_pool, "ProcessPoolExecutor", no_pool)
    jobs = _jobs(tmp_path)[: figure_pool.PARALLEL_FROM - 1]
    assert figure_pool.draw_all(jobs, workers=2) == [j.path for j in jobs]
