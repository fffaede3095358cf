"""--protocol through the CLI: recorded in config.toml, the protocol's settings and drop_last, the
preset tables kept per protocol, sweeps and bench, and one-line errors; seq-cifar10 end to end on a
tiny image-folder copy (data prepare cifar10, data info, train --protocol laptop); seq-cifar100's
laptop protocol on tiny files in the official format (data info, the resolved plan)."""

from __future__ import annotations

import json
import pickle
import tomllib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from xder_cli.main import main
from xder_cli.runs.bench import BenchOptions, run_bench
from xder_cli.runs.rundir import read_config
from xder_cli.runs.settings import build_plan, resolve_config
from xder_cli.runs.sweep import load_spec, plan_trials

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
    """A tiny CIFAR-100 in the official format (DATA-FORMATS.md 1.1): ``cifar-100-python/{train,test,
    meta}``, pickled dicts (protocol 2), 2 train and 1 test image per class."""
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


def _config(method: str, benchmark: str, protocol: str = "paper", **settings) -> dict:
    return resolve_config(method, benchmark, protocol=protocol, settings=settings)


def test_the_protocol_sets_drop_last_and_is_recorded() -> None:
    digits = build_plan(_config(method="er", benchmark="seq-digits"))
    assert digits.settings.protocol == "paper"
    assert digits.schedule.drop_last is True  # seq-digits keeps its documented drop
    for benchmark in ("seq-cifar10", "seq-cifar100", "seq-miniimg", "seq-ntu60", "seq-cub200"):
        plan = build_plan(_config(method="er", benchmark=benchmark))
        assert plan.schedule.drop_last is False, benchmark  # the papers' protocols keep the last batch
    laptop = build_plan(_config(method="er", benchmark="seq-cifar10", protocol="laptop"))
    assert laptop.config["run"]["protocol"] == "laptop"
    assert (laptop.schedule.epochs, laptop.backbone["width"], laptop.buffer_size) == (2, 8, 200)
    override = _config(method="er", benchmark="seq-cifar10", protocol="laptop", **{"train.epochs": 3})
    assert build_plan(override).schedule.epochs == 3  # flags and --set still override the protocol


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--protocol", "laptop"], "benchmark 'seq-digits' has no protocol 'laptop': it has paper"),
        (
            ["--benchmark", "seq-cifar10", "--protocol", "tiny"],
            "has no protocol 'tiny': it has paper, laptop",
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
    assert info["protocols"] == ["paper", "laptop"]
    assert info["protocol"]["name"] == "paper"
    assert (info["protocol"]["epochs"], info["protocol"]["backbone_options"]["width"]) == (50, 64)
    assert info["protocol"]["drop_last"] is False
    argv = ["data", "info", "seq-cifar10", "--data-root", str(cifar_root), "--protocol", "laptop"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "protocol laptop: 2 epochs, batch 32" in out
    assert "(width 8, in_channels 3), last partial batch kept | also: paper (--protocol)" in out


def test_data_info_lists_the_seq_cifar100_laptop_protocol(cifar100_root: Path, capsys) -> None:
    argv = ["data", "info", "seq-cifar100", "--data-root", str(cifar100_root), "--protocol", "laptop"]
    assert main([*argv, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["n_tasks"], info["train_size"], info["test_size"]) == (10, 200, 100)
    assert info["protocols"] == ["paper", "laptop"]
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
    assert "(width 8, in_channels 3), last partial batch kept | also: paper (--protocol)" in out
    assert main(["data", "info", "seq-cifar100", "--data-root", str(cifar100_root)]) == 0
    assert "protocol paper: 50 epochs, batch 32, replay 32, lr 0.03 (multistep at epochs 35, 45)" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize("method", ["xder", "er", "derpp", "sgd", "bic"])
def test_seq_cifar100_laptop_plan(method: str) -> None:
    """The resolved run: the laptop protocol (2 epochs, milestones 1.4 and 1.8, width 8, buffer
    500) under the tuned entry where the method was selected on this protocol (X-DER, ER, DER++),
    else the paper preset's carried-over entry; neither sets an epoch or milestone of its own."""
    plan = build_plan(_config(method=method, benchmark="seq-cifar100", protocol="laptop"))
    schedule = plan.schedule
    selected = method in ("xder", "er", "derpp")
    assert (plan.settings.protocol, plan.settings.preset) == ("laptop", "tuned" if selected else "paper")
    assert (schedule.epochs, schedule.lr_schedule, schedule.milestones) == (2, "multistep", (1.4, 1.8))
    assert (schedule.batch_size, schedule.optimizer, schedule.lr_gamma) == (32, "sgd", 0.1)
    assert plan.backbone["width"] == 8
    assert plan.buffer_size == (0 if method == "sgd" else 500)
    paper = build_plan(_config(method=method, benchmark="seq-cifar100"))
    chosen = {"xder": 0.1, "er": 0.03, "derpp": 0.1}  # tuned.toml, "seq-cifar100:laptop"
    assert schedule.lr == chosen.get(method, paper.schedule.lr)  # else the paper's, e.g. BiC's 0.03
    if not selected:
        assert plan.config["method"] == paper.config["method"]  # and its chosen method values


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


def test_a_sweep_grid_names_its_protocol(tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text(
        'method = "derpp"\nbenchmark = "seq-cifar10"\nprotocol = "laptop"\nseeds = [0]\n'
        '[grid]\n"method.alpha" = [0.1, 0.3]\n'
    )
    spec = load_spec(grid)
    assert spec.protocol == "laptop"
    trials = plan_trials(spec)
    assert [t.config["run"]["protocol"] for t in trials] == ["laptop", "laptop"]
    assert {t.config["backbone"]["width"] for t in trials} == {8}
    assert {t.config["train"]["epochs"] for t in trials} == {2}
    assert load_spec(grid, protocol="paper").protocol == "paper"  # --protocol overrides the file


@pytest.mark.parametrize(("benchmark", "buffer_size"), [("seq-cifar10", 200), ("seq-cifar100", 500)])
def test_bench_takes_width_batch_and_buffer_from_the_protocol(benchmark: str, buffer_size: int) -> None:
    options = BenchOptions(
        methods=("er",),
        benchmark=benchmark,
        protocol="laptop",
        backbone="resnet18-cifar",
        width=None,
        batch_size=None,
        buffer_size=None,
        task=1,
        device="cpu",
        steps=1,
        warmup=0,
        precision="fp32",
        channels_last=False,
        compile=False,
        epoch=False,
    )
    payload = run_bench(options)
    settings = payload["settings"]
    assert (settings["protocol"], settings["width"], settings["batch_size"]) == ("laptop", 8, 32)
    assert (settings["buffer_size"], settings["protocol_epochs"]) == (buffer_size, 2)
    assert payload["methods"][0]["images_per_step"] == 64  # 32 stream + 32 replayed
