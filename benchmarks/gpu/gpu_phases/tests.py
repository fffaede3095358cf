"""Phase 3 of the GPU script (``tests``): the GPU checks, ``pytest -m gpu tests/gpu``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import torch
from gpu_phases.common import ROOT, Script

SMOKE_TESTS = "derpp and not replayed"
"""The smoke's GPU checks (``pytest -k``): DER++'s, less the replayed-against-eager runs, which the
``step_graph`` phase trains again (eager and replayed DER++, their matrices compared)."""


def gpu_tests(script: Script, device: torch.device, smoke: bool) -> dict[str, Any]:
    """``pytest -m gpu tests/gpu`` on ``device`` (``XDER_TEST_DEVICE``; smoke: :data:`SMOKE_TESTS`,
    their code on the CPU at a toy width): each test's outcome, from pytest's JUnit XML."""
    import xml.etree.ElementTree as ElementTree

    report = script.out / "tests.xml"
    command = [
        sys.executable, "-m", "pytest", "-m", "gpu", str(ROOT / "tests" / "gpu"), "-q",
        "-p", "no:cacheprovider", f"--junitxml={report}", *(["-k", SMOKE_TESTS] if smoke else []),
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=max(1.0, script.left()),
        check=False,
        env={**os.environ, "XDER_TEST_DEVICE": str(device)},
    )
    (script.out / "tests.log").write_text(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    if not report.exists():
        raise RuntimeError(f"pytest wrote no report (rc {result.returncode}): see tests.log")
    cases = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome = next(
            (child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed"
        )
        cases[case.get("name")] = outcome
    failed = sorted(name for name, outcome in cases.items() if outcome != "passed")
    if result.returncode != 0 or failed or not cases:
        raise RuntimeError(f"gpu tests: {len(failed)} of {len(cases)} not passed: {', '.join(failed)}")
    return {"device": str(device), "seconds": time.monotonic() - started, "tests": cases}
