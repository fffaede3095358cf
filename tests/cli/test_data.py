"""xder-run data: info (text and JSON), prepare through the converters, and one-line errors."""

from __future__ import annotations

import json
import pickle
import struct
import tomllib
from pathlib import Path

import numpy as np
import pytest

from xder_cli.main import build_parser, main


def test_info_json_has_the_promised_keys(capsys) -> None:
    assert main(["data", "info", "seq-digits", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    for key in (
        "name",
        "n_tasks",
        "classes_per_task",
        "class_order",
        "train_size",
        "test_size",
        "input_shape",
    ):
        assert key in info
    assert info["name"] == "seq-digits"
    assert (info["n_tasks"], info["classes_per_task"]) == (5, [2] * 5)
    assert (info["train_size"], info["test_size"], info["input_shape"]) == (1442, 355, [1, 8, 8])
    assert [t["classes"] for t in info["tasks"]] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert sum(t["train_size"] for t in info["tasks"]) == 1442
    assert info["protocol"]["buffer_size"] == 200


def test_info_text_and_class_order(capsys) -> None:
    assert main(["data", "info", "seq-digits", "--class-order", "reversed"]) == 0
    out = capsys.readouterr().out
    assert "seq-digits (class-il): 5 tasks x 2 classes" in out
    assert "task 1: " in out
    assert out.splitlines()[3].endswith("| 9, 8")


def _skeleton(path: Path, n_frames: int, offset: float) -> None:
    lines = [str(n_frames)]
    for f in range(n_frames):
        lines += ["1", "72057594037931101 0 1 1 1 1 0 0.02 0.05 2", "25"]
        lines += [f"{offset + 0.01 * f + 0.001 * j} 0.1 3.0 1 1 1 1 0 0 0 1 2" for j in range(25)]
    path.write_text("\r\n".join(lines) + "\r\n")


def test_prepare_ntu60_then_info(tmp_path: Path, capsys) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    _skeleton(raw / "S001C001P001R001A001.skeleton", 5, 0.0)  # subject 1: train
    _skeleton(raw / "S001C001P003R001A002.skeleton", 7, 0.5)  # subject 3: test
    (raw / "S001C001P001R001A003.skeleton").write_text("3\n0\n0\n0\n")  # no body in any frame
    root = tmp_path / "data"
    assert (
        main(["data", "prepare", "ntu60", "--raw", str(raw), "--data-root", str(root), "--frames", "8"]) == 0
    )
    out = capsys.readouterr().out
    assert "1 train / 1 test samples" in out
    assert "1 no_body" in out
    assert (root / "ntu60" / "xsub.h5").is_file()
    assert main(["data", "info", "seq-ntu60", "--data-root", str(root), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["train_size"], info["test_size"], info["input_shape"]) == (1, 1, [3, 8, 25, 2])
    assert info["tasks"][0]["original_classes"][:3] == [17, 39, 42]  # the paper's order, 0-based ids


def test_prepare_miniimagenet_from_pickles(tmp_path: Path, capsys) -> None:
    source = tmp_path / "cache"
    source.mkdir()
    rng = np.random.default_rng(0)
    wnids = [f"n{index:08d}" for index in range(100)]
    for split, classes in (("train", wnids[:64]), ("val", wnids[64:80]), ("test", wnids[80:])):
        images = rng.integers(0, 256, (2 * len(classes), 84, 84, 3), dtype=np.uint8)
        class_dict = {w: [2 * i, 2 * i + 1] for i, w in enumerate(classes)}
        with open(source / f"mini-imagenet-cache-{split}.pkl", "wb") as handle:
            pickle.dump({"image_data": images, "class_dict": class_dict}, handle)
    root = tmp_path / "data"
    argv = ["data", "prepare", "miniimagenet", "--source", str(source), "--data-root", str(root)]
    assert main([*argv, "--test-per-class", "1"]) == 0
    assert "100 classes, 100 train / 100 test images" in capsys.readouterr().out
    assert main(["data", "info", "seq-miniimg", "--data-root", str(root), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["n_tasks"], info["train_size"], info["input_shape"]) == (20, 100, [3, 84, 84])


def _image_folders(root: Path, splits: dict[str, int], classes: list[str], size: int) -> None:
    """``root/<split>/<class>/<class><index>.png``: ``splits[split]`` random images a class."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in splits.items():
        for cls in classes:
            (root / split / cls).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / cls / f"{cls}{i:08d}.png")


def test_prepare_cifar100_checks_the_real_counts(tmp_path: Path, capsys) -> None:
    from xder_data import cifar100_superclasses

    fine = sorted(name for members in cifar100_superclasses().values() for name in members)
    _image_folders(tmp_path / "copy", {"train": 1, "test": 1}, fine, 32)
    root = tmp_path / "data"
    argv = ["data", "prepare", "cifar100", "--source", str(tmp_path / "copy"), "--data-root", str(root)]
    assert main(argv) == 2  # the command always asks for CIFAR-100's 500 / 100 images a class
    err = capsys.readouterr().err
    assert "test/apple/ holds 1 images, expected 100 per class" in err
    assert len(err.strip().splitlines()) == 1
    assert not root.exists()


def test_prepare_miniimagenet_from_image_folders(tmp_path: Path, capsys) -> None:
    import tarfile

    wnids = [f"n{index:08d}" for index in range(100)]
    _image_folders(tmp_path / "copy", {"train": 2, "val": 1}, wnids, 84)
    archive = tmp_path / "miniimagenet.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "copy", arcname="miniimagenet")
    for source, given in (
        (archive, []),
        (tmp_path / "copy", []),
        (tmp_path / "copy", ["--format", "folders"]),
    ):
        root = tmp_path / f"data{len(given)}{source.suffix}"
        argv = ["data", "prepare", "miniimagenet", "--source", str(source), "--data-root", str(root)]
        assert main([*argv, *given]) == 0  # detected: a tar archive, or train/ and val/ subfolders
        assert "miniimagenet (folders): 100 classes, 200 train / 100 test images" in capsys.readouterr().out
        assert main(["data", "info", "seq-miniimg", "--data-root", str(root), "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert (info["n_tasks"], info["train_size"], info["test_size"]) == (20, 200, 100)
    argv = ["data", "prepare", "miniimagenet", "--source", str(archive), "--test-per-class", "1"]
    assert main([*argv, "--data-root", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert "--test-per-class re-splits the csv and pickle distributions" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["info", "seq-cifar100", "--data-root", "{tmp}"], "run `xder-run data download cifar100"),
        (["prepare", "cifar100", "--source", "{tmp}"], "holds no train/<class>/ images"),
        (["prepare", "cifar100", "--source", "{tmp}/absent.tar.gz"], "no such folder or archive"),
        (["info", "seq-ntu60", "--data-root", "{tmp}"], "xder-run data prepare ntu60"),
        (["info", "seq-miniimg", "--data-root", "{tmp}"], "MINIIMG"),
        (
            ["info", "seq-mnist", "--data-root", "{tmp}"],
            "MNIST folder not found: run `xder-run data download mnist --data-root",
        ),
        (["prepare", "mnist", "--source", "{tmp}"], "holds no train-images-idx3-ubyte nor"),
        (
            ["info", "seq-tinyimg", "--data-root", "{tmp}"],
            "Tiny ImageNet file missing: run `xder-run data download tinyimagenet --data-root",
        ),
        (["prepare", "tinyimagenet", "--source", "{tmp}"], "holds no wnids.txt"),
        (["info", "seq-nothing"], "unknown benchmark 'seq-nothing'"),
        (
            ["prepare", "ntu60", "--data-root", "{tmp}"],
            "needs a source, the folder holding the files to convert: `xder-run data prepare ntu60 --raw DIR",
        ),
        (["prepare", "ntu60", "--raw", "{tmp}/absent"], "does not exist"),
        (["prepare", "miniimagenet", "--source", "{tmp}"], "neither train.csv"),
        (["prepare", "cub200", "--data-root", "{tmp}"], "CUB_200_2011"),
        (["prepare", "coco", "--source", "{tmp}"], "invalid choice"),
        (["download", "imagenet"], "invalid choice"),
    ],
)
def test_data_mistakes_exit_2_with_one_line(argv, message, tmp_path: Path, capsys) -> None:
    code = main(["data", *(a.replace("{tmp}", str(tmp_path)) for a in argv)])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_malformed_files_exit_2_with_one_line(tmp_path: Path, capsys) -> None:
    import h5py

    cifar = tmp_path / "c" / "cifar-100-python"
    cifar.mkdir(parents=True)
    for name in ("train", "test", "meta"):
        (cifar / name).write_bytes(b"\x80\x02}q\x00(X")  # a truncated pickle
    mini = tmp_path / "m" / "MINIIMG"
    mini.mkdir(parents=True)
    np.save(mini / "train_x.npy", np.zeros((10, 84, 84), np.uint8))  # no channel axis
    np.save(mini / "train_y.npy", np.zeros(10, np.int64))
    np.save(mini / "test_x.npy", np.zeros((10, 84, 84, 3), np.uint8))
    np.save(mini / "test_y.npy", np.zeros(10, np.int64))
    ntu = tmp_path / "n" / "ntu60"
    ntu.mkdir(parents=True)
    with h5py.File(ntu / "xsub.h5", "w") as handle:  # an HDF5 file without the layout
        handle["train/data"] = np.zeros((2, 3, 4, 25, 2), np.float32)
    for benchmark, folder, message in (
        ("seq-cifar100", "c", "truncated"),
        ("seq-miniimg", "m", "shape (10, 84, 84)"),
        ("seq-ntu60", "n", "'train/label' missing"),
    ):
        assert main(["data", "info", benchmark, "--data-root", str(tmp_path / folder)]) == 2
        err = capsys.readouterr().err
        assert message in err
        assert len(err.strip().splitlines()) == 1


def test_a_data_pickle_that_would_run_code_is_refused(tmp_path: Path, capsys) -> None:
    # A CIFAR-10 batch, a miniImageNet cache and an NTU label file each calling os.system as they
    # load: exit 2, one line naming the file and what it would load, nothing ran, nothing written.
    marker = tmp_path / "ran"
    payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()  # pickle: os.system("touch ...")
    cifar = tmp_path / "c" / "cifar-10-batches-py"
    cifar.mkdir(parents=True)
    for name in (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"):
        (cifar / name).write_bytes(payload)
    mini = tmp_path / "mini"
    mini.mkdir()
    for split in ("train", "val", "test"):
        (mini / f"mini-imagenet-cache-{split}.pkl").write_bytes(payload)
    ntu = tmp_path / "ntu" / "xsub"
    ntu.mkdir(parents=True)
    for part in ("train", "val"):
        np.save(ntu / f"{part}_data.npy", np.zeros((1, 3, 8, 25, 2), np.float32))
        (ntu / f"{part}_label.pkl").write_bytes(payload)
    out = tmp_path / "out"
    for argv in (
        ["data", "info", "seq-cifar10", "--data-root", str(tmp_path / "c")],
        ["data", "prepare", "miniimagenet", "--source", str(mini), "--data-root", str(out)],
        ["data", "prepare", "ntu60-stgcn", "--source", str(ntu.parent), "--data-root", str(out)],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "refused: the pickle would load os.system" in err
        assert len(err.strip().splitlines()) == 1
        assert not marker.exists()
        assert not out.exists() or not any(out.rglob("*.*"))


@pytest.mark.parametrize(
    ("argv", "recorded"),
    [(["bench"], False), (["data", "info"], False), (["train"], True), (["sweep"], True)],
)
def test_protocol_help_promises_config_toml_only_where_a_run_is_written(argv, recorded, capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--protocol NAME the benchmark's training protocol" in text
    assert ("recorded in config.toml" in text) is recorded


@pytest.mark.parametrize("command", ["train", "experiment"])
def test_the_help_examples_parse(command: str, capsys) -> None:
    """Each example in ``--help`` is a command line the parser takes as it stands."""
    import shlex

    from xder_cli.commands.experiment import EXPERIMENT_EXAMPLES
    from xder_cli.commands.train import TRAIN_EXAMPLES

    text = {"train": TRAIN_EXAMPLES, "experiment": EXPERIMENT_EXAMPLES}[command]
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    assert text.splitlines()[1] in capsys.readouterr().out
    lines = text.replace("\\\n", " ").splitlines()[1:]
    assert len(lines) >= 3
    for line in lines:
        argv = shlex.split(line, comments=True)
        assert argv[:2] == ["xder-run", command]
        args = build_parser().parse_args(argv[1:])
        assert args.command == command


def test_prepare_mnist_then_info_then_train(tmp_path: Path, capsys) -> None:
    raw = tmp_path / "copy" / "raw"  # the four official IDX files, as torchvision leaves them
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, per_digit in (("train", 3), ("t10k", 1)):
        labels = np.repeat(np.arange(10, dtype=np.uint8), per_digit)
        images = rng.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8)
        header = bytes.fromhex("00000803") + struct.pack(">3I", len(labels), 28, 28)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(header + images.tobytes())
        header = bytes.fromhex("00000801") + struct.pack(">I", len(labels))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(header + labels.tobytes())
    root = tmp_path / "data"
    argv = ["data", "prepare", "mnist", "--source", str(tmp_path / "copy"), "--data-root", str(root)]
    assert main(argv) == 0
    assert capsys.readouterr().out == f"mnist: 30 train / 10 test images -> {root / 'MNIST'}\n"
    assert main(["data", "info", "seq-mnist", "--data-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "seq-mnist (class-il): 5 tasks x 2 classes\n  30 train / 10 test examples of shape (1, 28, 28)"
    )
    assert (
        "protocol full: 1 epochs, batch 10, replay 10, lr 0.03 (none), buffer 200, backbone mnist-mlp" in out
    )
    assert "task 5: 6 train / 2 test | 8, 9" in out
    out_dir = tmp_path / "runs"
    argv = [
        "train",
        "--benchmark",
        "seq-mnist",
        "--method",
        "sgd",
        "--data-root",
        str(root),
        "--out",
        str(out_dir),
    ]
    assert main([*argv, "--device", "cpu"]) == 0
    assert "task 5/5" in capsys.readouterr().out
    (run,) = [p for p in out_dir.iterdir() if p.is_dir()]
    config = tomllib.loads((run / "config.toml").read_text())
    assert config["backbone"] == {"name": "mnist-mlp", "in_features": 784}
    assert (config["train"]["epochs"], config["train"]["batch_size"]) == (1, 10)
    results = json.loads((run / "results.json").read_text())
    assert [len(row) for row in results["accuracy_matrix"]] == [1, 2, 3, 4, 5]
