"""The one run life (xder_cli.runs.lifecycle.RunLife) and what it builds, on tiny seq-digits runs: a
new run, a complete run returned untouched, a second writer refused, a failed start cleaned up,
and a run shortened by train.tasks loaded back as complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xder_cli.runs import rundir
from xder_cli.runs.errors import RunDirBusyError
from xder_cli.runs.lifecycle import RunDisplay, RunLife, Start, start_run, train_run
from xder_cli.runs.loaded import load_trained_run
from xder_cli.runs.records import Results
from xder_cli.runs.settings import RunPlan, resolve_run
from xder_data import DataNotFoundError

TINY = {"train.epochs": 1, "backbone.width": 4, "run.device": "cpu", "run.threads": 1}


def _plan(method: str = "sgd", **overrides) -> RunPlan:
    return resolve_run(method, "seq-digits", overrides=TINY | overrides)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    """An SGD run of the first two of seq-digits' five tasks (train.tasks = 2), trained to its end."""
    starts: list[Start] = []
    life = RunLife(on_start=lambda start, plan, run_dir: starts.append(start))
    lived = life.new(_plan(**{"train.tasks": 2}), tmp_path_factory.mktemp("runs"))
    assert starts == [Start.NEW]
    assert lived.start is Start.NEW
    assert lived.results["complete"] is True
    return lived.run_dir


def test_a_new_run_is_written_whole(short_run: Path) -> None:
    assert {p.name for p in short_run.iterdir()} >= {"config.toml", "events.jsonl", "results.json", "plots"}
    assert rundir.read_config(short_run / "config.toml")["train"]["tasks"] == 2
    assert len(json.loads((short_run / "results.json").read_text())["accuracy_matrix"]) == 2


def test_results_json_is_the_typed_record(short_run: Path) -> None:
    """Every key of results.json is one the Results record declares, and each it requires is there."""
    results = json.loads((short_run / "results.json").read_text())
    assert set(results) <= set(Results.__annotations__) | set(Results.__optional_keys__)
    assert Results.__required_keys__ <= set(results)


def test_a_complete_run_is_returned_untouched_even_while_another_process_holds_it(short_run: Path) -> None:
    def stamps() -> dict[str, int]:  # the run's files (the lock file is the test's own to touch)
        files = [p for p in short_run.iterdir() if p.is_file() and p.name != ".lock"]
        return {p.name: p.stat().st_mtime_ns for p in files}

    before = stamps()
    starts: list[Start] = []
    with rundir.lock_run_dir(short_run, then="-"):  # e.g. xder-run analyze reading it
        lived = RunLife(on_start=lambda start, plan, run_dir: starts.append(start)).existing(short_run)
    assert (lived.start, starts) == (Start.COMPLETE, [Start.COMPLETE])
    assert lived.results == json.loads((short_run / "results.json").read_text())
    assert stamps() == before


def test_a_second_writer_is_refused_unless_it_waits(tmp_path: Path) -> None:
    run_dir = start_run(_plan(), tmp_path)
    asked: list[int] = []

    def wait_twice() -> bool:
        asked.append(1)
        return len(asked) < 2

    with rundir.lock_run_dir(run_dir, then="-"), pytest.raises(RunDirBusyError, match="is in use by process"):
        RunLife(lock_wait=wait_twice).existing(run_dir)
    assert len(asked) == 2  # asked, waited a second, asked again, gave up
    assert not (run_dir / "events.jsonl").exists()


def test_a_new_run_that_fails_before_its_first_checkpoint_leaves_nothing(tmp_path: Path) -> None:
    plan = resolve_run("sgd", "seq-cifar100", overrides=TINY | {"run.data_root": str(tmp_path / "none")})
    out = tmp_path / "runs"
    with pytest.raises(DataNotFoundError):
        RunLife().new(plan, out)
    assert list(out.iterdir()) == []


def test_train_run_from_python_goes_through_the_same_life(tmp_path: Path) -> None:
    plan = _plan("er", **{"train.tasks": 1})
    run_dir = start_run(plan, tmp_path)
    written = (run_dir / "config.toml").read_bytes()
    notes: list[str] = []
    results = train_run(plan, run_dir, notify=notes.append)
    assert (run_dir / "config.toml").read_bytes() == written  # one writer: start_run's file is the life's
    assert results["complete"] is True
    again = train_run(plan, run_dir, resume=True)  # complete: returned as it is
    assert again == results
    assert RunLife(RunDisplay()).existing(run_dir, plan).start is Start.COMPLETE


def test_a_run_shortened_by_train_tasks_loads_back_complete(short_run: Path) -> None:
    """Its checkpoint is past its last task (2), not the benchmark's (5): complete, as its
    results.json says."""
    run = load_trained_run(short_run)
    assert run.complete is True
    assert run.results["complete"] is True
    assert run.bench.n_tasks == 5
