"""Run-directory files are replaced atomically, the event log trims to the checkpoint and never
keeps half a line, and one writer at a time holds a run directory's lock."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from xder_cli.runs import rundir


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


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path: Path, planted) -> None:
    (payload, marker), path = planted, tmp_path / "checkpoint.pt"
    torch.save({"position": {"task": 0, "epoch": 1}, "method": payload}, path)
    with pytest.raises(rundir.RunDirError, match=r"cannot load checkpoint .*checkpoint\.pt"):
        rundir.load_checkpoint(path, torch.device("cpu"))
    assert not marker.exists()
    torch.load(path, weights_only=False)  # what a plain torch.load would have done
    assert marker.exists()


def test_a_damaged_checkpoint_is_one_line_that_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    rundir.save_checkpoint(path, {"position": {"task": 0, "epoch": 1}, "w": torch.arange(1000)})
    path.write_bytes(path.read_bytes()[:200])  # cut short, as a full disk or a bad copy leaves it
    with pytest.raises(rundir.RunDirError) as caught:
        rundir.load_checkpoint(path, torch.device("cpu"))
    message = str(caught.value)
    assert "\n" not in message
    assert f"mv {path} {path}.damaged" in message
    assert len(message) < 300 + 3 * len(str(path))  # torch's long message cut short


def test_read_events_reads_what_the_event_log_appended(tmp_path: Path) -> None:
    assert rundir.read_events(tmp_path) == []  # no log yet
    log = rundir.EventLog(tmp_path / rundir.EVENTS)
    for i in range(3):
        log.append({"event": "epoch", "i": i})
    assert rundir.read_events(tmp_path) == [{"event": "epoch", "i": i} for i in range(3)]


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


def _disk_full(fd: int) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_an_event_that_cannot_be_written_leaves_the_log_as_it_was(tmp_path: Path, monkeypatch) -> None:
    log = rundir.EventLog(tmp_path / "events.jsonl")
    log.append({"i": 0})
    monkeypatch.setattr(rundir.os, "fsync", _disk_full)  # the line is written, its fsync fails
    with pytest.raises(OSError, match="No space left"):
        log.append({"i": 1})
    monkeypatch.undo()
    assert (tmp_path / "events.jsonl").read_text() == '{"i": 0}\n'  # no partial line
    assert log.count == 1


def test_write_errors_name_the_file_the_cause_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    then = "continue with xder-run train --resume RUN"
    with pytest.raises(rundir.RunDirWriteError) as error, rundir.write_errors(path, then=then):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / ".checkpoint.pt.x.tmp"))
    assert str(error.value) == (
        f"cannot write {path}: [Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}; free some space, "
        "then continue with xder-run train --resume RUN"
    )


def test_complete_results_reads_only_a_complete_run(tmp_path: Path) -> None:
    assert rundir.complete_results(tmp_path) is None  # no results.json
    (tmp_path / "results.json").write_text("{not json")
    assert rundir.complete_results(tmp_path) is None
    rundir.write_json(tmp_path / "results.json", {"complete": False, "faa": 1.0})
    assert rundir.complete_results(tmp_path) is None
    rundir.write_json(tmp_path / "results.json", {"complete": True, "faa": 1.0})
    assert rundir.complete_results(tmp_path) == {"complete": True, "faa": 1.0}


def test_a_second_writer_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    lock_file = tmp_path / rundir.LOCK
    with rundir.lock_run_dir(tmp_path, then="run it again"):
        holder = json.loads(lock_file.read_text())
        assert (holder["host"], holder["pid"]) == (socket.gethostname(), os.getpid())
        before = (lock_file.read_bytes(), lock_file.stat().st_mtime_ns, sorted(os.listdir(tmp_path)))
        # flock locks belong to an open file: a second open in this very process is a second writer.
        with (
            pytest.raises(rundir.RunDirBusyError) as busy,
            rundir.lock_run_dir(tmp_path, then="run it again"),
        ):
            pytest.fail("two writers hold the lock")
        assert (lock_file.read_bytes(), lock_file.stat().st_mtime_ns, sorted(os.listdir(tmp_path))) == before
    message = str(busy.value)
    assert message.startswith(f"{tmp_path} is in use by process {os.getpid()} on host {socket.gethostname()}")
    assert message.endswith("wait for that process to end (or stop it), then run it again")
    assert busy.value.holder.startswith(f"process {os.getpid()} ")
    assert lock_file.read_bytes() == b""  # released: the holder's name is cleared
    with rundir.lock_run_dir(tmp_path, then="run it again"):  # and the lock can be taken again
        pass


def test_a_holder_killed_with_sigkill_leaves_no_lock(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from xder_cli.runs import rundir\n"
        "with rundir.lock_run_dir(Path(sys.argv[1]), then='retry'):\n"
        "    print('locked', flush=True)\n"
        "    time.sleep(300)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        busy = pytest.raises(rundir.RunDirBusyError, match=f"in use by process {holder.pid} on host ")
        with busy, rundir.lock_run_dir(tmp_path, then="retry"):
            pass
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=30) == -signal.SIGKILL
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert json.loads((tmp_path / rundir.LOCK).read_text())["pid"] == holder.pid  # its name stays...
    with rundir.lock_run_dir(tmp_path, then="retry"):  # ...but the kernel released its lock
        assert json.loads((tmp_path / rundir.LOCK).read_text())["pid"] == os.getpid()


def test_read_results_is_the_one_reader_of_results_json(tmp_path: Path) -> None:
    from xder_cli.runs.rundir import ResultsUnreadableError, complete_results, read_results

    assert read_results(tmp_path) is None  # no file: no results yet
    (tmp_path / "results.json").write_text('{"complete": false, "faa": 1.5}')
    assert read_results(tmp_path) == {"complete": False, "faa": 1.5}
    assert complete_results(tmp_path) is None
    (tmp_path / "results.json").write_text('{"complete": true}')
    assert complete_results(tmp_path) == {"complete": True}
    broken = (("{not json", "unreadable results.json: "), ("[1, 2]", "results.json is not a JSON object"))
    for text, why in broken:
        (tmp_path / "results.json").write_text(text)
        with pytest.raises(ResultsUnreadableError, match=f"^{why}"):
            read_results(tmp_path)
        assert complete_results(tmp_path) is None


def test_a_new_holder_is_named_not_the_killed_one_whose_name_it_has_yet_to_overwrite(
    tmp_path: Path,
) -> None:
    # A killed holder's name stays in the lock file; the next holder takes the lock, then (a moment
    # later) writes its own name. A contender in that moment must not name the dead process.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    stale = {"host": socket.gethostname(), "pid": dead.pid, "since": "2026-01-01T00:00:00"}
    (tmp_path / rundir.LOCK).write_text(json.dumps(stale) + "\n")
    script = (
        "import fcntl, json, os, socket, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(0.5)\n"
        "name = {'host': socket.gethostname(), 'pid': os.getpid(), 'since': 'now'}\n"
        "os.ftruncate(fd, 0); os.pwrite(fd, json.dumps(name).encode(), 0)\n"
        "time.sleep(300)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / rundir.LOCK)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(rundir.RunDirBusyError) as busy, rundir.lock_run_dir(tmp_path, then="retry"):
            pass
    finally:
        holder.kill()
        holder.wait()
    assert busy.value.holder == f"process {holder.pid} on host {socket.gethostname()} (since now)"


def test_a_holder_that_never_writes_its_name_is_called_another_process(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    stale = {"host": socket.gethostname(), "pid": dead.pid, "since": "2026-01-01T00:00:00"}
    (tmp_path / rundir.LOCK).write_text(json.dumps(stale) + "\n")
    fd = os.open(tmp_path / rundir.LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # this process holds it through another open file
        with pytest.raises(rundir.RunDirBusyError) as busy, rundir.lock_run_dir(tmp_path, then="retry"):
            pass
    finally:
        os.close(fd)
    assert busy.value.holder == "another process (it has not written its name into the lock file)"
