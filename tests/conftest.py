"""Every test session gets a register of training runs of its own (xder_cli.cpushare): runs a test
starts share cores only with each other, never with whatever else this machine is running, so a
test's numbers do not depend on the machine's other work."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    folder = tempfile.mkdtemp(prefix="xder-test-cpu-share-")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    os.environ["XDER_CPU_SHARE_DIR"] = folder
