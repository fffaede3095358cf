"""``examples/slurm/ray_sweep.sbatch`` run as Slurm would run it on a two-node allocation, with
``srun`` and ``scontrol`` standing in for Slurm's (both "nodes" are this machine): it starts Ray's
head and a Ray worker with ``ray start``, waits for both, and its ``xder-run sweep --address``
trains on both nodes.

The script's Ray nodes outlive it (in Slurm, the job's end stops them): the test stops them itself.
They keep their files, and their address file, under a private ``RAY_TMPDIR``, and the auth token
the script generates goes to a private ``HOME``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "slurm" / "ray_sweep.sbatch"
GRID = """\
method = "er"
benchmark = "seq-digits"
buffer_size = 20
seeds = [0]
[set]
"train.epochs" = 1
"backbone.width" = 4
"train.tasks" = 2
"run.threads" = 1
"run.device" = "cpu"
[grid]
"train.lr" = [0.05, 0.1]
"""
# Stand-ins for Slurm's commands: srun runs its command here, without its options; scontrol lists
# this machine once per node of the allocation.
SRUN = """#!/bin/bash
while [[ $# -gt 0 && $1 == -* ]]; do
    case $1 in -w|--nodes|--ntasks|--exclude) shift 2 ;; *) shift ;; esac
done
exec "$@"
"""
SCONTROL = """#!/bin/bash
for ((i = 0; i < SLURM_JOB_NUM_NODES; i++)); do echo localhost; done
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def session_processes(session: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process of ``session``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session and fields[0] != "Z":  # the session id, after state ppid pgrp
            found.append((int(entry.name), command))
    return found


def stop_session(session: int) -> None:
    """Stop the Ray nodes the script left running: SIGTERM to each ``ray start --block`` (it stops
    its node's processes), then SIGKILL to whatever of the session is left."""
    for pid, command in session_processes(session):
        if "ray start" in command:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while session_processes(session) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid, _ in session_processes(session):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_the_slurm_example_starts_a_two_node_cluster_and_sweeps_on_it(tmp_path: Path) -> None:
    fake = tmp_path / "slurm-bin"
    fake.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    # The submit folder: its .venv is this test's environment.
    submit = tmp_path / "submit"
    (submit / ".venv" / "bin").mkdir(parents=True)
    (submit / ".venv" / "bin" / "activate").write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n')
    grid, out = tmp_path / "grid.toml", tmp_path / "sweep"
    grid.write_text(GRID)

    # The script as a user edits it: its sweep, and a free port for Ray's head.
    script = EXAMPLE.read_text()
    for line in (f"GRID=({grid})", "SEEDS=0", f"OUT={out}", "GPUS_PER_TRIAL=0", f"port={free_port()}"):
        key = line.split("=")[0]
        script, count = re.subn(rf"^{key}=.*$", line, script, count=1, flags=re.MULTILINE)
        assert count == 1, key
    job = tmp_path / "ray_sweep.sbatch"
    job.write_text(script)

    ray_tmp = tempfile.mkdtemp(prefix="xr-", dir="/tmp")  # short: Ray's socket paths
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SLURM_"))}
    env |= {
        "PATH": f"{fake}:{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "RAY_TMPDIR": ray_tmp,
        "OMP_NUM_THREADS": "1",
        "SLURM_SUBMIT_DIR": str(submit),
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_GPUS_ON_NODE": "0",
    }
    log = tmp_path / "job.out"  # a file, not a pipe: the Ray nodes left running would hold a pipe open
    with open(log, "w") as output:
        process = subprocess.Popen(
            ["bash", str(job)], stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            process.wait(timeout=500)
        finally:
            process.kill()
            stop_session(process.pid)
            shutil.rmtree(ray_tmp, ignore_errors=True)
    assert process.returncode == 0, log.read_text()[-5000:]

    summary = json.loads((out / "sweep.json").read_text())
    assert [t["status"] for t in summary["trials"]] == ["finished", "finished"]
    assert len({t["node"]["id"] for t in summary["trials"]}) == 2  # one trial on each Ray node
    assert (tmp_path / "home" / ".ray" / "auth_token").is_file()  # with token authentication
