"""Run-directory files are replaced atomically and the event log trims to the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from xder_cli import rundir


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "results.json"
    rundir.write_json(target, {"faa": 1.0})

    def broken_fsync(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(rundir.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk gone"):
        rundir.write_json(target, {"faa": 2.0})
    monkeypatch.undo()
    assert target.read_text() == '{\n  "faa": 1.0\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary left behind


def test_checkpoint_round_trip_is_weights_only(tmp_path: Path) -> None:
    state = {
        "position": {"task": 1, "epoch": 2},
        "w": torch.arange(3),
        "rng": torch.get_rng_state(),
    }
    rundir.save_checkpoint(tmp_path / "c.pt", state)
    loaded = torch.load(tmp_path / "c.pt", weights_only=True)
    assert loaded["position"] == {"task": 1, "epoch": 2}
    assert torch.equal(loaded["w"], torch.arange(3))


def test_event_log_truncates_to_a_count(tmp_path: Path) -> None:
    log = rundir.EventLog(tmp_path / "events.jsonl")
    for i in range(5):
        log.append({"i": i})
    again = rundir.EventLog(tmp_path / "events.jsonl")
    assert again.count == 5
    again.truncate(3)
    assert (tmp_path / "events.jsonl").read_text().splitlines() == [
        '{"i": 0}',
        '{"i": 1}',
        '{"i": 2}',
    ]
    assert again.count == 3


def test_new_run_dirs_never_collide(tmp_path: Path) -> None:
    a = rundir.new_run_dir(tmp_path, "er", "seq-digits", 200, 0)
    b = rundir.new_run_dir(tmp_path, "er", "seq-digits", 200, 0)
    assert a != b
    assert a.name.endswith("-er-seq-digits-m200-s0")
    assert (a / "plots").is_dir()
