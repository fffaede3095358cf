"""--protocol through the CLI: one-line errors; seq-cifar10 end to end on a tiny image-folder copy
(data prepare cifar10, data info, train --protocol laptop, recorded in config.toml, the last partial
batch kept); seq-cifar100's laptop protocol on tiny files in the official format (data info). The
protocol in the library (the resolved plan, sweep grids, bench) is tested in tests/runs
(test_settings.py, test_sweep.py, test_bench.py)."""

from __future__ import annotations

import json
import pickle
import tomllib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from xder_cli.main import main
from xder_cli.runs.rundir import read_config
from xder_cli.runs.settings import build_plan

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CIFAR-10 image-folder copy (10 train / 2 test PNGs per class), imported with
    ``xder-run data prepare cifar10``."""
    base = tmp_path_factory.mktemp("cifar10")
    rng = np.random.default_rng(0)
    for split, count in (("train", 10), ("test", 2)):
        for cls in CLASSES:
            (base / "copy" / split / cls).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(base / "copy" / split / cls / f"{i:04d}.png")
    root = base / "data"
    assert main(["data", "prepare", "cifar10", "--source", str(base / "copy"), "--data-root", str(root)]) == 0
    return root


@pytest.fixture(scope="module")
def cifar100_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CIFAR-100, files written in the exact real format (docs/data-formats.md):
    ``cifar-100-python/{train,test,meta}``, pickled dicts (protocol 2), 2 train and 1 test image per
    class."""
    root = tmp_path_factory.mktemp("cifar100")
    folder = root / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(0)

    def split(per_class: int, label: str) -> dict:
        fine = rng.permutation(np.repeat(np.arange(100), per_class))
        return {
            "data": rng.integers(0, 256, (len(fine), 3072), dtype=np.uint8),
            "fine_labels": [int(c) for c in fine],
            "coarse_labels": [int(c) % 20 for c in fine],
            "filenames": [f"image_{i:05d}.png" for i in range(len(fine))],
            "batch_label": f"{label} batch 1 of 1",
        }

    files = {
        "train": split(2, "training"),
        "test": split(1, "testing"),
        "meta": {
            "fine_label_names": [f"fine_{c:02d}" for c in range(100)],
            "coarse_label_names": [f"coarse_{c:02d}" for c in range(20)],
        },
    }
    for name, obj in files.items():
        (folder / name).write_bytes(pickle.dumps(obj, protocol=2))
    return root


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--protocol", "laptop"], "benchmark 'seq-digits' has no protocol 'laptop': it has full"),
        (
            ["--benchmark", "seq-cifar10", "--protocol", "tiny"],
            "has no protocol 'tiny': it has full, laptop",
        ),
        (["--set", "run.protocol=laptop"], "run.protocol cannot be set with --set: use --protocol"),
    ],
)
def test_protocol_mistakes_exit_2_with_one_line(argv, message, tmp_path: Path, capsys) -> None:
    code = main(["train", "--out", str(tmp_path), "--device", "cpu", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing was created


def test_data_info_shows_every_protocol(cifar_root: Path, capsys) -> None:
    assert main(["data", "info", "seq-cifar10", "--data-root", str(cifar_root), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["n_tasks"], info["train_size"], info["test_size"]) == (5, 100, 20)
    assert info["class_names"] == CLASSES
    assert info["protocols"] == ["full", "laptop"]
    assert info["protocol"]["name"] == "full"
    assert (info["protocol"]["epochs"], info["protocol"]["backbone_options"]["width"]) == (50, 64)
    assert info["protocol"]["drop_last"] is False
    argv = ["data", "info", "seq-cifar10", "--data-root", str(cifar_root), "--protocol", "laptop"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "protocol laptop: 2 epochs, batch 32" in out
    assert "(width 8, in_channels 3), last partial batch kept | also: full (--protocol)" in out


def test_the_full_protocols_former_name_still_works_with_a_warning(cifar_root: Path, capsys) -> None:
    argv = ["data", "info", "seq-cifar10", "--data-root", str(cifar_root), "--protocol", "paper"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "protocol full: 50 epochs, batch 32" in captured.out
    assert captured.err == (
        "warning: --protocol paper is now called full (the same protocol); paper goes in the next release\n"
    )


def test_data_info_lists_the_seq_cifar100_laptop_protocol(cifar100_root: Path, capsys) -> None:
    argv = ["data", "info", "seq-cifar100", "--data-root", str(cifar100_root), "--protocol", "laptop"]
    assert main([*argv, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["n_tasks"], info["train_size"], info["test_size"]) == (10, 200, 100)
    assert info["protocols"] == ["full", "laptop"]
    protocol = info["protocol"]
    assert (protocol["name"], protocol["epochs"], protocol["milestones"]) == ("laptop", 2, [1.4, 1.8])
    assert (protocol["batch_size"], protocol["minibatch_size"], protocol["lr"]) == (32, 32, 0.03)
    assert (protocol["lr_schedule"], protocol["buffer_size"]) == ("multistep", 500)
    assert protocol["backbone_options"] == {"width": 8, "in_channels": 3}
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "protocol laptop: 2 epochs, batch 32, replay 32, lr 0.03 (multistep at epochs 1.4, 1.8), buffer 500"
        in out
    )
    assert "(width 8, in_channels 3), last partial batch kept | also: full (--protocol)" in out
    assert main(["data", "info", "seq-cifar100", "--data-root", str(cifar100_root)]) == 0
    assert "protocol full: 50 epochs, batch 32, replay 32, lr 0.03 (multistep at epochs 35, 45)" in (
        capsys.readouterr().out
    )


def test_train_on_the_laptop_protocol_keeps_the_last_partial_batch(cifar_root: Path, tmp_path: Path) -> None:
    argv = [
        "train",
        "--method",
        "er",
        "--benchmark",
        "seq-cifar10",
        "--protocol",
        "laptop",
        "--device",
        "cpu",
    ]
    argv += ["--data-root", str(cifar_root), "--out", str(tmp_path), "--epochs", "1"]
    argv += ["--set", "train.batch_size=8", "--set", "backbone.width=4"]
    assert main(argv) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    config = tomllib.loads((run / "config.toml").read_text())
    assert config["run"]["protocol"] == "laptop"
    assert config["train"]["drop_last"] is False
    epochs = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    steps = [e["steps"] for e in epochs if e["event"] == "epoch"]
    assert steps == [3] * 5  # 20 rows per task in batches of 8: 8, 8 and the partial 4
    # --resume rebuilds the run from config.toml alone: the protocol and its settings come back.
    plan = build_plan(read_config(run / "config.toml"))
    assert (plan.settings.protocol, plan.schedule.drop_last, plan.backbone["width"]) == ("laptop", False, 4)
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] is True
    assert len(results["accuracy_matrix"]) == 5
