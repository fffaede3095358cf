"""The README's claims on seq-digits, rerun in full over seeds 0-4 (slow: about ten minutes on two
CPU cores)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

XDER_RUN = str(Path(sys.executable).parent / "xder-run")
SEEDS = (0, 1, 2, 3, 4)


def faa(out: Path, method: str, *extra: str) -> float:
    values = []
    for seed in SEEDS:
        target = out / "-".join([method, *extra, str(seed)])
        result = subprocess.run(
            [
                XDER_RUN,
                "train",
                "--method",
                method,
                "--seed",
                str(seed),
                "--device",
                "cpu",
                "--out",
                str(target),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        (run,) = [p for p in target.iterdir() if p.is_dir()]
        values.append(json.loads((run / "results.json").read_text())["faa"])
    return statistics.mean(values)


@pytest.mark.slow
def test_fine_tuning_is_far_below_replay_and_derpp_at_least_er(tmp_path: Path) -> None:
    sgd, er, derpp = faa(tmp_path, "sgd"), faa(tmp_path, "er"), faa(tmp_path, "derpp")
    assert sgd < er - 50
    assert derpp >= er


@pytest.mark.slow
def test_tuned_preset_improves_xder_over_the_paper_values(tmp_path: Path) -> None:
    assert faa(tmp_path, "xder") > faa(tmp_path, "xder", "--preset", "none") + 3
