"""One set of flags on every command that trains (train, sweep, experiment), and an unknown flag
refused by the subcommand that was given it."""

from __future__ import annotations

import pytest

from xder_cli.commands.common import RUN_FLAGS, run_flag_settings
from xder_cli.main import build_parser, main

GIVEN = ["--epochs", "2", "--data-root", "d", "--device", "cpu", "--threads", "1"]
EXPECTED = {"train.epochs": 2, "run.data_root": "d", "run.device": "cpu", "run.threads": 1}
COMMANDS = {
    "train": ["train"],
    "sweep": ["sweep", "GRID.toml", "--out", "o"],
    "experiment": ["experiment", "table", "--out", "o"],
}
WHOSE = {"train": "", "sweep": " of every trial", "experiment": " of every run"}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_training_command_takes_the_run_flags_alike(command: str) -> None:
    args = build_parser().parse_args([*COMMANDS[command], *GIVEN])
    assert run_flag_settings(args) == EXPECTED
    assert run_flag_settings(build_parser().parse_args(COMMANDS[command])) == {}
    subparsers = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    helps = {a.option_strings[0]: a.help for a in subparsers[command]._actions if a.option_strings}
    for run_flag in RUN_FLAGS:  # the same help on each, naming whose setting it is
        assert helps[run_flag.flag] == run_flag.help.format(of=WHOSE[command])


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["experiment", "table", "--out", "o", "--bogus", "1"], "xder-run experiment"),
        (["train", "--bogus"], "xder-run train"),
        (["data", "info", "seq-digits", "--bogus"], "xder-run data info"),
    ],
)
def test_an_unknown_flag_names_the_subcommands_help(argv: list[str], command: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{command}: error: unrecognized arguments: --bogus")
    assert err.rstrip().endswith(f"(see {command} --help)")
    assert len(err.strip().splitlines()) == 1
