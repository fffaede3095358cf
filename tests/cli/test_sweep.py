"""xder-run sweep as a user types it: one-line usage errors (exit status 2), and --gpus-per-trial, the
old spelling of --gpus-per-run. The sweep itself (a grid on Ray, selection on validation, resumed
trials) is tested as a library in tests/runs/test_sweep.py."""

from __future__ import annotations

from pathlib import Path

from xder_cli.main import main
from xder_cli.runs import sweep as sweep_module

GRID = """\
method = "derpp"
benchmark = "seq-digits"
seeds = [0, 1]
validation = 0.1
[set]
"train.epochs" = 1
"backbone.width" = 4
"run.device" = "cpu"
[grid]
"method.alpha" = [0.1, 0.5]
"method.beta" = [0.5, 1.0]
"""


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "out")
    assert main(["sweep", "--out", out]) == 2
    assert main(["sweep", str(tmp_path / "missing.toml"), "--out", out]) == 2
    assert main(["sweep", "--grid", "paper:seq-cifar100:123:er", "--out", out]) == 2
    assert main(["sweep", "--grid", "paper:seq-cifar100", "--out", out]) == 2
    grid = tmp_path / "grid.toml"
    grid.write_text('method = "er"\nbenchmark = "seq-digits"\n[grid]\n"method.nope" = [1]\n')
    assert main(["sweep", str(grid), "--out", out]) == 2  # a misspelled key
    grid.write_text('method = "my_method"\nbenchmark = "seq-digits"\n[grid]\n"train.lr" = [0.1]\n')
    assert main(["sweep", str(grid), "--out", out]) == 2  # a plugin's method without --plugin
    assert main(["sweep", str(grid), "--out", out, "--epochs", "1", "--buffer-size", "5"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(errors) == 7
    assert all(line.startswith("xder-run sweep: error: ") for line in errors)
    assert not Path(out).exists()  # no mistake leaves an --out folder behind
    assert sweep_module.SWEEP_JSON == "sweep.json"


def test_gpus_per_trial_is_the_old_spelling_of_gpus_per_run(tmp_path: Path, capsys) -> None:
    """One word for a run's GPUs on sweep and experiment; sweep's old flag still works, saying so."""
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    for flag in ("--gpus-per-run", "--gpus-per-trial"):
        assert main(["sweep", str(grid), "--out", str(tmp_path / "out"), flag, "-1"]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"xder-run sweep: error: argument {flag}: must be >= 0, got -1 (see xder-run sweep --help)"
        ]
    missing = str(tmp_path / "missing.toml")  # parsed, then refused: no Ray starts
    assert main(["sweep", missing, "--out", str(tmp_path / "out"), "--gpus-per-trial", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "warning: --gpus-per-trial is deprecated and goes in the next release: use --gpus-per-run "
        "(the same setting)",
        f"xder-run sweep: error: {missing}: no such grid file",
    ]


def test_ctrl_c_says_how_to_continue(tmp_path: Path, capsys, monkeypatch) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "run_sweep", interrupted)
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    assert main(["sweep", str(grid), "--out", str(tmp_path / "out")]) == 130
    assert "interrupted: run the same command again; finished trials are kept" in capsys.readouterr().err
