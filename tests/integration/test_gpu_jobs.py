"""The queue of GPU jobs (benchmarks/gpu/jobs.py): which jobs a lent machine runs next, and when a
job counts as done (by its results folder, never by hand)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_jobs", ROOT / "benchmarks" / "gpu" / "jobs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def result(folder: Path, *, device: str = "cuda", statuses=("ok",), full: dict | None = None) -> None:
    folder.mkdir(parents=True)
    (folder / "env.json").write_text(json.dumps({"device": device}))
    phases = {f"phase{i}": {"status": status} for i, status in enumerate(statuses)}
    (folder / "summary.json").write_text(json.dumps({"phases": phases}))
    if full is not None:
        (folder / "full_run.json").write_text(json.dumps(full))


def test_the_queue_file_names_each_job_once_with_its_minutes_and_options() -> None:
    jobs = load().jobs()
    names = [job["name"] for job in jobs]
    assert len(names) == len(set(names))
    for job in jobs:
        assert job["minutes"] > 0
        assert job["what"]
        assert all(isinstance(arg, str) for arg in job["args"])


def test_a_job_is_done_only_by_a_complete_result_on_a_gpu(tmp_path: Path) -> None:
    jobs = load()
    job = {"name": "full", "minutes": 9, "args": []}
    assert jobs.done(job, tmp_path) is None
    result(tmp_path / "cpu-2026-01-01" / "full", device="cpu")  # a smoke run on a CPU
    result(tmp_path / "h200-2026-01-02" / "full", statuses=("ok", "error"))  # a phase failed
    cut = {"complete": True, "epochs_per_task": 16, "epochs": 50}  # fewer epochs than the protocol's
    result(tmp_path / "h200-2026-01-03" / "full", full=cut)
    result(tmp_path / "h200-2026-01-04" / "full", full={**cut, "complete": False, "epochs_per_task": 50})
    assert jobs.done(job, tmp_path) is None
    result(tmp_path / "h100-2026-01-05" / "full", full={**cut, "epochs_per_task": 50})
    assert jobs.done(job, tmp_path) == tmp_path / "h100-2026-01-05" / "full"


def test_the_next_jobs_are_the_pending_ones_that_fit_in_order(tmp_path: Path) -> None:
    jobs = load()
    queue = [
        {"name": "a", "minutes": 9, "args": []},
        {"name": "b", "minutes": 9, "args": []},
        {"name": "c", "minutes": 4, "args": []},
        {"name": "d", "minutes": 2, "args": []},
    ]
    assert [j["name"] for j in jobs.plan(queue, 15 * 60, tmp_path)] == ["a", "c", "d"]
    assert [j["name"] for j in jobs.plan(queue, 5 * 60, tmp_path)] == ["c"]
    result(tmp_path / "h200-2026-01-01" / "a")
    assert [j["name"] for j in jobs.plan(queue, 15 * 60, tmp_path)] == ["b", "c", "d"]


def test_collect_files_each_job_under_its_card_and_date(tmp_path: Path) -> None:
    import tarfile

    jobs = load()
    made = tmp_path / "made"
    result(made, device="cuda")
    (made / "env.json").write_text(json.dumps({"device": "cuda", "card": "NVIDIA H200"}))
    (tmp_path / "call" / "gpu").mkdir(parents=True)
    with tarfile.open(tmp_path / "call" / "gpu" / "gpu-tests.tar.gz", "w:gz") as archive:
        for path in made.iterdir():
            archive.add(path, arcname=path.name)
    folders = jobs.collect(tmp_path / "call", tmp_path / "results", "2026-01-02")
    assert folders == [tmp_path / "results" / "h200-2026-01-02" / "gpu-tests"]
    assert jobs.done({"name": "gpu-tests"}, tmp_path / "results") == folders[0]
