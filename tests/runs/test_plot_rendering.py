"""xder-cli's own plots rendered (Agg) from synthetic inputs and read back from their Figures: the
analyses of ``xder-run analyze`` (through the analyses themselves, on a stand-in run, so that the
call sites are what is tested) and the experiments' plots. Each: titles inside the figure, every
axis labelled, legends off the data (``check_readable`` in tests/conftest.py); the analyses name
their run, number tasks and heads from 1 and classes from 0."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor, nn

from xder_cli.runs.analyses.buffer_logits import analyse_buffer_logits
from xder_cli.runs.analyses.ece import analyse_ece
from xder_cli.runs.analyses.flatness import analyse_flatness
from xder_cli.runs.analyses.future_fewshot_auc import analyse_fewshot
from xder_cli.runs.analyses.grad_norms import analyse_grad_norms
from xder_cli.runs.analyses.head_bias import analyse_head_bias
from xder_cli.runs.experiments.class_order import plot_class_order
from xder_cli.runs.experiments.flatness import REGULARISERS, plot_flatness
from xder_cli.runs.experiments.sensitivity import plot_sensitivity
from xder_cli.runs.experiments.table import plot_table
from xder_cli.runs.published import xder_table_methods
from xder_cli.runs.run_analysis import summary_line

RUN = "20260101-120000-derpp-seq-digits-m200-s0"
CLASSES_PER_TASK = (2, 2, 2)


class _Buffer:
    def __init__(self, logits: Tensor, labels: Tensor) -> None:
        self.logits, self.labels = logits, labels

    def __len__(self) -> int:
        return self.labels.shape[0]


class _Method(nn.Module):
    """A linear classifier with a buffer of stored logits: what the analyses read of a method."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 6)
        labels = torch.arange(6).repeat(5)
        self.buffer = _Buffer(
            torch.randn(30, 6, generator=generator) + 3 * nn.functional.one_hot(labels), labels
        )

    def predict(self, x: Tensor) -> Tensor:
        return self.linear(x)

    def replay_memory(self) -> _Buffer:
        return self.buffer


def _run(tmp_path: Path) -> SimpleNamespace:
    """A stand-in for a trained 3-task run (2 classes per task): its events as ``xder-run train
    --record-analyses`` writes them (2 epochs per task), a method and a benchmark."""
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    x = torch.randn(60, 4, generator=generator)
    y = torch.arange(6).repeat(10)
    events = []
    for t in range(3):
        for epoch in range(2):
            norms = {"stream": 10.0 / (t + epoch + 1)} | ({"buffer": 2.0 + t} if t else {})
            events.append({"event": "epoch", "task": t, "epoch": epoch, "grad_norms": norms})
        counts = [[0] * 3 for _ in range(t + 1)]
        for past in range(t):
            counts[past][t], counts[past][max(t - 1, 0)] = 8, 2
        events.append({"event": "task", "task": t, "head_counts": counts})
        analysis = {"event": "analysis", "task": t}
        if t < 2:
            analysis["fewshot"] = {"auc_mean": 60.0 + 5 * t}
        events.append(analysis)
    bench = SimpleNamespace(
        name="stand-in",
        classes_per_task=CLASSES_PER_TASK,
        num_classes=6,
        n_tasks=3,
        train_x=x,
        train_y=y,
        test_x=x,
        test_y=y,
        test_transform=lambda batch: batch,
        task=lambda t: SimpleNamespace(train=torch.nonzero((y >= 2 * t) & (y < 2 * t + 2)).flatten()),
    )
    run_dir = tmp_path / RUN
    run_dir.mkdir()
    return SimpleNamespace(
        run_dir=run_dir, bench=bench, method=_Method(generator), events=events, device=torch.device("cpu")
    )


ANALYSES = [
    (analyse_ece, "reliability.png"),
    (analyse_head_bias, "head_bias.png"),
    (analyse_grad_norms, "grad_norms.png"),
    (analyse_buffer_logits, "buffer_logits.png"),
    (analyse_fewshot, "fewshot_auc.png"),
    (analyse_flatness, "flatness.png"),
]


@pytest.mark.parametrize(("analysis", "name"), ANALYSES, ids=[name for _, name in ANALYSES])
def test_analysis_plots_read_well_and_name_their_run(
    analysis, name, tmp_path: Path, saved_figures, readable
) -> None:
    run = _run(tmp_path)
    value = analysis(run, tmp_path, SimpleNamespace(max_items=10))
    assert value["plot"] == name
    readable(saved_figures[name], run=RUN)


def test_analysis_plots_count_tasks_and_heads_from_1_and_classes_from_0(
    tmp_path: Path, saved_figures
) -> None:
    run = _run(tmp_path)
    value = analyse_head_bias(run, tmp_path, None)
    ax = saved_figures["head_bias.png"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "3"]  # after tasks 2 and 3 (of 3)
    # After task 3: tasks 1 and 2 each make 10 mistakes, 8 of them in head 3: 16 of 20.
    assert (value["mistakes"], value["newest_head_share"]) == (20, 0.8)
    assert [t.get_text() for t in ax.texts] == ["n=10", "n=20"]  # the count above each bar
    assert summary_line("head_bias", value) == (
        "after the last task, 80.0% of the 20 mistakes on past tasks (16) go to the newest head"
    )
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["head 1 (classes 0-1)", "head 2 (classes 2-3)", "head 3 (classes 4-5)"]

    analyse_fewshot(run, tmp_path, None)
    ax = saved_figures["fewshot_auc.png"].axes[0]
    assert ax.lines[0].get_xdata().tolist() == [1, 2]  # recorded after tasks 0 and 1: tasks 1 and 2

    analyse_grad_norms(run, tmp_path, None)
    ax = saved_figures["grad_norms.png"].axes[0]
    assert ax.lines[0].get_xdata().tolist() == [1, 2, 3, 4, 5, 6]  # epochs over all tasks, from 1
    (top,) = ax.child_axes
    assert [t.get_text() for t in top.get_xticklabels()] == ["1", "2", "3"]  # tasks on the top axis

    analyse_buffer_logits(run, tmp_path, None)
    ax = saved_figures["buffer_logits.png"].axes[0]
    assert ax.get_xlim() == (-0.5, 5.5)  # classes 0-5, by their labels
    assert "0" in [t.get_text() for t in ax.get_xticklabels()]


def _flatness_rows(pairs: int) -> list[dict]:
    cells = {
        reg: {"first_task_accuracy_mean": 50.0 + 25 * i, "first_task_accuracy_std": 4.0}
        for i, reg in enumerate(REGULARISERS)
    }  # llr at 100 ± 4: the tallest error bar still below the legend
    return [{"pair": k, "cells": cells} for k in range(pairs)]


@pytest.mark.parametrize("pairs", [1, 2, 4, 9], ids=["bars-1", "bars-2", "radar-4", "radar-9"])
def test_flatness_plot(pairs: int, tmp_path: Path, saved_figures, readable) -> None:
    plot_flatness({"rows": _flatness_rows(pairs), "benchmark": "seq-cifar100"}, tmp_path / "flatness.png")
    readable(saved_figures["flatness.png"])


def test_class_order_plot(tmp_path: Path, saved_figures, readable) -> None:
    rows = [
        {
            "method": method,
            "cells": {
                "natural": {"faa_mean": 60.0 + 10 * i, "faa_std": 2.0},
                "reversed": {"faa_mean": 97.0, "faa_std": 3.0},
            },
        }
        for i, method in enumerate(["sgd", "er", "derpp", "xder"])
    ]
    plot_class_order({"benchmark": "seq-digits", "rows": rows}, tmp_path / "class_order.png")
    readable(saved_figures["class_order.png"])


def test_sensitivity_plot(tmp_path: Path, saved_figures, readable) -> None:
    params = [
        {
            "key": "method.alpha",
            "base_value": 0.3,
            "rows": [{"value": v, "faa_mean": 90 + 5 * v, "faa_std": 1.0} for v in (0.1, 0.3, 1.0)],
        },
        {
            "key": "train.milestones",
            "base_value": [35, 45],
            "rows": [{"value": v, "faa_mean": 92.0, "faa_std": None} for v in ([35, 45], [20], [10, 20, 30])],
        },
    ]
    summary = {"method": "xder", "benchmark": "seq-digits", "params": params}
    plot_sensitivity(summary, tmp_path / "sensitivity.png")
    fig = saved_figures["sensitivity.png"]
    readable(fig)
    assert all(ax.get_ylim() == fig.axes[0].get_ylim() for ax in fig.axes)  # one range for all panels
    assert fig.axes[0].get_ylim()[0] > 50  # from the data


@pytest.mark.parametrize("mode", ["judged", "orientation", "ours only"])
def test_table_plot(mode: str, tmp_path: Path, saved_figures, readable) -> None:
    entries = [m for m in xder_table_methods() if m != "xder"]  # twelve rows, JT to DER++
    published = mode != "ours only"

    def cell(ours: float, theirs: float) -> dict:
        return {
            "mean": ours,
            "std": 1.5,
            "published": theirs if published else None,
            "published_std": 1.0 if published else None,
        }

    rows = [
        {
            "entry": e,
            "faa": cell(20 + 6 * i, 22 + 6 * i),
            "ff": cell(60 - 4 * i, 58 - 4 * i),
            "task_il": cell(60 + 3 * i, 62 + 3 * i),  # a third panel where published (DER paper)
        }
        for i, e in enumerate(entries)
    ]
    summary = {
        "benchmark": "seq-cifar10",
        "buffer_size": 500,
        "mode": mode,
        "protocol": "laptop",
        "rows": rows,
    }
    plot_table(summary, tmp_path / "table.png")
    readable(saved_figures["table.png"])


def test_a_plot_of_runs_with_overrides_names_them(tmp_path: Path, saved_figures, readable) -> None:
    """An experiment's plot carries its --set overrides above its title (placement keys left out)."""
    rows = [
        {
            "method": "er",
            "cells": {
                "natural": {"faa_mean": 60.0, "faa_std": 2.0},
                "reversed": {"faa_mean": 62.0, "faa_std": 1.0},
            },
        }
    ]
    sets = {"train.epochs": 1, "backbone.width": 4, "run.device": "cpu"}
    plot_class_order({"benchmark": "seq-digits", "rows": rows, "sets": sets}, tmp_path / "class_order.png")
    fig = saved_figures["class_order.png"]
    readable(fig)
    assert fig._suptitle.get_text() == "with overrides: train.epochs=1, backbone.width=4"
    plot_class_order(
        {"benchmark": "seq-digits", "rows": rows, "sets": {"run.device": "cpu"}}, tmp_path / "b.png"
    )
    assert saved_figures["b.png"]._suptitle is None  # nothing that changes what is trained
