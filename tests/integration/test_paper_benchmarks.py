"""Runs start and finish end to end on tiny files in the real formats, with the paper's backbones:
Split miniImageNet with EfficientNet-B2 and Split NTU-60 with EfficientGCN-B0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

XDER_RUN = str(Path(sys.executable).parent / "xder-run")


def xder_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([XDER_RUN, *args], capture_output=True, text=True, timeout=600, check=False)


def results_of(out: Path) -> dict:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return json.loads((run / "results.json").read_text()) | {"config": (run / "config.toml").read_text()}


def test_seq_miniimg_with_efficientnet_b2(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "MINIIMG"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, per_class in (("train", 4), ("test", 1)):
        labels = np.repeat(np.arange(100), per_class)
        np.save(folder / f"{split}_x.npy", rng.integers(0, 256, (labels.size, 84, 84, 3), dtype=np.uint8))
        np.save(folder / f"{split}_y.npy", labels)
    out = tmp_path / "runs"
    done = xder_run(
        "train", "--benchmark", "seq-miniimg", "--data-root", str(tmp_path / "data"), "--method", "er",
        "--epochs", "1", "--buffer-size", "20", "--device", "cpu", "--out", str(out),
        "--set", "train.batch_size=8", "--set", "method.minibatch_size=4",
        "--set", "train.eval_batch_size=64", "--set", "train.tasks=3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = results_of(out)
    assert results["complete"]
    # the first 3 of the benchmark's 20 tasks (its split: tests/data/test_miniimagenet.py)
    assert len(results["accuracy_matrix"]) == 3
    assert 'name = "efficientnet-b2"' in results["config"]


def _skeleton(path: Path, n_frames: int, offset: float) -> None:
    lines = [str(n_frames)]
    for f in range(n_frames):
        lines += ["1", "72057594037931101 0 1 1 1 1 0 0.02 0.05 2", "25"]
        lines += [
            f"{offset + 0.01 * f + 0.002 * j} {0.1 + 0.003 * j} 3.0 1 1 1 1 0 0 0 1 2" for j in range(25)
        ]
    path.write_text("\n".join(lines) + "\n")


def test_seq_ntu60_with_efficientgcn_b0_and_xder(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    # One action of each of the paper's six tasks (official ids 18, 23, 14, 44, 19, 34), with a
    # training subject (P001) and a test subject (P003) each.
    for k, action in enumerate((18, 23, 14, 44, 19, 34)):
        for subject in (1, 3):
            _skeleton(
                raw / f"S001C001P{subject:03d}R001A{action:03d}.skeleton", 6 + k, 0.1 * k + 0.05 * subject
            )
    root = tmp_path / "data"
    prepared = xder_run(
        "data", "prepare", "ntu60", "--raw", str(raw), "--data-root", str(root), "--frames", "16"
    )
    assert prepared.returncode == 0, prepared.stderr
    assert "6 train / 6 test samples" in prepared.stdout
    out = tmp_path / "runs"
    done = xder_run(
        "train", "--benchmark", "seq-ntu60", "--data-root", str(root), "--method", "xder", "--epochs", "1",
        "--buffer-size", "12", "--device", "cpu", "--out", str(out),
        "--set", "method.minibatch_size=2", "--set", "method.simclr_batch_size=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = results_of(out)
    assert results["complete"]
    assert [len(row) for row in results["accuracy_matrix"]] == [1, 2, 3, 4, 5, 6]
    assert 'name = "efficientgcn-b0"' in results["config"]
