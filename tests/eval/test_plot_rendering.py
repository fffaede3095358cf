"""Every plot of xder_eval rendered (Agg) at the size it is written and read back from its Figure:
titles inside the figure, every axis labelled, legends off the data (``check_readable`` in
tests/conftest.py); accuracy axes that follow the data, untrained matrix cells masked, the ECE in
percent, the run named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from xder_eval import (
    RunRecord,
    build_report,
    plot_accuracy_curves,
    plot_accuracy_matrix,
    plot_reliability_diagram,
    plot_report_curves,
    plot_report_matrix,
    reliability_bins,
)
from xder_eval.plots import NOT_TRAINED, percent_limits

RUN = "20260101-120000-xder-seq-digits-m200-s0"
TASK_IL = [  # square: row t holds every task after training task t
    [100.0, 49.0, 40.0, 49.0, 47.0],
    [100.0, 75.0, 44.0, 49.0, 51.0],
    [100.0, 56.0, 60.0, 45.0, 39.0],
    [100.0, 82.0, 99.0, 92.0, 30.0],
    [100.0, 87.0, 97.0, 99.0, 89.0],
]
CLASS_IL = [
    [100.0],
    [48.0, 75.0],
    [86.0, 35.0, 60.0],
    [63.0, 61.0, 74.0, 80.0],
    [63.0, 37.0, 32.0, 27.0, 84.0],
]


def test_percent_limits_follow_the_data() -> None:
    assert percent_limits([94.2, 100.0]) == (70.0, 100.0)  # at least 30 points wide, downwards first
    assert percent_limits([3.0, 97.0]) == (0.0, 100.0)
    assert percent_limits([50.0, 51.0]) == (25.0, 55.0)
    assert percent_limits([20.0, 80.0]) == (15.0, 85.0)  # wide enough: margin 3, steps of 5
    assert percent_limits([100.0]) == (70.0, 100.0)
    assert percent_limits([1.0]) == (0.0, 30.0)  # widened upwards where 0 stops it
    assert percent_limits([float("nan")]) == (0.0, 100.0)


def test_accuracy_curves_zoom_on_the_data_and_keep_100_inside(
    tmp_path: Path, saved_figures, readable
) -> None:
    curves = {"Class-IL": [100.0, 97.0, 95.5, 96.0, 94.2], "Task-IL": [100.0, 100.0, 100.0, 99.8, 100.0]}
    plot_accuracy_curves(curves, tmp_path / "accuracy.png", title="xder on seq-digits: accuracy", run=RUN)
    fig = saved_figures["accuracy.png"]
    readable(fig, run=RUN)
    (ax,) = fig.axes
    low, high = ax.get_ylim()
    assert 50 < low < 94.2
    assert high > 100
    task_il = next(line for line in ax.lines if line.get_label() == "Task-IL")
    tops = task_il.get_transform().transform(np.column_stack(task_il.get_data()))[:, 1]
    assert tops.max() < ax.bbox.y1 - 2  # the line at 100 is drawn inside the frame, not on it
    assert len({line.get_marker() for line in ax.lines}) == 2

    assert list(ax.get_xticks()) == [1, 2, 3, 4, 5]

    plot_accuracy_curves({"Class-IL": [95.0, 40.0, 5.0]}, tmp_path / "wide.png")
    assert saved_figures["wide.png"].axes[0].get_ylim()[0] < 0  # 5-95: the whole range, padded

    plot_accuracy_curves({"Class-IL": [96.0], "Task-IL": [96.0]}, tmp_path / "one.png")
    (ax,) = saved_figures["one.png"].axes
    assert list(ax.get_xticks()) == [1]  # one task: one tick, at 1
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1"]
    assert ax.get_ylim()[1] - ax.get_ylim()[0] >= 30  # a one-point run is not blown up


@pytest.mark.parametrize(
    ("matrix", "untrained"),
    [(TASK_IL, 10), (CLASS_IL, 10), ([[98.0, 50.0], [89.0, 97.0]], 1), ([[98.0]], 0)],
    ids=["task-il-5", "class-il-5", "task-il-2", "one-task"],
)
def test_accuracy_matrix_masks_untrained_cells(
    matrix, untrained, tmp_path: Path, saved_figures, readable
) -> None:
    plot_accuracy_matrix(
        matrix, tmp_path / "m.png", title="xder on seq-digits: Task-IL accuracy (%)", run=RUN
    )
    fig = saved_figures["m.png"]
    readable(fig, run=RUN)
    ax = fig.axes[0]
    (image,) = ax.images
    grid = image.get_array()
    n = len(matrix)
    for t in range(n):
        for i in range(grid.shape[1]):
            assert bool(np.ma.getmaskarray(grid)[t, i]) == (i > t), (t, i)
    numbers = {(round(text.get_position()[1]), round(text.get_position()[0])) for text in ax.texts}
    assert numbers == {(t, i) for t in range(n) for i in range(t + 1)}  # trained cells only
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == untrained
    legends = [text.get_text() for legend in fig.legends for text in legend.get_texts()]
    assert legends == ([NOT_TRAINED] if untrained else [])


def test_a_two_task_matrix_with_a_long_title_fits(tmp_path: Path, saved_figures, readable) -> None:
    title = (
        "derpp [paper; train.epochs=1, backbone.width=4] on seq-digits m200\nmean Class-IL accuracy (%), n=3"
    )
    plot_accuracy_matrix([[98.0], [89.0, 97.0]], tmp_path / "m.png", title=title)
    readable(saved_figures["m.png"])


def test_reliability_diagram_gives_the_ece_in_percent(tmp_path: Path, saved_figures, readable) -> None:
    generator = torch.Generator().manual_seed(0)
    logits = 2 * torch.randn(500, 10, generator=generator)
    labels = torch.randint(0, 10, (500,), generator=generator)
    bins = reliability_bins(logits.softmax(1), labels, n_bins=15)
    plot_reliability_diagram(bins, tmp_path / "reliability.png", run=RUN)
    fig = saved_figures["reliability.png"]
    readable(fig, run=RUN)
    assert f"(ECE {100 * bins.expected_calibration_error():.2f}%)" in fig.axes[0].get_title()


def _record(method: str, seed: int, cil: list[list[float]], til: list[list[float]]) -> RunRecord:
    config = {
        "run": {"method": method, "benchmark": "seq-digits", "seed": seed, "device": "cpu", "preset": "none"},
        "train": {"epochs": 1},
        "method": {"buffer_size": 200},
    }
    results = {
        "method": method,
        "benchmark": "seq-digits",
        "seed": seed,
        "buffer_size": 200,
        "complete": True,
        "n_tasks": 2,
        "tasks_done": 2,
        "accuracy_matrix": cil,
        "task_il_accuracy_matrix": til,
    }
    return RunRecord(f"runs/{method}-s{seed}", config, results)


def test_report_plots_of_a_two_task_run(tmp_path: Path, saved_figures, readable) -> None:
    records = [
        _record(method, seed, [[99.0 - seed], [90.0 + seed - i, 97.0]], [[99.0, 50.0], [98.0 - i, 99.5]])
        for i, method in enumerate(["er", "derpp", "xder"])
        for seed in range(3)
    ]
    report = build_report(records)
    plot_report_curves(report, report.columns[0], tmp_path / "curves.png")
    curves = saved_figures["curves.png"]
    readable(curves)
    assert curves.axes[0].get_ylim()[0] > 50
    for task_il in (False, True):
        plot_report_matrix(report, report.groups[-1], tmp_path / "matrix.png", task_il=task_il)
        matrix = saved_figures["matrix.png"]
        readable(matrix)
        assert np.ma.getmaskarray(matrix.axes[0].images[0].get_array())[0, 1]


def test_the_analyses_plot(tmp_path: Path, saved_figures, readable) -> None:
    from xder_eval import PublishedAnalysis, analysis_rows, plot_analyses

    records = [
        _record(method, seed, [[99.0], [90.0, 97.0]], [[99.0, 50.0], [98.0, 99.5]])
        for method in ["er", "derpp", "xder"]
        for seed in range(2)
    ]
    report = build_report(records)
    analyses = {
        r.path: {
            "ss_err": 0.8 + 0.01 * i,
            "ss_nll": 2.0 + 0.1 * i,
            "ece": {"ece": 0.05 * (i + 1)},
            "head_bias": {
                "per_task": [{"task": 1, "fraction_by_head": [0.2, 0.8]}],
                "newest_head_share": 0.8,
            },
        }
        for i, r in enumerate(records)
    }
    published = [PublishedAnalysis("seq-digits", 200, "xder", "xder", {"ss_err": 0.57, "ss_nll": 1.83})]
    rows = analysis_rows(report, report.columns[0], analyses, published)
    plot_analyses(report.columns[0], rows, tmp_path / "analyses.png", note=RUN)
    fig = saved_figures["analyses.png"]
    readable(fig, run=RUN)
    ss_err = fig.axes[0]
    assert [round(p.get_height(), 3) for p in ss_err.patches] == [0.805, 0.825, 0.845]  # the means
    from matplotlib.collections import PathCollection

    (paper,) = [c for c in ss_err.collections if isinstance(c, PathCollection)]  # the paper's diamond
    offsets = np.asarray(paper.get_offsets())
    assert offsets[np.isfinite(offsets[:, 1])].tolist() == [pytest.approx([2.0, 0.57])]  # X-DER only
    assert [line.get_label() for line in fig.axes[-1].lines] == ["er", "derpp", "xder"]
