"""The library's errors as the command line words them: every option a message of xder_cli.runs
names has a flag (xder_cli.commands.common.FLAGS), and each such message reaches the user as one
line with the flag, exit status 2, exactly as before the library raised errors of its own; the
settings and calls the library packages' messages name (they spell no flag) reach it as flags and
xder-run commands (xder_cli.arguments.SETTING_FLAGS)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from pathlib import Path

import pytest

import xder_cli.runs
import xder_data
import xder_methods
import xder_models
from xder_cli.arguments import FLAGS, SETTING_FLAGS, SOURCE_FLAGS, error_line, flag
from xder_cli.commands import command_modules
from xder_cli.commands.common import RUN_FLAGS
from xder_cli.main import build_parser, main
from xder_cli.runs.errors import OPTIONS, RunError, SettingError, option
from xder_data import DataNotFoundError, ImportOptionError, ImportOptions, benchmark_defaults
from xder_data import benchmark as data_registry
from xder_data.errors import download_call, prepare_call
from xder_methods import MethodConfigError

RUNS = Path(xder_cli.runs.__file__).parent
PLACEHOLDER = re.compile(r"\{([a-z][a-z_]*(?:\.[a-z_]+)?)\}")


def _placeholders_in_the_library() -> dict[str, set[str]]:
    """Every option a module of xder_cli.runs names: ``option("NAME")`` calls, and ``{NAME}``
    written out in a string that is not a docstring."""
    found: dict[str, set[str]] = {}
    for path in sorted(RUNS.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            names: list[str] = []
            called = getattr(node, "func", None)
            callee = getattr(called, "id", getattr(called, "attr", None))
            if isinstance(node, ast.Call) and callee == "option":
                names = [a.value for a in node.args if isinstance(a, ast.Constant)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [] if id(node) in docstrings else PLACEHOLDER.findall(node.value)
            for name in names:
                found.setdefault(name, set()).add(path.name)
    return found


def _flags_taken() -> set[str]:
    """Every flag of every parser and subparser of xder-run."""
    taken: set[str] = set()
    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            taken.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return taken


def test_every_option_has_a_flag_that_a_command_takes() -> None:
    assert set(FLAGS) == set(OPTIONS)
    assert all(flag(name).startswith(("--", "xder-run ")) for name in OPTIONS)
    commands = {f"xder-run {name}" for name in command_modules()}
    spelt = {flag(name) for name in OPTIONS}
    assert spelt - _flags_taken() - commands == set()


def test_every_placeholder_of_the_library_is_an_option_with_a_flag() -> None:
    found = _placeholders_in_the_library()
    assert {"run.device", "overrides", "buffer_size", "plugin", "run.loggers"} <= set(found)
    unknown = {name: sorted(where) for name, where in found.items() if name not in FLAGS}
    assert not unknown, f"placeholders without a flag in commands.common.FLAGS: {unknown}"


def test_the_command_line_renders_options_as_flags_and_other_errors_as_they_are() -> None:
    error = SettingError(f"run.device 'cuda': no CUDA device here; use {option('run.device')} cpu")
    assert str(error) == "run.device 'cuda': no CUDA device here; use run.device cpu"
    assert error_line(error) == "run.device 'cuda': no CUDA device here; use --device cpu"
    assert error_line(RunError(f"then {option('train_run')} {option('resume')} DIR")) == (
        "then xder-run train --resume DIR"
    )
    other = ValueError("a value\n  on two lines {run.device}")
    assert error_line(other) == "a value on two lines {run.device}"


LIBRARY_PACKAGES = (xder_data, xder_methods, xder_models)
"""The packages whose errors xder-run prints as one line (xder_cli.main)."""
LIBRARY_NAME = re.compile(r"\b(?:ImportOptions|prepare_data)\.[a-z_]+")


def test_the_settings_library_packages_name_have_flags_that_a_command_takes() -> None:
    assert set(SETTING_FLAGS.values()) | set(SOURCE_FLAGS.values()) <= _flags_taken()
    assert {f.key: f.flag for f in RUN_FLAGS if f.key in SETTING_FLAGS} == {"run.data_root": "--data-root"}
    fields = {f"ImportOptions.{f.name}" for f in dataclasses.fields(ImportOptions) if f.name != "progress"}
    assert fields <= set(SETTING_FLAGS)
    named = {
        name
        for package in LIBRARY_PACKAGES
        for path in Path(package.__file__).parent.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for name in LIBRARY_NAME.findall(node.value)
    }
    assert "ImportOptions.num_frames" in named
    assert named <= set(SETTING_FLAGS), f"named without a flag: {sorted(named - set(SETTING_FLAGS))}"


def test_the_command_line_renders_what_library_packages_name_as_flags_and_commands() -> None:
    error = MethodConfigError("method.buffer_size must be >= 0, got -5 (e.g. 200)")
    assert error_line(error) == "--buffer-size must be >= 0, got -5 (e.g. 200)"
    missing = DataNotFoundError(
        f"seq-ntu60 needs its files: run `{prepare_call('ntu60', 'ROOT', source='DIR')}`, "
        f"`{prepare_call('cub200', 'data')}` or `{download_call('cifar10', '/d')}`; run.data_root names "
        "the folder (run.protocol NAME); pass benchmark.cache_dir=DIR, not method.buffer_sizes"
    )
    assert error_line(missing) == (
        "seq-ntu60 needs its files: run `xder-run data prepare ntu60 --raw DIR --data-root ROOT`, "
        "`xder-run data prepare cub200 --data-root data` or `xder-run data download cifar10 --data-root /d`; "
        "--data-root names the folder (--protocol NAME); pass --set benchmark.cache_dir=DIR, not "
        "method.buffer_sizes"
    )
    options = ImportOptionError(
        "ImportOptions.test_per_class re-splits; point prepare_data.source at it, or pass "
        "ImportOptions.miniimagenet_format."
    )
    assert error_line(options) == "--test-per-class re-splits; point --source at it, or pass --format."


def _error(capsys) -> str:
    captured = capsys.readouterr().err
    assert len(captured.strip().splitlines()) == 1, captured
    return captured.strip()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train", "--set", "model.alpha=1"],
            "xder-run train: error: argument --set: --set 'model.alpha=1': the key must be section.name with "
            "section one of run, train, backbone, method, benchmark (see xder-run train --help)",
        ),
        (
            ["train", "--set", "run.method=er"],
            "xder-run train: error: run.method cannot be set with --set: use --method",
        ),
        (
            ["train", "--set", "run.preset=none"],
            "xder-run train: error: run.preset cannot be set with --set: use --preset",
        ),
        (
            ["train", "--benchmark", "seq-cifar100", "--preset", "paper", "--buffer-size", "1000"],
            "xder-run train: error: preset 'paper' has no entry 'xder' for 'seq-cifar100' with buffer "
            "1000 (it has buffer sizes 500, 2000): use --preset none (protocol + the method's defaults) "
            "or another --buffer-size",
        ),
        (
            ["train", "--benchmark", "seq-cifar100", "--preset", "paper:xder-rpc", "--method", "er"],
            "xder-run train: error: preset entry paper:xder-rpc is for method 'xder', not 'er': "
            "pass --method xder",
        ),
        (
            ["train", "--resume", "{tmp}/nowhere"],
            "xder-run train: error: --resume {tmp}/nowhere: no such directory; give a folder that "
            "xder-run train created",
        ),
        (
            ["train", "--resume", "{tmp}"],
            "xder-run train: error: --resume {tmp}: not a run directory (no config.toml); give a folder that "
            "xder-run train created",
        ),
        (
            ["train", "--plugin", "{tmp}/nope.py"],
            "xder-run: error: --plugin {tmp}/nope.py: no such file; give a .py file or an importable "
            "module name",
        ),
        (
            ["train", "--plugin", "{tmp}/notes.txt"],
            "xder-run: error: --plugin {tmp}/notes.txt: not a Python file Python can import",
        ),
        (
            ["experiment", "table", "--benchmark", "seq-cifar10", "--buffer-size", "300", "--out", "{tmp}"],
            "xder-run experiment: error: seq-cifar10 has no published table at buffer size 300: the "
            "published ones are at 200, 500, 5120; pick one with --buffer-size",
        ),
        (
            ["experiment", "table", "--benchmark", "seq-digits", "--out", "{tmp}"],
            "xder-run experiment: error: experiment table needs --buffer-size M, the buffer size of the "
            "published table",
        ),
        (
            [
                "experiment",
                "table",
                "--buffer-size",
                "200",
                "--set",
                "method.buffer_size=20",
                "--out",
                "{tmp}",
            ],
            "xder-run experiment: error: --set method.buffer_size: the experiment sets it: use --buffer-size",
        ),
        (
            ["experiment", "class-order", "--set", "run.method=er", "--out", "{tmp}"],
            "xder-run experiment: error: --set run.method: the experiment sets it: use --methods "
            "(class-order) or --method (sensitivity)",
        ),
        (
            ["experiment", "sensitivity", "--param", "run.seed=1,2", "--out", "{tmp}"],
            "xder-run experiment: error: --param run.seed: the experiment sets it: use --seeds",
        ),
        (
            [
                "experiment",
                "sensitivity",
                "--param",
                "train.lr=0.1",
                "--set",
                "train.lr=0.2",
                "--out",
                "{tmp}",
            ],
            "xder-run experiment: error: --set train.lr: it is varied by --param: give it one way",
        ),
        (
            ["experiment", "flatness", "--pairs", "7", "--out", "{tmp}"],
            "xder-run experiment: error: --pairs: 7 is not a pair of adjacent tasks; pair k is tasks "
            "(k, k+1) with k in 0..3",
        ),
        (
            ["sweep", "--grid", "paper:seq-cifar100", "--out", "{tmp}"],
            "xder-run sweep: error: --grid 'paper:seq-cifar100': write PRESET:BENCHMARK:BUFFER:METHOD, "
            "e.g. paper:seq-cifar100:500:derpp",
        ),
        (
            ["bench", "--benchmark", "seq-digits", "--device", "cpu", "--batch-size", "0"],
            "xder-run bench: error: --batch-size must be >= 1, got 0",
        ),
        (
            ["bench", "--benchmark", "seq-digits", "--device", "cpu", "--task", "9"],
            "xder-run bench: error: --task must be in [0, 4] for seq-digits",
        ),
    ],
)
def test_a_library_error_names_the_flag(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    (tmp_path / "notes.txt").write_text("not Python\n")
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    assert main(argv) == 2
    assert _error(capsys) == message.replace("{tmp}", str(tmp_path))


def test_a_required_benchmark_option_names_the_set_flag(tmp_path: Path, monkeypatch, capsys) -> None:
    def load(root: Path | None, *, classes: int) -> None:
        raise AssertionError("the plan is refused before any data is read")

    loader = (load, {"full": benchmark_defaults("seq-digits")})
    monkeypatch.setitem(data_registry._REGISTRY, "lab-images", loader)
    monkeypatch.setitem(data_registry._SCENARIOS, "lab-images", "class-il")
    assert main(["train", "--benchmark", "lab-images", "--method", "sgd", "--out", str(tmp_path)]) == 2
    assert _error(capsys) == (
        "xder-run train: error: benchmark 'lab-images' needs benchmark.classes: "
        "pass --set benchmark.classes=..."
    )


@pytest.mark.parametrize(
    "argv",
    [["--method", "my_method"], ["--benchmark", "my_benchmark"], ["--set", "backbone.name=my_net"]],
)
def test_an_unknown_name_points_to_plugins(argv: list[str], tmp_path: Path, capsys) -> None:
    assert main(["train", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith("; one a plugin registers? load it with --plugin MODULE_OR_FILE")
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_method_refuses_a_scenario_in_one_line(tmp_path: Path, capsys) -> None:
    """A method that needs task boundaries refuses a general stream before training, with one
    line naming it, the scenario and why, and leaves no run behind."""
    argv = ["train", "--benchmark", "digits-360", "--method", "lwf", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert _error(capsys) == (
        "xder-run train: error: lwf cannot run a general benchmark: it distils from the previous "
        "task's model, and a general stream is one task, so it would never distil "
        "(it runs class-il, task-il)"
    )
    assert list(tmp_path.iterdir()) == []
