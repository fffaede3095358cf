"""The "Use it from Python" page of the documentation (``docs/python-api.md``), run as it stands:
the code below is a verbatim copy of its example (the first test checks that they are the same),
and every name it imports is exported (``__all__``) and documented by its package."""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
from pathlib import Path

import pytest
import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"

EXAMPLE = """\
import torch
from sklearn.datasets import load_digits

from xder_data import benchmark_from_tensors
from xder_eval import final_average_accuracy, final_forgetting
from xder_methods import ContinualSetting, DERppConfig, TrainingSchedule, Transforms, create_method, fit
from xder_models import create_backbone

# Your data: images (N, C, H, W) as uint8 (or floats in [0, 1]) and integer labels.
digits = load_digits()
x = torch.from_numpy(digits.images * 255 / 16).round().to(torch.uint8)[:, None]  # (1797, 1, 8, 8)
y = torch.from_numpy(digits.target)
test = torch.arange(len(y)) % 5 == 0
bench = benchmark_from_tensors(x[~test], y[~test], x[test], y[test], tasks=5)  # 5 tasks x 2 classes

torch.manual_seed(0)
net = create_backbone("resnet18-cifar", bench.num_classes, width=16, in_channels=1)
generator = torch.Generator().manual_seed(0)
method = create_method(
    "derpp",
    net=net,
    setting=ContinualSetting(bench.classes_per_task, bench.input_shape),
    transforms=Transforms(bench.train_transform, bench.test_transform, bench.strong_transform),
    config=DERppConfig(buffer_size=200, alpha=0.1, beta=0.5),
    generator=generator,
)
history = fit(method, bench, TrainingSchedule(epochs=3, batch_size=32, lr=0.05), generator=generator)

for row in history.class_il:  # the accuracy matrix (%): row t = tasks 0..t after training task t
    print(" ".join(f"{accuracy:5.1f}" for accuracy in row))
print(f"FAA {final_average_accuracy(history.class_il):.2f}  FF {final_forgetting(history.class_il):.2f}")
"""


def page_example() -> str:
    text = PAGE.read_text()
    section = text[text.index("# Use it from Python") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


def test_the_copy_is_the_page_example() -> None:
    assert page_example() == EXAMPLE


def test_the_example_runs_and_gives_the_accuracy_matrix() -> None:
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(EXAMPLE, "docs/python-api.md (Use it from Python)", "exec"), namespace)
    history, bench = namespace["history"], namespace["bench"]
    assert bench.n_tasks == 5
    assert bench.classes_per_task == (2, 2, 2, 2, 2)
    matrix = history.class_il
    assert [len(row) for row in matrix] == [1, 2, 3, 4, 5]
    # Exact counts: the test items are every 5th image; by hand from the digits' labels, tasks
    # 0..4 hold 42+28, 26+48, 38+39, 30+26 and 36+47 of them, so each accuracy is k/n_t.
    test_per_task = [70, 74, 77, 56, 83]
    labels = namespace["y"][namespace["test"]]
    assert torch.bincount(labels, minlength=10).view(5, 2).sum(dim=1).tolist() == test_per_task
    for row in matrix:
        for accuracy, n in zip(row, test_per_task, strict=False):
            assert accuracy * n / 100 == pytest.approx(round(accuracy * n / 100), abs=1e-9), row
    assert matrix[0][0] > 90  # task 0 right after it: two classes seen, chance is 50%
    lines = printed.getvalue().splitlines()
    assert len(lines) == 6
    assert lines[-1].startswith("FAA ")
    faa = float(lines[-1].split()[1])
    assert faa == pytest.approx(sum(matrix[-1]) / 5, abs=0.005)
    assert faa > 30  # DER++ after 3 epochs per task; chance is 10% over the 10 classes


def test_every_name_it_imports_is_exported_and_documented() -> None:
    for node in ast.walk(ast.parse(EXAMPLE)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("xder_"):
            package = importlib.import_module(node.module)
            for alias in node.names:
                assert alias.name in package.__all__, f"{node.module}.{alias.name} is not exported"
                assert getattr(package, alias.name).__doc__, f"{node.module}.{alias.name} has no docstring"


RUN_EXAMPLE = """\
from xder_cli.runs import analyse, load_plan, load_run, resolve_run, start_run, train_run
from xder_methods import Callback


class StopAfterFirstTask(Callback):  # stands in for a crash or a lost machine
    def on_task_end(self, loop, record):
        if record.task == 0:
            raise KeyboardInterrupt


# X-DER on seq-digits with its tuned preset, two settings overridden, logged to TensorBoard.
plan = resolve_run(
    "xder",
    "seq-digits",
    preset="tuned",
    seed=0,
    overrides={"train.epochs": 2, "backbone.width": 8},
    loggers=["tensorboard"],
)
run_dir = start_run(plan, "runs")  # runs/<date>-xder-seq-digits-m200-s0/config.toml
try:
    train_run(plan, run_dir, callbacks=[StopAfterFirstTask()])
except KeyboardInterrupt:
    print("stopped after task 1; checkpoint:", (run_dir / "checkpoint.pt").exists())

results = train_run(load_plan(run_dir), run_dir, resume=True)  # from the last checkpoint
print(f"FAA {results['faa']:.2f}  FF {results['ff']:.2f}  tasks {results['tasks_done']}")

run = load_run(run_dir)  # the trained method, its benchmark and its records
ece = analyse(run, "ece")  # also writes run_dir/analysis/reliability.png
print(f"ECE {100 * ece['ece']:.2f}%")
"""


def page_run_example() -> str:
    text = PAGE.read_text()
    section = text[text.index("## A run directory, from Python") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


def test_the_run_example_copy_is_the_page_example() -> None:
    assert page_run_example() == RUN_EXAMPLE


def test_the_run_example_trains_resumes_loads_and_analyses(tmp_path: Path, monkeypatch) -> None:
    import json

    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(RUN_EXAMPLE, "docs/python-api.md (A run directory)", "exec"), namespace)
    run_dir = namespace["run_dir"]
    assert run_dir.parent == Path("runs")
    lines = printed.getvalue().splitlines()
    assert lines[0] == "stopped after task 1; checkpoint: True"
    results = json.loads((run_dir / "results.json").read_text())
    assert results["complete"] is True
    assert [len(row) for row in results["accuracy_matrix"]] == [1, 2, 3, 4, 5]
    assert lines[1] == f"FAA {results['faa']:.2f}  FF {results['ff']:.2f}  tasks 5"
    config = namespace["plan"].config
    assert (config["train"]["epochs"], config["backbone"]["width"], config["run"]["preset"]) == (
        2,
        8,
        "tuned",
    )
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds.count("task") == 5  # task 1 once: the resumed run did not train it again
    assert kinds.count("epoch") == 10
    assert any((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert (run_dir / "analysis" / "reliability.png").is_file()
    ece = namespace["ece"]["ece"]
    assert 0.0 <= ece <= 1.0
    assert lines[2] == f"ECE {100 * ece:.2f}%"


def test_the_data_and_the_methods_name_the_same_scenarios() -> None:
    """xder-data and xder-methods import no sibling, so each spells the scenarios a benchmark can
    declare; the two spellings are one list."""
    import typing

    import xder_data
    import xder_methods

    assert typing.get_args(xder_data.Scenario) == typing.get_args(xder_methods.Scenario)
    assert typing.get_args(xder_methods.Scenario) == xder_methods.SCENARIOS
