"""Plugins as a library (xder_cli.runs.plugins): a file loaded once however often it is named, and
a Ray worker's view of the driver's plugins (xder_cli.runs.scheduler.train_one), with the example
package's modules loaded by path (the package itself need not be installed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import xder_cli.runs.experiments as experiment_registry
import xder_cli.runs.plugins as plugins
from xder_cli.runs.scheduler import train_one
from xder_cli.runs.sweep import SweepSpec, plan_trials
from xder_data import benchmark as data_registry
from xder_data import list_benchmarks
from xder_methods import _registry as method_registry
from xder_methods import list_methods
from xder_models import _registry as backbone_registry

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin" / "src" / "xder_plugin_example"


FILES = [str(EXAMPLE / name) for name in ("methods.py", "benchmarks.py", "backbones.py")]


def _forget_plugins() -> None:
    """Back to the registries of the xder packages alone, as in a fresh process."""
    method_registry._METHODS.clear()
    method_registry._METHODS.update(_SNAPSHOT["methods"])
    data_registry._REGISTRY.clear()
    data_registry._REGISTRY.update(_SNAPSHOT["benchmarks"])
    backbone_registry._REGISTRY.clear()
    backbone_registry._REGISTRY.update(_SNAPSHOT["backbones"])
    experiment_registry._EXPERIMENTS.clear()
    experiment_registry._EXPERIMENTS.update(_SNAPSHOT["experiments"])
    plugins._LOADED.clear()
    for name in [m for m in sys.modules if m.startswith("xder_plugin_")]:
        del sys.modules[name]


_SNAPSHOT = {
    "methods": dict(method_registry._METHODS),
    "benchmarks": dict(data_registry._REGISTRY),
    "backbones": dict(backbone_registry._REGISTRY),
    "experiments": dict(experiment_registry._EXPERIMENTS),
}


@pytest.fixture(autouse=True)
def fresh_registries():
    """Each test starts and ends with no plugin registered (the registries are per process)."""
    _forget_plugins()
    yield
    _forget_plugins()


def test_a_ray_worker_loads_the_drivers_plugins(tmp_path: Path) -> None:
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
    _forget_plugins()  # a fresh worker process knows none of them
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
