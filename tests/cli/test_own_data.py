"""A new user's own images through xder-run: a folder of PNGs, 6 classes in 3 tasks, trained with
one command and summarised by ``data info``; the ``[benchmark]`` section (recorded, kept by
``--resume``, settable with ``--set``); and every data mistake as one line with exit status 2."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from xder_cli.main import main
from xder_cli.progress import TaskProgress

CLASSES = ("apple", "bee", "cloud", "drum", "egg", "fern")
TINY = ["--epochs", "1", "--set", "backbone.width=4", "--device", "cpu"]


def my_images(root: Path, per_class: dict[str, int] | None = None, size=(8, 8)) -> Path:
    """``root/train/<class>/*.png`` and ``root/test/<class>/*.png``: each class a colour plus noise."""
    rng = np.random.default_rng(0)
    for split, count in (per_class or {"train": 6, "test": 2}).items():
        for c, name in enumerate(CLASSES):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            colour = np.array([40 * c, 255 - 40 * c, 120], dtype=np.int64)
            for i in range(count):
                pixels = np.clip(colour + rng.integers(-30, 30, (*size, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{name}_{i:03d}.png")
    return root


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def test_my_pngs_train_with_one_command(tmp_path: Path, capsys) -> None:
    data = my_images(tmp_path / "my_images")
    out = tmp_path / "runs"
    command = ["train", "--benchmark", "folder", "--data-root", str(data), "--set", "benchmark.tasks=3"]
    assert main([*command, *TINY, "--out", str(out)]) == 0  # the default method: X-DER
    (run,) = out.iterdir()
    assert run.name.endswith("-xder-folder-m200-s0")
    config = tomllib.loads((run / "config.toml").read_text())
    assert config["benchmark"] == {"tasks": 3}
    assert config["run"]["benchmark"] == "folder"
    assert config["backbone"] == {"name": "resnet18-cifar", "width": 4, "in_channels": 3}
    assert config["train"]["batch_size"] == 32
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] is True
    assert [len(row) for row in results["accuracy_matrix"]] == [1, 2, 3]
    assert (data / "xder-cache.h5").is_file()
    assert "task 3/3" in capsys.readouterr().out


def test_data_info_summarises_my_pngs(tmp_path: Path, capsys) -> None:
    data = my_images(tmp_path / "my_images")
    assert main(["data", "info", "folder", "--data-root", str(data)]) == 0
    out = capsys.readouterr().out
    assert "folder (class-il): 3 tasks x 2 classes" in out
    assert "36 train / 12 test examples of shape (3, 8, 8) (uint8)" in out
    assert "task 1: 12 train / 4 test | apple, bee" in out
    assert "task 3: 12 train / 4 test | egg, fern" in out
    assert "backbone resnet18-cifar (width 64, in_channels 3)" in out
    assert (
        main(["data", "info", "folder", "--data-root", str(data), "--set", "benchmark.tasks=2", "--json"])
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["classes_per_task"] == [3, 3]
    assert info["options"]["tasks"] == 2
    assert info["class_names"] == list(CLASSES)
    assert (
        main(
            [
                "data",
                "info",
                "folder",
                "--data-root",
                str(data),
                "--set",
                "benchmark.classes_per_task=[1,2,3]",
            ]
        )
        == 0
    )
    assert "classes per task [1, 2, 3]" in capsys.readouterr().out


def test_resume_keeps_the_benchmark_options(tmp_path: Path, monkeypatch, capsys) -> None:
    data = my_images(tmp_path / "my_images")
    out = tmp_path / "runs"

    def stop_after_first_task(self, loop, record):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(TaskProgress, "on_task_end", stop_after_first_task)
        argv = ["train", "--method", "er", "--benchmark", "folder", "--data-root", str(data)]
        assert (
            main(
                [
                    *argv,
                    "--set",
                    "benchmark.tasks=2",
                    "--set",
                    "benchmark.image_size=6",
                    *TINY,
                    "--out",
                    str(out),
                ]
            )
            == 130
        )
    (run,) = out.iterdir()
    assert not json.loads((run / "results.json").read_text())["complete"]
    assert main(["train", "--resume", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] is True
    assert [len(row) for row in results["accuracy_matrix"]] == [1, 2]  # 2 tasks of 3, not 3 of 2
    assert tomllib.loads((run / "config.toml").read_text())["benchmark"] == {"tasks": 2, "image_size": 6}


@pytest.mark.parametrize(
    ("break_it", "options", "message"),
    [
        ("empty", [], "train/zebra: empty class folder"),
        ("unreadable", [], "bee_999.png: unreadable image"),
        ("none", ["--set", "benchmark.tasks=4"], "6 classes do not divide into 4 tasks"),
        ("mixed", [], "mixed image sizes: "),
        ("missing", [], "test class 'beee' has no folder in "),
        ("none", ["--set", "benchmark.classes_per_task=[2,2]"], "holds 4 classes, the data have 6"),
        ("none", ["--set", "benchmark.tasks=three"], "benchmark.tasks = 'three' is not valid"),
        ("none", ["--set", "benchmark.taks=3"], "benchmark.taks is not a setting of benchmark 'folder'"),
        ("none", ["--set", "benchmark.test_fraction=0.2"], "test_fraction applies only to a single tree"),
    ],
)
def test_data_mistakes_are_one_line(break_it, options, message, tmp_path: Path, capsys) -> None:
    data = my_images(tmp_path / "my_images", {"train": 2, "test": 1})
    if break_it == "empty":
        (data / "train" / "zebra").mkdir()
    elif break_it == "unreadable":
        (data / "train" / "bee" / "bee_999.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    elif break_it == "mixed":
        Image.fromarray(np.zeros((10, 12, 3), dtype=np.uint8)).save(data / "test" / "egg" / "big.png")
    elif break_it == "missing":
        (data / "test" / "beee").mkdir()
        Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(data / "test" / "beee" / "typo.png")
    for argv in (
        ["train", "--benchmark", "folder", *TINY, "--out", str(tmp_path / "runs")],
        ["data", "info", "folder"],
    ):
        assert main([*argv, "--data-root", str(data), *options]) == 2
        assert message in one_line_error(capsys)


def test_benchmark_options_of_other_benchmarks(tmp_path: Path, capsys) -> None:
    assert main(["train", "--set", "benchmark.tasks=3", *TINY, "--out", str(tmp_path)]) == 2
    assert (
        "benchmark.tasks is not a setting of benchmark 'seq-digits': it takes no settings"
        in one_line_error(capsys)
    )
    assert main(["data", "info", "seq-digits", "--set", "train.lr=0.1"]) == 2
    assert "data info takes the benchmark's options only" in one_line_error(capsys)
    assert main(["data", "info", "seq-cifar100", "--set", "benchmark.image_size=16"]) == 2
    assert "benchmark.image_size must be an integer of at least 32" in one_line_error(capsys)


def test_a_tree_without_test_says_its_test_set_was_split_off(tmp_path: Path, capsys) -> None:
    data = my_images(tmp_path / "only_train", {"train": 10})
    note = (
        f"note: {data} has no test/: the test set is 20% of each class's images, held out (seeded; "
        "benchmark.test_fraction sets the share)"
    )
    assert main(["data", "info", "folder", "--data-root", str(data)]) == 0
    out = capsys.readouterr().out
    assert "48 train / 12 test examples" in out  # 2 of each class's 10 held out
    assert f"  {note}\n" in out
    assert main(["data", "info", "folder", "--data-root", str(data), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == [note.removeprefix("note: ")]
    out_dir = tmp_path / "runs"
    argv = [
        "train",
        "--benchmark",
        "folder",
        "--data-root",
        str(data),
        "--method",
        "sgd",
        "--out",
        str(out_dir),
    ]
    assert main([*argv, *TINY, "--set", "train.tasks=1"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[1] == note  # right under the start line
    # With a test/ tree there is nothing to say.
    given = my_images(tmp_path / "both")
    assert main(["data", "info", "folder", "--data-root", str(given)]) == 0
    assert "note:" not in capsys.readouterr().out


def test_a_suggested_split_pastes_into_a_shell(tmp_path: Path, capsys) -> None:
    data = my_images(tmp_path / "my_images")
    assert main(["data", "info", "folder", "--data-root", str(data), "--set", "benchmark.tasks=4"]) == 2
    err = one_line_error(capsys)
    assert "e.g. --set 'benchmark.classes_per_task=[2, 2, 1, 1]' (quoted for the shell)" in err
    suggested = err.split("e.g. ")[1].split(" (quoted")[0]
    assert shlex.split(suggested) == ["--set", "benchmark.classes_per_task=[2, 2, 1, 1]"]
