"""analysis/figure_pool.py: the report's figures drawn in worker processes are the figures drawn in the
report's process, byte for byte, in the jobs' order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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


def test_jobs_submitted_in_batches_start_the_workers_at_the_threshold_and_come_back_in_order(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path) + _jobs(tmp_path / "more")
    half = figure_pool.PARALLEL_FROM - 1
    with figure_pool.FigurePool(workers=2) as pool:
        pool.submit(jobs[:half])
        assert pool._executor is None  # below the threshold: held, no worker yet
        pool.submit(jobs[half : half + 2])  # a batch smaller than the threshold, the total past it
        assert pool._executor is not None  # the report's second batch (the typing figures) starts them
        pool.submit(jobs[half + 2 :])
        assert pool.paths() == [j.path for j in jobs]
    for job in jobs:
        assert job.path.stat().st_size > 0, job.path


def test_grid_figures_put_median_and_mean_in_the_titles_and_one_key_below(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    drawn = {}
    monkeypatch.setattr(figures, "save_grid", lambda fig, path, nrows, ncols, margins: drawn.update(
        fig=fig, grid=(nrows, ncols), margins=margins))
    values = np.array([1.0, 2.0, 3.0, 4.0, 10.0])  # median 3, mean 20 / 5 = 4
    figures._draw_distribution("s", {"a": values, "b": values * 2}, tmp_path / "x.png")
    fig = drawn["fig"]
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles == ["a (n=5)\nmedian 3.00×, mean 4.00×", "b (n=5)\nmedian 6.00×, mean 8.00×"]
    assert all(ax.get_legend() is None for ax in fig.axes)  # no legend inside a panel
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["1×", "median", "mean"]
    assert drawn["grid"] == (1, 2)


def test_save_grid_places_panels_by_inches(tmp_path: Path) -> None:
    fig = figure_pool.new_figure((10.0, 5.0))
    axes = fig.subplots(2, 2)
    m = figure_pool.GridMargins(left=1.0, right=0.5, bottom=0.5, top=1.0, wgap=0.5, hgap=1.0)
    figure_pool.save_grid(fig, tmp_path / "g.png", 2, 2, m)
    w, h = (10.0 - 1.0 - 0.5 - 0.5) / 2, (5.0 - 0.5 - 1.0 - 1.0) / 2  # each panel's size in inches
    top_left = axes[0][0].get_position()
    assert (top_left.x0 * 10, top_left.width * 10, top_left.height * 5) == pytest.approx((1.0, w, h))
    assert axes[1][1].get_position().x0 * 10 == pytest.approx(1.0 + w + 0.5)
    assert axes[1][1].get_position().y0 * 5 == pytest.approx(0.5)
    assert (tmp_path / "g.png").stat().st_size > 0
