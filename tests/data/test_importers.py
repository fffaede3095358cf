"""The importer registry: the kinds and their order, dispatch to the converters with the command's
arguments, the option checks as one-line errors, miniImageNet's format detection, the downloads,
and ``benchmark_info`` (the JSON of ``xder-run data info --json``)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from xder_data import (
    CIFAR10Import,
    CIFAR100Import,
    CUB200PrepareReport,
    DataError,
    DataNotFoundError,
    ImportOptionError,
    ImportOptions,
    ImportResult,
    MiniImageNetImport,
    MNISTImport,
    NTUConversionReport,
    TinyImageNetImport,
    UnknownImporterError,
    UnknownProtocolError,
    benchmark_info,
    detect_miniimagenet_format,
    download_data,
    list_downloads,
    list_importers,
    load_benchmark,
    prepare_data,
    register_importer,
)
from xder_data import importers as importers_module

KINDS = [
    "cifar10",
    "cifar100",
    "mnist",
    "tinyimagenet",
    "ntu60",
    "ntu60-stgcn",
    "ntu60-efficientgcn",
    "miniimagenet",
    "cub200",
    "coco-stitch",
]
SOURCE = Path("copy")
ROOT = Path("data")


def _bar(label: str) -> Any:
    """A stand-in for a progress bar factory: the converters receive ``"bar:<label>"``."""
    return f"bar:{label}"


OPTIONS = ImportOptions(num_frames=64, missing_list="missing.txt", seed=5, progress=_bar)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A copy of the registry for the test to add to (the package's is left as it was)."""
    copy = dict(importers_module._REGISTRY)
    monkeypatch.setattr(importers_module, "_REGISTRY", copy)
    return copy


def _replace(monkeypatch: pytest.MonkeyPatch, target: str, result: Any = None) -> list[tuple]:
    """Replace the converter ``module.function`` of xder_data by a fake that records its calls."""
    module, function = target.rsplit(".", 1)
    calls: list[tuple] = []

    def fake(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return result

    monkeypatch.setattr(f"xder_data.{module}.{function}", fake)
    return calls


def test_the_kinds_in_the_order_the_command_lists_them() -> None:
    assert list_importers()[: len(KINDS)] == KINDS
    assert list_downloads()[:4] == ["cifar10", "cifar100", "mnist", "tinyimagenet"]


def test_a_duplicate_kind_raises(registry) -> None:
    with pytest.raises(ValueError, match="'cifar10' is already registered"):
        register_importer("cifar10")(lambda source, root, options: ImportResult("cifar10", ""))


def test_a_registered_importer_is_listed_last_and_dispatched_to(registry, tmp_path: Path) -> None:
    calls = []

    @register_importer("toy", download=lambda root: root / "toy")
    def toy(source: Path | None, root: Path, options: ImportOptions) -> ImportResult:
        calls.append((source, root, options))
        return ImportResult("toy", "toy: 1 train / 1 test", ("a detail",))

    assert list_importers()[-1] == "toy"
    assert list_downloads()[-1] == "toy"
    result = prepare_data("toy", str(tmp_path), source=str(tmp_path / "in"), options=OPTIONS)
    assert calls == [(tmp_path / "in", tmp_path, OPTIONS)]
    assert str(result) == "toy: 1 train / 1 test\n  a detail"
    assert download_data("toy", str(tmp_path)) == tmp_path / "toy"
    prepare_data("toy", tmp_path, source=tmp_path)
    assert calls[-1][2] == ImportOptions()  # the defaults when no options are given


def _mini(n_train: int, n_test: int, **counts: int) -> MiniImageNetImport:
    wnids = tuple(f"n{i:08d}" for i in range(100))
    return MiniImageNetImport(ROOT / "MINIIMG", wnids, n_train, n_test, **counts)


MALFORMED = tuple(f"S001C001P001R001A{i:03d}.skeleton: truncated" for i in range(1, 13))
NTU = NTUConversionReport(
    path=ROOT / "ntu60" / "xsub.h5",
    train=3,
    test=2,
    skipped={"missing_list": 1, "no_body": 0, "not_ntu60": 0, "malformed": 12},
    malformed=MALFORMED,
)
NTU_TEXT = [
    "{kind}: 3 train / 2 test samples -> data/ntu60/xsub.h5 (skipped: 1 missing_list, 12 malformed)",
    *(f"  malformed: {line}" for line in MALFORMED[:10]),
    "  ... and 2 more malformed files",
]
NTU_KWARGS = {"num_frames": 64, "missing_list": "missing.txt"}
CUB = CUB200PrepareReport(
    path=ROOT / "cub200" / "cub200.h5", n_train=5994, n_test=5794, masks=False, image_modes={}, mask_modes={}
)
COCO = SimpleNamespace(paths={"train": ROOT / "coco_stitch" / "train.h5"}, n_train=50, n_test=10, size=64)

# kind, options, converter, its positional and keyword arguments, its report, the printed text
DISPATCH = [
    (
        "cifar10",
        OPTIONS,
        "cifar10.prepare_cifar10",
        (SOURCE, ROOT),
        {"progress": "bar:images"},
        CIFAR10Import(ROOT / "cifar-10-batches-py", 50000, 10000, 3),
        ["cifar10: 50000 train / 10000 test images (3 converted to RGB) -> data/cifar-10-batches-py"],
    ),
    (
        "cifar100",
        OPTIONS,
        "cifar100.prepare_cifar100",
        (SOURCE, ROOT),
        {"progress": "bar:images"},
        CIFAR100Import(ROOT / "cifar-100-python", 50000, 10000, 0),
        ["cifar100: 50000 train / 10000 test images -> data/cifar-100-python"],
    ),
    (
        "mnist",
        OPTIONS,
        "mnist.prepare_mnist",
        (SOURCE, ROOT),
        {},
        MNISTImport(ROOT / "MNIST", 60000, 10000),
        ["mnist: 60000 train / 10000 test images -> data/MNIST"],
    ),
    (
        "tinyimagenet",
        OPTIONS,
        "tinyimagenet.prepare_tinyimagenet",
        (SOURCE, ROOT),
        {"progress": "bar:images"},
        TinyImageNetImport(ROOT / "TINYIMG", 100000, 10000, 24),
        ["tinyimagenet: 100000 train / 10000 test images (24 converted to RGB) -> data/TINYIMG"],
    ),
    (
        "ntu60",
        OPTIONS,
        "ntu60.prepare_ntu60",
        (SOURCE, ROOT),
        {**NTU_KWARGS, "on_error": "skip", "progress": "bar:ntu60"},
        NTU,
        [NTU_TEXT[0].format(kind="ntu60"), *NTU_TEXT[1:]],
    ),
    (
        "ntu60-stgcn",
        OPTIONS,
        "ntu60.import_ntu60_stgcn",
        (SOURCE, ROOT),
        {**NTU_KWARGS, "progress": "bar:ntu60-stgcn"},
        NTU,
        [NTU_TEXT[0].format(kind="ntu60-stgcn"), *NTU_TEXT[1:]],
    ),
    (
        "ntu60-efficientgcn",
        OPTIONS,
        "ntu60.import_ntu60_efficientgcn",
        (SOURCE, ROOT),
        {**NTU_KWARGS, "progress": "bar:ntu60-efficientgcn"},
        NTU,
        [NTU_TEXT[0].format(kind="ntu60-efficientgcn"), *NTU_TEXT[1:]],
    ),
    (
        "miniimagenet",
        ImportOptions(miniimagenet_format="csv", seed=5, progress=_bar),
        "miniimagenet.import_miniimagenet_csv",
        (SOURCE, ROOT),
        {"test_per_class": 100, "seed": 5, "progress": "bar:classes"},
        _mini(50000, 10000, resized=2),
        [
            "miniimagenet (csv): 100 classes, 50000 train / 10000 test images -> data/MINIIMG "
            "(2 resized to 84x84)"
        ],
    ),
    (
        "miniimagenet",
        ImportOptions(miniimagenet_format="pickle", test_per_class=7, progress=_bar),
        "miniimagenet.import_miniimagenet_pickle",
        (SOURCE, ROOT),
        {"test_per_class": 7, "seed": 0, "progress": "bar:classes"},
        _mini(59300, 700),
        ["miniimagenet (pickle): 100 classes, 59300 train / 700 test images -> data/MINIIMG"],
    ),
    (
        "miniimagenet",
        ImportOptions(miniimagenet_format="folders", progress=_bar),
        "miniimagenet.import_miniimagenet_folders",
        (SOURCE, ROOT),
        {"progress": "bar:classes"},
        _mini(50000, 10000, converted=4),
        [
            "miniimagenet (folders): 100 classes, 50000 train / 10000 test images -> data/MINIIMG "
            "(4 converted to RGB)"
        ],
    ),
    (
        "cub200",
        OPTIONS,
        "cub200.prepare_cub200",
        (ROOT,),
        {"progress": "bar:images"},
        CUB,
        ["cub200: 5994 train / 5794 test images cached without masks -> data/cub200/cub200.h5"],
    ),
    (
        "coco-stitch",
        OPTIONS,
        "coco_stitch.prepare_coco_stitch",
        (SOURCE, ROOT),
        {"seed": 5, "progress": "bar:examples"},
        COCO,
        ["coco-stitch: 50 train / 10 test stitched 64x64 images -> data/coco_stitch"],
    ),
]


@pytest.mark.parametrize(
    ("kind", "options", "converter", "args", "kwargs", "report", "text"),
    DISPATCH,
    ids=[f"{case[0]}-{case[2].rsplit('.', 1)[1]}" for case in DISPATCH],
)
def test_each_kind_calls_its_converter(
    monkeypatch, kind, options, converter, args, kwargs, report, text
) -> None:
    calls = _replace(monkeypatch, converter, report)
    source = None if kind == "cub200" else str(SOURCE)
    result = prepare_data(kind, str(ROOT), source=source, options=options)
    assert calls == [(args, kwargs)]
    assert (result.kind, result.report) == (kind, report)
    assert str(result).splitlines() == text
    assert result.summary == text[0]


def test_cub200_ignores_a_source(monkeypatch) -> None:
    calls = _replace(monkeypatch, "cub200.prepare_cub200", CUB)
    prepare_data("cub200", ROOT, source=SOURCE)
    assert calls == [((ROOT,), {"progress": importers_module.no_progress})]  # the default: no bar


def test_every_kind_is_dispatched() -> None:
    assert {case[0] for case in DISPATCH} == set(KINDS)


def _one_line(error: pytest.ExceptionInfo[DataError]) -> str:
    text = str(error.value)
    assert isinstance(error.value, DataError)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "cub200"])
def test_a_kind_that_converts_files_needs_a_source(kind: str) -> None:
    with pytest.raises(ImportOptionError) as error:
        prepare_data(kind, ROOT)
    assert _one_line(error) == (
        f"{kind} needs a source, the folder holding the files to convert: "
        f"`prepare_data('{kind}', '{ROOT}', source='DIR')`"
    )


def test_unknown_kind_and_download() -> None:
    with pytest.raises(UnknownImporterError) as error:
        prepare_data("coco", ROOT, source=SOURCE)
    assert _one_line(error).startswith(
        "unknown kind 'coco': choose one of cifar10, cifar100, mnist, tinyimagenet, ntu60, "
    )
    with pytest.raises(UnknownImporterError) as error:
        download_data("imagenet", ROOT)
    assert _one_line(error).startswith("no download for 'imagenet': choose one of cifar10, cifar100")
    with pytest.raises(UnknownImporterError):
        download_data("ntu60", ROOT)  # an importer, but no download


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_download_calls_its_downloader(monkeypatch, dataset: str, tmp_path: Path) -> None:
    calls = _replace(monkeypatch, f"{dataset}.download_{dataset}", tmp_path / "unpacked")
    assert download_data(dataset, str(tmp_path)) == tmp_path / "unpacked"
    assert calls == [((tmp_path,), {})]


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        (
            "miniimagenet",
            ImportOptions(miniimagenet_format="folders", test_per_class=1),
            "ImportOptions.test_per_class re-splits the csv and pickle distributions; the folders layout "
            "keeps its own split (train/ -> train, val/ -> test): leave it out",
        ),
        (
            "miniimagenet",
            ImportOptions(miniimagenet_format="jpeg"),  # type: ignore[arg-type]
            "ImportOptions.miniimagenet_format 'jpeg': choose one of csv, pickle, folders",
        ),
        (
            "miniimagenet",
            ImportOptions(miniimagenet_format="pickle", test_per_class=0),
            "ImportOptions.test_per_class must be an integer of at least 1, got 0",
        ),
        (
            "miniimagenet",
            ImportOptions(miniimagenet_format="csv", seed=-1),
            "ImportOptions.seed must be an integer of at least 0, got -1",
        ),
        (
            "coco-stitch",
            ImportOptions(seed=-1),
            "ImportOptions.seed must be an integer of at least 0, got -1",
        ),
        *(
            (
                kind,
                ImportOptions(num_frames=0),
                "ImportOptions.num_frames must be an integer of at least 1, got 0",
            )
            for kind in ("ntu60", "ntu60-stgcn", "ntu60-efficientgcn")
        ),
    ],
)
def test_options_that_do_not_fit_raise_one_line_before_converting(
    monkeypatch, kind, options, message
) -> None:
    converters = (
        "miniimagenet.import_miniimagenet_csv",
        "miniimagenet.import_miniimagenet_pickle",
        "miniimagenet.import_miniimagenet_folders",
        "coco_stitch.prepare_coco_stitch",
        "ntu60.prepare_ntu60",
        "ntu60.import_ntu60_stgcn",
        "ntu60.import_ntu60_efficientgcn",
    )
    calls = [_replace(monkeypatch, converter) for converter in converters]
    with pytest.raises(ImportOptionError) as error:
        prepare_data(kind, ROOT, source=SOURCE, options=options)
    assert _one_line(error) == message
    assert not any(calls)


def _plant(source: Path, layout: str) -> Path:
    """A folder (or file) laid out as one of the miniImageNet distributions, contents empty."""
    source.mkdir()
    if layout == "csv":
        (source / "images").mkdir()
        (source / "train.csv").write_text("filename,label\n")
    elif layout == "pickle":
        (source / "mini-imagenet-cache-train.pkl").write_bytes(b"")
    elif layout == "folders":
        (source / "train").mkdir()
        (source / "val").mkdir()
    elif layout == "tar":
        (source / "train").mkdir()
        with tarfile.open(source.with_suffix(".tar"), "w") as tar:
            tar.add(source / "train", arcname="miniimagenet/train")
        return source.with_suffix(".tar")
    return source


@pytest.mark.parametrize(
    ("layout", "detected"), [("csv", "csv"), ("pickle", "pickle"), ("folders", "folders"), ("tar", "folders")]
)
def test_miniimagenet_format_detection(tmp_path: Path, layout: str, detected: str) -> None:
    assert detect_miniimagenet_format(_plant(tmp_path / "mini", layout)) == detected
    assert detect_miniimagenet_format(str(_plant(tmp_path / "again", layout))) == detected


@pytest.mark.parametrize("layout", ["empty", "train only"])
def test_miniimagenet_undetectable_folder(tmp_path: Path, layout: str) -> None:
    source = _plant(tmp_path / "mini", layout)
    if layout == "train only":
        (source / "train").mkdir()
    with pytest.raises(DataError) as error:
        detect_miniimagenet_format(source)
    assert _one_line(error) == (
        f"{source} holds neither train.csv (+ images/), mini-imagenet-cache-*.pkl nor train/ and val/ image "
        "folders: point prepare_data.source at one of the miniImageNet distributions (or a tar archive of "
        "the image folders), or pass ImportOptions.miniimagenet_format"
    )


def test_miniimagenet_missing_source(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError) as error:
        detect_miniimagenet_format(tmp_path / "absent")
    assert _one_line(error).startswith(
        f"{tmp_path / 'absent'}: no such folder or archive: point prepare_data.source"
    )


@pytest.mark.parametrize("layout", ["csv", "pickle", "folders"])
def test_prepare_detects_the_miniimagenet_format(monkeypatch, tmp_path: Path, layout: str) -> None:
    calls = _replace(monkeypatch, f"miniimagenet.import_miniimagenet_{layout}", _mini(1, 1))
    source = _plant(tmp_path / "mini", layout)
    assert prepare_data("miniimagenet", ROOT, source=source).summary.startswith(f"miniimagenet ({layout}): ")
    assert len(calls) == 1


def test_detected_folders_refuse_a_test_split(tmp_path: Path) -> None:
    source = _plant(tmp_path / "mini", "folders")
    with pytest.raises(ImportOptionError, match=r"ImportOptions\.test_per_class re-splits"):
        prepare_data("miniimagenet", ROOT, source=source, options=ImportOptions(test_per_class=1))


# ---------------------------------------------------------------------------------------------
# benchmark_info


def test_benchmark_info_of_seq_digits() -> None:
    info = benchmark_info(load_benchmark("seq-digits"))
    assert list(info) == [
        "name",
        "scenario",
        "layout",
        "n_tasks",
        "classes_per_task",
        "num_classes",
        "class_order",
        "train_size",
        "test_size",
        "input_shape",
        "dtype",
        "mean",
        "std",
        "class_names",
        "options",
        "notes",
        "tasks",
        "protocols",
        "protocol",
    ]
    assert json.loads(json.dumps(info)) == info  # plain JSON
    assert (info["name"], info["n_tasks"], info["classes_per_task"]) == ("seq-digits", 5, [2] * 5)
    assert (info["num_classes"], info["class_order"]) == (10, list(range(10)))
    assert (info["train_size"], info["test_size"], info["input_shape"]) == (1442, 355, [1, 8, 8])
    assert (info["dtype"], info["class_names"], info["options"], info["notes"]) == (
        "uint8",
        list("0123456789"),
        {},
        [],
    )
    assert info["tasks"][0] == {
        "task": 0,
        "classes": [0, 1],
        "original_classes": [0, 1],
        "train_size": 289,
        "test_size": 71,
    }
    assert [t["classes"] for t in info["tasks"]] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert sum(t["train_size"] for t in info["tasks"]) == 1442
    assert sum(t["test_size"] for t in info["tasks"]) == 355
    assert info["protocols"] == ["full"]
    assert info["protocol"] == {
        "name": "full",
        "epochs": 10,
        "batch_size": 32,
        "minibatch_size": 32,
        "lr": 0.05,
        "lr_schedule": "none",
        "milestones": [],
        "buffer_size": 200,
        "backbone": "resnet18-cifar",
        "backbone_options": {"width": 16, "in_channels": 1},
        "drop_last": True,
    }


def test_benchmark_info_class_order_validation_and_options() -> None:
    bench = load_benchmark("seq-digits", class_order="reversed", validation=0.1)
    info = benchmark_info(bench, options={"tasks": None})
    assert info["class_order"] == list(range(9, -1, -1))
    assert info["tasks"][0]["original_classes"] == [9, 8]
    assert info["options"] == {"tasks": None}
    assert info["val_size"] == sum(t["val_size"] for t in info["tasks"]) > 0
    assert info["train_size"] + info["val_size"] == 1442
    with pytest.raises(UnknownProtocolError):
        benchmark_info(bench, "laptop")
