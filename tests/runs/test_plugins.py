"""Plugins as a library (xder_cli.runs.plugins): a file loaded once however often it is named, and
a Ray worker's view of the driver's plugins (xder_cli.runs.scheduler.train_one), with the example
package's modules loaded by path (the package itself need not be installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import xder_cli.runs.plugins as plugins
from xder_cli.runs.scheduler import train_one
from xder_cli.runs.sweep import SweepSpec, plan_trials
from xder_data import list_benchmarks
from xder_methods import list_methods

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin" / "src" / "xder_plugin_example"


FILES = [str(EXAMPLE / name) for name in ("methods.py", "benchmarks.py", "backbones.py")]


pytestmark = pytest.mark.usefixtures("fresh_registries")


def test_a_ray_worker_loads_the_drivers_plugins(tmp_path: Path, fresh_registries) -> None:
    plugins.load_plugins(FILES)
    assert plugins.loaded_plugins() == tuple(FILES)
    spec = SweepSpec(
        method="er_balanced",
        benchmark="seq-stripes",
        seeds=(0,),
        grid={"method.power": [0.0]},
        fixed={"train.epochs": 1, "run.device": "cpu", "benchmark.per_class": 12},
    )
    (trial,) = plan_trials(spec)
    fresh_registries()  # a fresh worker process knows none of them
    assert "er_balanced" not in list_methods()
    failed = train_one(str(tmp_path / "without"), trial.config)
    assert failed["status"] == "failed"
    assert "unknown benchmark 'seq-stripes'" in failed["error"]
    outcome = train_one(str(tmp_path / "with"), trial.config, plugins=tuple(FILES))
    assert outcome["status"] == "finished", outcome
    results = json.loads((tmp_path / "with" / "results.json").read_text())
    val = results["val_accuracy_matrix"]
    # Validation: round(0.1 x 12) = 1 of each class's 12 train images, 2 per task: 0, 50 or 100%.
    assert [len(row) for row in val] == [1, 2, 3]
    assert {a for row in val for a in row} <= {0.0, 50.0, 100.0}
    assert outcome["val_faa"] == pytest.approx(sum(val[-1]) / 3)
    assert outcome["faa"] == pytest.approx(sum(results["accuracy_matrix"][-1]) / 3)
    assert {"er_balanced"} <= set(list_methods())
    assert "seq-stripes" in list_benchmarks()


def test_loading_a_file_twice_registers_once() -> None:
    first = plugins.load_plugin(FILES[0])
    assert plugins.load_plugin(FILES[0]) is first
    plugins.load_plugins([FILES[0], FILES[0]])
    assert plugins.loaded_plugins() == (FILES[0],)
