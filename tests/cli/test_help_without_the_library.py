"""``xder-run --help``, every command's ``--help`` and the usage mistakes answer without importing
the library (torch, the four library packages): each case runs ``main`` in a fresh interpreter
and reports what it imported. A handler that runs imports them (the control case), and a plugin
given with ``--plugin`` still loads before the parser and is listed in its help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from xder_cli.commands import COMMANDS

LIBRARY = ("torch", "xder_data", "xder_methods", "xder_models", "xder_eval")
PROBE = (
    "import json, sys\n"
    "from xder_cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    f"loaded = [name for name in {LIBRARY!r} if name in sys.modules]\n"
    "print(json.dumps({'code': code, 'loaded': loaded}))\n"
)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin" / "src" / "xder_plugin_example"


def run_main(argv: list[str]) -> tuple[int, list[str], str, str]:
    """``main(argv)`` in a fresh interpreter: its exit status, the library modules it imported,
    its stdout (less the probe's line) and its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=300, check=False
    )
    *out, last = done.stdout.splitlines() or [""]
    try:
        report = json.loads(last)
    except json.JSONDecodeError:
        pytest.fail(f"main{argv} did not return: {done.stderr}")
    return report["code"], report["loaded"], "\n".join(out), done.stderr


HELP = [
    ["--help"],
    *([command, "--help"] for command in COMMANDS),
    *(["data", action, "--help"] for action in ("info", "prepare", "download")),
]


@pytest.mark.parametrize("argv", HELP, ids=" ".join)
def test_help_imports_no_library(argv: list[str]) -> None:
    code, loaded, out, _ = run_main(argv)
    assert code == 0
    assert out.startswith("usage: xder-run")
    assert loaded == []


MISTAKES = {
    "no command": ([], "the following arguments are required: COMMAND"),
    "unknown flag": (["train", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    "bad number": (["train", "--epochs", "many"], "argument --epochs: invalid int value: 'many'"),
    "bad --set": (["train", "--set", "lr"], "argument --set:"),
    "bad class order": (["train", "--class-order", "sideways"], "argument --class-order:"),
    "missing argument": (["experiment", "flatness"], "the following arguments are required: --out"),
    "unknown experiment": (["experiment", "nope", "--out", "x"], "argument NAME: invalid choice: 'nope'"),
    "unknown importer": (["data", "prepare", "nope"], "argument KIND: invalid choice: 'nope'"),
    "bad process count": (["bench", "--concurrent", "1"], "--concurrent: takes process counts of at least 2"),
    "unknown logger": (["sweep", "--out", "x", "--logger", "nope"], "argument --logger: invalid choice"),
}


@pytest.mark.parametrize("case", MISTAKES)
def test_usage_mistakes_are_one_line_without_the_library(case: str) -> None:
    argv, message = MISTAKES[case]
    code, loaded, _, err = run_main(argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert message in err
    assert loaded == []


def test_a_former_protocol_name_warns_without_the_library() -> None:
    code, loaded, _, err = run_main(["bench", "--protocol", "paper", "--steps", "few"])
    assert code == 2
    assert "warning: --protocol paper is now called full" in err
    assert "argument --steps: invalid int value: 'few'" in err
    assert loaded == []


def test_a_handler_imports_the_library() -> None:
    """The control: the probe sees the library once a command's handler runs."""
    code, loaded, _, err = run_main(["data", "info", "no-such-benchmark"])
    assert code == 2
    assert "unknown benchmark 'no-such-benchmark'" in err
    assert "torch" in loaded


def test_a_plugin_still_loads_first_and_is_listed_in_the_help() -> None:
    code, loaded, out, _ = run_main(["--plugin", str(EXAMPLE / "methods.py"), "train", "--help"])
    assert code == 0
    assert "er_balanced" in out
    assert "xder_methods" in loaded
