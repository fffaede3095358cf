"""The library's own errors (xder_cli.runs.errors): one base, RunError, whose messages name
settings and arguments as the library knows them, never a command-line flag; an option is a
placeholder that str() writes as its name and a front end may spell its own way."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

import xder_cli.runs
from xder_cli.runs import errors, rundir
from xder_cli.runs.analyses import RECORD_HINT
from xder_cli.runs.build import resolve_device
from xder_cli.runs.errors import (
    OPTIONS,
    AnalysisSkipped,
    BenchError,
    NonFiniteLossError,
    PluginError,
    ResultsUnreadableError,
    RunDirBusyError,
    RunDirError,
    RunDirWriteError,
    RunError,
    SettingError,
    TrackerError,
    option,
    render,
)
from xder_cli.runs.experiments.common import OWNED_BY_ALL, check_owned
from xder_cli.runs.experiments.flatness import pair_class_order
from xder_cli.runs.experiments.table import table_entries
from xder_cli.runs.plugins import load_plugin
from xder_cli.runs.presets import preset_values
from xder_cli.runs.published import published_table
from xder_cli.runs.settings import parse_assignment, resolve_config
from xder_cli.runs.sweep import spec_from_preset
from xder_cli.runs.trackers import _PACKAGES, check_loggers
from xder_methods import MethodError

FLAG = re.compile(r"(?<![\w-])--[a-z]")
RUNS = Path(xder_cli.runs.__file__).parent


def test_one_base_and_the_kinds_callers_tell_apart() -> None:
    kinds = (SettingError, TrackerError, PluginError, RunDirError, AnalysisSkipped, NonFiniteLossError)
    for kind in (*kinds, BenchError):
        assert issubclass(kind, RunError)
    for kind in (RunDirBusyError, RunDirWriteError, ResultsUnreadableError):
        assert issubclass(kind, RunDirError)
    # A diverged run is still the loop's error, by its name (a sweep records the type's name).
    assert issubclass(NonFiniteLossError, MethodError)
    assert NonFiniteLossError.__name__ == "NonFiniteLossError"


def test_str_names_the_option_and_render_spells_it() -> None:
    error = SettingError(f"run.device 'cuda': no CUDA device here; use {option('run.device')} cpu")
    assert str(error) == "run.device 'cuda': no CUDA device here; use run.device cpu"
    assert error.render(str.upper) == "run.device 'cuda': no CUDA device here; use RUN.DEVICE cpu"
    assert error.template.endswith("use {run.device} cpu")
    # Only the options are placeholders: a value's braces stay as they are.
    text = f"{option('overrides')} {{'alpha': 1}} {{x}} {{run.threads}}"
    assert render(text) == "overrides {'alpha': 1} {x} {run.threads}"
    assert render(text, lambda name: f"<{name}>") == "<overrides> {'alpha': 1} {x} {run.threads}"


def test_an_unknown_option_is_a_bug() -> None:
    with pytest.raises(ValueError, match="not an option"):
        option("run.threads")
    assert all(render(option(name)) == name for name in OPTIONS)


def test_every_message_of_the_library_is_free_of_flags() -> None:
    """No string in a ``raise`` of xder_cli.runs names a command-line flag."""
    offending = []
    for path in sorted(RUNS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            for part in ast.walk(node.exc):
                if isinstance(part, ast.Constant) and isinstance(part.value, str) and FLAG.search(part.value):
                    offending.append(f"{path.name}:{part.lineno}: {part.value}")
    assert not offending, offending


def _raised(call) -> RunError:
    with pytest.raises(RunError) as caught:
        call()
    return caught.value


def test_library_errors_read_without_flags(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(_PACKAGES, "wandb", ("wandb", "xder_no_such_module"))
    (tmp_path / "notes.txt").write_text("not Python\n")
    messages = {
        "overrides": str(_raised(lambda: parse_assignment("method.alpha"))),
        "run.method": str(
            _raised(lambda: resolve_config("sgd", "seq-digits", settings={"run.method": "er"}))
        ),
        "run.device": str(_raised(lambda: resolve_device("cuda"))),
        "preset": str(_raised(lambda: preset_values("paper", "seq-cifar100", "xder", 1000))),
        "method": str(_raised(lambda: preset_values("paper:xder-rpc", "seq-cifar100", "er", 500))),
        "published": str(_raised(lambda: published_table("seq-cifar10", 300))),
        "resume": str(_raised(lambda: rundir.check_run_dir(tmp_path / "nowhere", named_by="resume"))),
        "plugin": str(_raised(lambda: load_plugin(str(tmp_path / "notes.txt")))),
        "loggers": str(_raised(lambda: check_loggers(["wandb"]))),
        "grid": str(_raised(lambda: spec_from_preset("paper:seq-cifar100", None))),
        "seeds": str(_raised(lambda: check_owned({"run.seed": 1}, OWNED_BY_ALL))),
        "pairs": str(_raised(lambda: pair_class_order((2, 2, 2), 2))),
        "table": str(_raised(lambda: table_entries("seq-digits", 0))),
        "record": render(RECORD_HINT),
        "resume hint": render(rundir.resume_hint(tmp_path)),
    }
    for what, message in messages.items():
        assert not FLAG.search(message), (what, message)
    assert messages["overrides"] == (
        "overrides 'method.alpha' needs the form section.key=value, e.g. overrides method.alpha=0.2"
    )
    assert messages["run.method"] == "run.method cannot be set with overrides: use method"
    assert messages["run.device"] == "run.device 'cuda': no CUDA device is available here; use run.device cpu"
    assert messages["preset"].endswith(
        "use preset none (protocol + the method's defaults) or another buffer_size"
    )
    assert messages["method"].endswith("pass method xder")
    assert messages["published"].endswith("pick one with buffer_size")
    assert messages["resume"].startswith(f"resume {tmp_path / 'nowhere'}: no such directory")
    assert messages["loggers"].startswith("run.loggers wandb needs the wandb package (ModuleNotFoundError: ")
    assert messages["plugin"] == f"plugin {tmp_path / 'notes.txt'}: not a Python file Python can import"
    assert messages["record"] == "train it with run.record_analyses (run.record_analyses = true)"
    assert messages["resume hint"] == f"continue with train_run resume {tmp_path}"
    assert messages["grid"].startswith("grid 'paper:seq-cifar100': write PRESET:BENCHMARK:BUFFER:METHOD")
    assert messages["seeds"] == "overrides run.seed: the experiment sets it: use seeds"
    assert messages["pairs"].startswith("pairs: 2 is not a pair of adjacent tasks")
    assert messages["table"] == "buffer_size must be >= 1, got 0"


def test_a_diverged_run_says_where_its_last_good_state_is_without_a_flag() -> None:
    lower = f"lower the learning rate, e.g. {errors.option('overrides')} train.lr=0.01"
    assert str(NonFiniteLossError(f"loss is nan; {lower}")) == (
        "loss is nan; lower the learning rate, e.g. overrides train.lr=0.01"
    )
