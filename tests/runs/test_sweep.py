"""A sweep as a library (xder_cli.runs.sweep): a 2x2 grid x 2 seeds on seq-digits through a local
Ray instance, selection on validation, a trial held by another process left alone, and a rerun
that resumes instead of repeating; grids from a preset, from a file (and its mistakes) and the
shipped selection grids, planned."""

from __future__ import annotations

import json
import os
import socket
import statistics
from pathlib import Path

import pytest

from xder_cli.runs import rundir
from xder_cli.runs.errors import SettingError
from xder_cli.runs.lifecycle import RunDisplay, RunLife
from xder_cli.runs.scheduler import PlannedRun
from xder_cli.runs.settings import build_plan
from xder_cli.runs.sweep import load_spec, plan_trials, run_sweep, spec_from_preset, with_settings
from xder_methods import Callback

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


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


class _CrashAfterSecondTask(Callback):
    """Ctrl-C once the second task has ended (after the run's own callbacks: its checkpoint and
    results are written)."""

    def on_task_end(self, loop, record) -> None:
        if record.task == 1:
            raise KeyboardInterrupt


def _interrupt_after_second_task(trial: PlannedRun, run_dir: Path) -> None:
    """Leave ``run_dir`` as a run killed after its second task: checkpoint, partial results."""
    plan = build_plan(trial.config)
    run_dir.mkdir(parents=True)
    (run_dir / "plots").mkdir()
    rundir.write_config(run_dir / "config.toml", plan.config)
    with pytest.raises(KeyboardInterrupt):
        RunLife(RunDisplay([_CrashAfterSecondTask()])).train(plan, run_dir)
    assert json.loads((run_dir / "results.json").read_text())["complete"] is False


def test_grid_on_ray_selects_on_validation_and_resumes(tmp_path: Path) -> None:
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(GRID)
    spec = load_spec(grid_file)
    trials = plan_trials(spec)
    assert len(trials) == 8
    assert len({t.name for t in trials}) == 8
    assert all(t.config["run"]["validation"] == 0.1 for t in trials)
    out = tmp_path / "sweep"
    interrupted = out / "trials" / trials[0].name
    _interrupt_after_second_task(trials[0], interrupted)

    # Another process (the same sweep started twice) holds trial 1: left alone, reported, not selected.
    busy = out / "trials" / trials[1].name
    busy.mkdir()
    with rundir.lock_run_dir(busy, then="-"):
        first = run_sweep(spec, out, max_concurrent=2)
    held = next(t for t in first["trials"] if t["name"] == trials[1].name)
    assert held["status"] == "running elsewhere"
    assert held["held_by"].startswith(f"process {os.getpid()} on host {socket.gethostname()} ")
    assert held["error"] is None
    assert [p.name for p in busy.iterdir()] == [".lock"]  # nothing trained, nothing written
    assert sum(t["status"] == "finished" for t in first["trials"]) == 7
    (point,) = [r for r in first["points"] if r["name"] == trials[1].name.rsplit("-s", 1)[0]]
    assert point["seeds_finished"] == 1
    assert first["best"] is None or first["best"]["name"] != point["name"]
    assert (
        f"- trials/{trials[1].name}: running elsewhere (held by process {os.getpid()} "
        in (out / "sweep.md").read_text()
    )

    # Once it is free, the rerun trains that trial and nothing else.
    summary = run_sweep(spec, out, max_concurrent=2)
    assert [t["name"] for t in summary["trials"] if not t.get("skipped")] == [trials[1].name]

    # Every trial is an ordinary, complete run directory.
    for trial in trials:
        results = json.loads((out / "trials" / trial.name / "results.json").read_text())
        assert results["complete"] is True
        assert results["seed"] == trial.seed
        # Two trials at once on Ray: each ran on its fair share of the cores, fixed for its life
        # (the interrupted one began in this process, alone, before Ray resumed it).
        threads = results["environment"]["threads"]
        share = max(1, (os.cpu_count() or 1) // 2)
        assert threads[-1:] == [share]
        assert trial is trials[0] or threads == [share]
    assert all(t["status"] == "finished" for t in summary["trials"])
    # The interrupted trial continued from its checkpoint; the others started once.
    kinds = [e["event"] for e in _events(interrupted)]
    assert kinds.count("start") == 1
    assert kinds.count("resume") == 1
    assert [e["task"] for e in _events(interrupted) if e["event"] == "task"] == [0, 1, 2, 3, 4]

    # Selection: the best mean VALIDATION FAA over seeds, recomputed from the run directories.
    by_point: dict[tuple, list[float]] = {}
    for trial in trials:
        results = json.loads((out / "trials" / trial.name / "results.json").read_text())
        by_point.setdefault(tuple(trial.tags.values()), []).append(results["val_faa"])
    best_point = max(by_point, key=lambda p: statistics.fmean(by_point[p]))
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["selected_on"] == "validation"
    assert tuple(saved["best"]["point"].values()) == best_point
    assert saved["best"]["val_faa_mean"] == pytest.approx(statistics.fmean(by_point[best_point]))
    assert len(saved["trials"]) == 8
    assert all(t["val_faa"] is not None and t["faa"] is not None for t in saved["trials"])
    assert "Best: method.alpha" in (out / "sweep.md").read_text()

    # Rerunning repeats nothing: every trial is skipped, the run directories are untouched.
    before = {t.name: (out / "trials" / t.name / "events.jsonl").read_bytes() for t in trials}
    again = run_sweep(spec, out, max_concurrent=2)
    assert all(t.get("skipped") for t in again["trials"])
    assert again["best"] == summary["best"]
    assert {t.name: (out / "trials" / t.name / "events.jsonl").read_bytes() for t in trials} == before


def test_grid_from_the_paper_preset() -> None:
    spec = spec_from_preset("paper:seq-cifar100:500:xder-rpc", (0, 1))
    assert spec.method == "xder"
    assert spec.seeds == (0, 1)
    assert spec.grid["method.alpha"] == [0.1, 0.3, 0.7]
    assert spec.fixed["method.future_heads"] == "rpc"
    assert spec.fixed["method.buffer_size"] == 500
    assert spec.fixed["train.epochs"] == 50
    assert "method.alpha" not in spec.fixed
    points = 1
    for values in spec.grid.values():
        points *= len(values)
    assert len(plan_trials(spec)) == 2 * points


def test_a_seed_given_twice_is_refused_before_anything_is_planned() -> None:
    """A trial is named after its seed: seeds (0, 0) would be one run directory counted twice."""
    spec = spec_from_preset("paper:seq-cifar100:500:xder-rpc", (0, 1, 0))
    with pytest.raises(SettingError, match=r"^seeds 0,1,0: seed 0 is given more than once"):
        plan_trials(spec)


def test_the_commands_flags_fix_a_setting_of_every_trial(tmp_path: Path) -> None:
    grid = tmp_path / "GRID.toml"
    grid.write_text(
        'method = "er"\nbenchmark = "seq-digits"\nseeds = [0, 1]\n[grid]\n"train.lr" = [0.1, 0.03]\n'
    )
    spec = with_settings(load_spec(grid), {"train.epochs": 2, "run.threads": 1}, buffer_size=50)
    trials = plan_trials(spec)
    assert len(trials) == 4
    for trial in trials:
        assert trial.config["train"]["epochs"] == 2
        assert trial.config["run"]["threads"] == 1
        assert trial.config["method"]["buffer_size"] == 50
    assert sorted(t.config["train"]["lr"] for t in trials) == [0.03, 0.03, 0.1, 0.1]
    with pytest.raises(SettingError, match=r"train\.lr is searched by the grid"):
        with_settings(load_spec(grid), {"train.lr": 0.5})
    preset = spec_from_preset("paper:seq-cifar100:500:xder-rpc", (0,))
    with pytest.raises(SettingError, match=r"fixes method\.buffer_size already: drop buffer_size"):
        with_settings(preset, {}, buffer_size=200)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('benchmark = "seq-digits"\n[grid]\n"method.alpha" = [0.1]\n', "'method' is missing"),
        ('method = "er"\nbenchmark = "seq-digits"\n[grid]\n"method.alpha" = 0.1\n', "non-empty list"),
        ('method = "er"\nbenchmark = "seq-digits"\nseeds = []\n[grid]\n"train.lr" = [0.1]\n', "seeds"),
        (
            'method = "er"\nbenchmark = "seq-digits"\nseeds = [0, 1, 0]\n[grid]\n"train.lr" = [0.1]\n',
            "seeds 0,1,0: seed 0 is given more than once; each seed is one run, counted once",
        ),
        (
            'method = "er"\nbenchmark = "seq-digits"\nvalidation = 0\n[grid]\n"train.lr" = [0.1]\n',
            "validation",
        ),
        ('method = "er"\nbenchmark = "seq-digits"\nepochs = 3\n[grid]\n"train.lr" = [0.1]\n', "unknown key"),
        ("method = ", "not valid TOML"),
        (
            'method = "er"\nbenchmark = "seq-digits"\n[grid]\nmethod.alpha = [0.1]\n',
            'quote the dotted key, "method.alpha" = ...',
        ),
        (
            'method = "er"\nbenchmark = "seq-digits"\n[set]\ntrain.lr = 0.1\n[grid]\n"method.alpha" = [1]\n',
            'train.lr: quote the dotted key, "train.lr" = ',
        ),
    ],
)
def test_bad_grid_files_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "grid.toml"
    path.write_text(text)
    with pytest.raises(SettingError, match=message):
        load_spec(path)


@pytest.mark.parametrize(
    ("folder", "benchmark", "buffer_size", "methods"),
    [
        ("seq-cifar100-laptop", "seq-cifar100", 500, ["der", "derpp", "er", "er_ace", "icarl", "xder"]),
        (
            "seq-cifar10-laptop",
            "seq-cifar10",
            200,
            ["agem", "derpp", "er", "fdr", "gem", "gss", "hal", "xder"],
        ),
    ],
)
def test_the_shipped_selection_grids_give_every_method_the_same_budget(
    folder: str, benchmark: str, buffer_size: int, methods: list[str]
) -> None:
    """examples/selection/<folder>: one grid per method, each 4 points x 2 seeds on the
    validation split, planned (every configuration valid) as the sweep would run it."""
    grids = sorted((Path(__file__).resolve().parents[2] / "examples" / "selection" / folder).glob("*.toml"))
    assert [g.stem for g in grids] == methods
    for grid in grids:
        spec = load_spec(grid)
        trials = plan_trials(spec)
        assert (spec.method, spec.benchmark, spec.buffer_size) == (grid.stem, benchmark, buffer_size)
        assert (spec.protocol, spec.validation, spec.seeds) == ("laptop", 0.1, (0, 1)), grid.stem
        assert len(trials) == 8, grid.stem
        assert len({json.dumps(t.tags, sort_keys=True) for t in trials}) == 4, grid.stem


def test_a_sweep_grid_names_its_protocol(tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text(
        'method = "derpp"\nbenchmark = "seq-cifar10"\nprotocol = "laptop"\nseeds = [0]\n'
        '[grid]\n"method.alpha" = [0.1, 0.3]\n'
    )
    spec = load_spec(grid)
    assert spec.protocol == "laptop"
    trials = plan_trials(spec)
    assert [t.config["run"]["protocol"] for t in trials] == ["laptop", "laptop"]
    assert {t.config["backbone"]["width"] for t in trials} == {8}
    assert {t.config["train"]["epochs"] for t in trials} == {2}
    assert load_spec(grid, protocol="full").protocol == "full"  # --protocol overrides the file
    assert load_spec(grid, protocol="paper").protocol == "full"  # the full protocol's former name
