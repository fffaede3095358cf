"""coco-stitch: the secondary-targets converter and benchmark on a tiny COCO and a tiny CIFAR-100.

The fixtures are files written in the exact real format (docs/data-formats.md, "COCO 2017
(coco-stitch)" and "CIFAR-10 and CIFAR-100"): ``annotations/instances_{train,val}2017.json`` with
``info``, ``licenses``, ``images``, ``annotations`` (polygons with ``iscrowd=0``, an uncompressed
RLE with ``iscrowd=1``, a tiny instance, a 4-number sliver polygon, a non-shared category) and
``categories`` with COCO's real non-contiguous ids; matching JPEGs in ``train2017/``
and ``val2017/`` (each photo one uniform colour, so that a pasted object's colour is known); and
``cifar-100-python/{train,test,meta}`` pickles (protocol 2, the five keys, all 100 classes, the real
fine label names).
"""

from __future__ import annotations

import json
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from pycocotools import mask as mask_api
from pycocotools.coco import COCO

from xder_data import (
    BenchmarkFormatError,
    Compose,
    CropFlip,
    DataNotFoundError,
    Normalize,
    benchmark_defaults,
    load_benchmark,
)
from xder_data import _coco_format as coco_format  # the COCO reader the generator uses
from xder_data import _coco_stitch_generation as generation
from xder_data import coco_stitch as cs  # registers coco-stitch

# CIFAR-100's fine_label_names, alphabetical (docs/data-formats.md, "CIFAR-10 and CIFAR-100").
CIFAR100_FINE_NAMES = (  # noqa: SIM905
    "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly "
    "camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile "
    "cup dinosaur dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard lamp "
    "lawn_mower leopard lion lizard lobster man maple_tree motorcycle mountain mouse mushroom "
    "oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine "
    "possum rabbit raccoon ray road rocket rose sea seal shark shrew skunk skyscraper snail snake "
    "spider squirrel streetcar sunflower sweet_pepper table tank telephone television tiger tractor "
    "train trout tulip turtle wardrobe whale willow_tree wolf woman worm"
).split()
# The paper's list (App. "Primary and secondary datasets") and COCO's ids (docs/data-formats.md).
PAPER_CLASSES = (  # noqa: SIM905
    "bed cup chair clock bicycle elephant apple bowl bottle keyboard motorcycle train bear bus mouse "
    "couch orange"
).split()
COCO_IDS = {
    "bicycle": 2,
    "motorcycle": 4,
    "bus": 6,
    "train": 7,
    "elephant": 22,
    "bear": 23,
    "bottle": 44,
    "cup": 47,
    "bowl": 51,
    "apple": 53,
    "orange": 55,
    "chair": 62,
    "couch": 63,
    "bed": 65,
    "mouse": 74,
    "keyboard": 76,
    "clock": 85,
}
EXTRA_CATEGORIES = [(1, "person", "person"), (72, "tv", "electronic")]
N_TRAIN, N_TEST = 20, 10

# pycocotools' own annToMask (the reference here) trips numpy 2's copy-keyword deprecation.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy:DeprecationWarning"
)
MIN_AREA = cs.DEFAULT_MIN_AREA
CIFAR_TRAIN_PER_CLASS, CIFAR_TEST_PER_CLASS = 2, 1


# ---------------------------------------------------------------------------------------------
# Fixture writers


def write_cifar100(root: Path, names: list[str] | None = None) -> None:
    rng = np.random.default_rng(3)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    coarse_of_fine = np.arange(100) // 5
    for name, per_class, label in (
        ("train", CIFAR_TRAIN_PER_CLASS, "training"),
        ("test", CIFAR_TEST_PER_CLASS, "testing"),
    ):
        fine = rng.permutation(np.repeat(np.arange(100), per_class))
        obj = {
            "data": rng.integers(0, 256, (len(fine), 3072), dtype=np.uint8),
            "fine_labels": [int(c) for c in fine],
            "coarse_labels": [int(coarse_of_fine[c]) for c in fine],
            "filenames": [f"image_{i:05d}.png" for i in range(len(fine))],
            "batch_label": f"{label} batch 1 of 1",
        }
        (folder / name).write_bytes(pickle.dumps(obj, protocol=2))
    meta = {
        "fine_label_names": list(names or CIFAR100_FINE_NAMES),
        "coarse_label_names": [f"coarse_{c:02d}" for c in range(20)],
    }
    (folder / "meta").write_bytes(pickle.dumps(meta, protocol=2))


def star_polygon(rng: np.random.Generator, width: int, height: int, radius: float) -> list[float]:
    """A star-shaped (hence simple) polygon of 7 vertices around a random centre, inside the image."""
    cx = rng.uniform(radius + 1, width - radius - 1)
    cy = rng.uniform(radius + 1, height - radius - 1)
    angles = (np.arange(7) + rng.uniform(-0.3, 0.3, 7)) * (2 * np.pi / 7)
    radii = rng.uniform(0.85 * radius, radius, 7)
    points = np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], axis=1)
    return [round(float(v), 2) for v in points.ravel()]


def uncompressed_rle(mask: np.ndarray) -> dict[str, Any]:
    """Runs of 0s and 1s in column-major order, starting with 0s (docs/data-formats.md)."""
    flat = mask.astype(np.uint8).ravel(order="F")
    counts, current, run = [], 0, 0
    for value in flat:
        if value == current:
            run += 1
        else:
            counts.append(run)
            current, run = value, 1
    counts.append(run)
    return {"counts": counts, "size": list(mask.shape)}


def polygon_area(polygon: list[float], height: int, width: int) -> float:
    return float(mask_api.area(mask_api.merge(mask_api.frPyObjects([polygon], height, width))))


def write_coco_split(coco_root: Path, split: str, seed: int, per_class: int) -> dict[str, Any]:
    """``annotations/instances_<split>.json`` and ``<split>/*.jpg``; returns the JSON written."""
    rng = np.random.default_rng(seed)
    image_dir = coco_root / split
    image_dir.mkdir(parents=True)
    images, annotations = [], []
    base = 1000 if split == "val2017" else 0

    def add_image(width: int, height: int) -> dict[str, Any]:
        image_id = base + 139 + 7 * len(images)  # sparse ids, as COCO's
        file_name = f"{image_id:012d}.jpg"
        colour = tuple(int(c) for c in rng.integers(20, 236, 3))
        Image.new("RGB", (width, height), colour).save(image_dir / file_name, quality=95)
        record = {
            "id": image_id,
            "file_name": file_name,
            "height": height,
            "width": width,
            "license": 1,
            "coco_url": f"http://images.cocodataset.org/{split}/{file_name}",
            "flickr_url": "",
            "date_captured": "2013-11-14 17:02:52",
        }
        images.append(record)
        return record

    def add_annotation(image: dict[str, Any], category: int, segmentation: Any, crowd: int, area: float):
        annotations.append(
            {
                "id": base + 900 + 13 * len(annotations),
                "image_id": image["id"],
                "category_id": category,
                "iscrowd": crowd,
                "area": area,
                "bbox": [0.0, 0.0, float(image["width"]), float(image["height"])],
                "segmentation": segmentation,
            }
        )

    for name in PAPER_CLASSES:
        for _ in range(per_class):
            width, height = int(rng.integers(64, 90)), int(rng.integers(60, 80))
            image = add_image(width, height)
            polygon = star_polygon(rng, width, height, radius=28)
            add_annotation(image, COCO_IDS[name], [polygon], 0, polygon_area(polygon, height, width))
    # An instance given as uncompressed RLE with iscrowd=0 (as some COCO-format sets do) is kept.
    image = add_image(80, 64)
    disk = np.hypot(*np.ogrid[-32:32, -40:40]) < 22
    add_annotation(image, COCO_IDS["bowl"], uncompressed_rle(disk), 0, float(disk.sum()))
    # Left out: a tiny instance, a crowd region (uncompressed RLE), a 4-number sliver polygon.
    image = images[0]
    tiny = star_polygon(rng, image["width"], image["height"], radius=6)
    add_annotation(image, COCO_IDS["bed"], [tiny], 0, polygon_area(tiny, image["height"], image["width"]))
    crowd = np.zeros((image["height"], image["width"]), dtype=bool)
    crowd[5:45, 10:60] = True
    add_annotation(image, COCO_IDS["cup"], uncompressed_rle(crowd), 1, float(crowd.sum()))
    add_annotation(image, COCO_IDS["chair"], [[2.0, 2.0, 60.0, 50.0]], 0, 2000.0)
    # A category outside the shared set is ignored.
    add_annotation(image, 1, [star_polygon(rng, image["width"], image["height"], 25)], 0, 1500.0)
    categories = [{"id": i, "name": n, "supercategory": "thing"} for n, i in COCO_IDS.items()]
    categories += [{"id": i, "name": n, "supercategory": s} for i, n, s in EXTRA_CATEGORIES]
    data = {
        "info": {"description": "tiny COCO 2017", "version": "1.0", "year": 2017},
        "licenses": [{"id": 1, "name": "CC BY 2.0", "url": ""}],
        "images": images,
        "annotations": annotations,
        "categories": sorted(categories, key=lambda c: c["id"]),
    }
    annotation_dir = coco_root / "annotations"
    annotation_dir.mkdir(exist_ok=True)
    (annotation_dir / f"instances_{split}.json").write_text(json.dumps(data))
    return data


def write_coco(coco_root: Path) -> dict[str, dict[str, Any]]:
    return {
        "train2017": write_coco_split(coco_root, "train2017", seed=10, per_class=2),
        "val2017": write_coco_split(coco_root, "val2017", seed=11, per_class=1),
    }


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("coco_stitch")
    coco_root, data_root = base / "coco", base / "data"
    written = write_coco(coco_root)
    write_cifar100(data_root)
    return coco_root, data_root, written


@pytest.fixture(scope="module")
def prepared(sources) -> tuple[Path, Path, dict[str, Any], cs.COCOStitchReport]:
    coco_root, data_root, written = sources
    report = cs.prepare_coco_stitch(coco_root, data_root, n_train=N_TRAIN, n_test=N_TEST, seed=0)
    return coco_root, data_root, written, report


def read(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {key: f[key][...] for key in f}


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def cifar_images(data_root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    with (data_root / "cifar-100-python" / split).open("rb") as f:
        obj = pickle.load(f, encoding="latin1")
    return obj["data"].reshape(-1, 3, 32, 32), np.asarray(obj["fine_labels"])


def upscaled(image: np.ndarray, size: int = 64) -> np.ndarray:
    x = torch.from_numpy(image)[None].float()
    y = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return y.round().clamp(0, 255).to(torch.uint8)[0].numpy()


def copy_sources(sources, tmp_path: Path) -> tuple[Path, Path]:
    coco_root, data_root = tmp_path / "coco", tmp_path / "data"
    shutil.copytree(sources[0], coco_root)
    shutil.copytree(sources[1] / "cifar-100-python", data_root / "cifar-100-python")
    return coco_root, data_root


# ---------------------------------------------------------------------------------------------
# The class mapping


def test_shared_classes_are_the_papers_with_real_ids() -> None:
    assert sorted(CIFAR100_FINE_NAMES) == CIFAR100_FINE_NAMES
    assert len(CIFAR100_FINE_NAMES) == 100
    assert [shared.name for shared in cs.SHARED_CLASSES] == PAPER_CLASSES
    for shared in cs.SHARED_CLASSES:
        assert shared.coco_id == COCO_IDS[shared.name]
        assert CIFAR100_FINE_NAMES[shared.cifar_id] == shared.name
    assert len({shared.cifar_id for shared in cs.SHARED_CLASSES}) == 17
    assert "television" not in PAPER_CLASSES
    assert "mouse" in PAPER_CLASSES
    mapping = {s.name: (s.coco_id, s.cifar_id) for s in cs.SHARED_CLASSES}
    assert mapping["couch"] == (63, 25)
    assert mapping["mouse"] == (74, 50)
    assert mapping["motorcycle"] == (4, 48)


# ---------------------------------------------------------------------------------------------
# Masks


def test_polygon_and_rle_masks_equal_pycocotools_ann_to_mask(prepared) -> None:
    coco_root = prepared[0]
    coco = COCO(str(coco_root / "annotations" / "instances_train2017.json"))
    anns = coco.loadAnns(coco.getAnnIds(iscrowd=None))
    assert any(a["iscrowd"] == 1 and isinstance(a["segmentation"]["counts"], list) for a in anns)
    for ann in anns:
        if len(ann["segmentation"]) == 1 and len(ann["segmentation"][0]) == 4:
            continue  # the sliver: pycocotools reads a 4-number polygon as a box (skipped by the reader)
        image = coco.imgs[ann["image_id"]]
        mask = cs.decode_mask(ann["segmentation"], image["height"], image["width"])
        assert mask.dtype == bool
        assert mask.shape == (image["height"], image["width"])
        np.testing.assert_array_equal(mask, coco.annToMask(ann).astype(bool))


def test_hand_computed_masks() -> None:
    rectangle = cs.decode_mask([[10, 10, 30, 10, 30, 25, 10, 25]], 40, 50)
    assert rectangle.sum() == 20 * 15  # pycocotools gives 300 pixels (docs/data-formats.md)
    # Uncompressed RLE, column-major: 5 zeros, then 10 ones down column 0 (rows 5..14).
    rle = cs.decode_mask({"counts": [5, 10, 1985], "size": [40, 50]}, 40, 50)
    expected = np.zeros((40, 50), dtype=bool)
    expected[5:15, 0] = True
    np.testing.assert_array_equal(rle, expected)
    # Compressed RLE (counts a string) decodes to the same mask.
    encoded = mask_api.encode(np.asfortranarray(expected.astype(np.uint8)))
    compressed = {"counts": encoded["counts"].decode("ascii"), "size": [40, 50]}
    np.testing.assert_array_equal(cs.decode_mask(compressed, 40, 50), expected)
    np.testing.assert_array_equal(cs.decode_mask(uncompressed_rle(expected), 40, 50), expected)


@pytest.mark.parametrize(
    ("segmentation", "match"),
    [
        ([[1.0, 2.0, 3.0, 4.0]], "at least three"),
        ([], "at least three"),
        ({"counts": [5, 10, 1985], "size": [41, 50]}, "differs"),
        ({"counts": [5, 10, 1984], "size": [40, 50]}, "sum to 1999"),
        ({"counts": 12, "size": [40, 50]}, "expected a list or a string"),
        ("polygon", "neither"),
    ],
)
def test_decode_mask_rejects_other_forms(segmentation: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cs.decode_mask(segmentation, 40, 50)


def test_missing_pycocotools_says_how_to_install(monkeypatch: pytest.MonkeyPatch, sources, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "pycocotools", None)
    monkeypatch.setitem(sys.modules, "pycocotools.mask", None)
    with pytest.raises(ImportError, match=r"pip install 'xder-data\[coco\]'"):
        cs.decode_mask([[10, 10, 30, 10, 30, 25]], 40, 50)
    with pytest.raises(ImportError, match=r"pip install 'xder-data\[coco\]'"):
        cs.prepare_coco_stitch(sources[0], sources[1], n_train=2, n_test=2)


def test_the_converter_cuts_each_eligible_instance_by_its_mask(prepared) -> None:
    """Polygons and RLE alike: the cut is the tight box of pycocotools' annToMask, with its pixels."""
    coco_root = prepared[0]
    path = coco_root / "annotations" / "instances_train2017.json"
    coco = COCO(str(path))
    parsed = coco_format.read_coco(path, coco_root / "train2017", cs.DEFAULT_MIN_AREA)
    forms = set()
    for pool in parsed.pools:
        for instance in pool:
            ann = coco.anns[instance.annotation_id]
            forms.add(type(ann["segmentation"]).__name__)
            full = coco.annToMask(ann).astype(bool)
            rows, cols = np.flatnonzero(full.any(1)), np.flatnonzero(full.any(0))
            crop = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
            photo = np.asarray(Image.open(coco_root / "train2017" / coco.imgs[ann["image_id"]]["file_name"]))
            pixels, mask = coco_format.cut_instance(parsed, instance)
            np.testing.assert_array_equal(mask, full[crop])
            np.testing.assert_array_equal(pixels, photo[crop])
    assert forms == {"list", "dict"}


# ---------------------------------------------------------------------------------------------
# Pasting


def test_paste_at_unchanged_size_copies_the_objects_pixels_under_its_mask() -> None:
    rng = np.random.default_rng(0)
    background = rng.integers(0, 256, (3, 64, 64), dtype=np.uint8)
    pixels = rng.integers(0, 256, (15, 20, 3), dtype=np.uint8)
    mask = cs.decode_mask([[2, 1, 18, 3, 12, 14]], 15, 20)
    image, pasted = cs.paste_instance(background, pixels, mask, 40, 7, 15, 20)
    expected_mask = np.zeros((64, 64), dtype=bool)
    expected_mask[40:55, 7:27] = mask
    np.testing.assert_array_equal(pasted, expected_mask)
    region = image[:, 40:55, 7:27]
    np.testing.assert_array_equal(region[:, mask], pixels[mask].T)  # the object's pixels...
    np.testing.assert_array_equal(image[:, ~expected_mask], background[:, ~expected_mask])  # ...and no more
    assert image.dtype == np.uint8
    assert not np.shares_memory(image, background)


def test_paste_uses_only_mask_pixels_for_the_colour() -> None:
    """Premultiplied alpha: a shrunk object keeps its colour exactly; the photo's background never
    bleeds into its edge."""
    pixels = np.empty((30, 45, 3), dtype=np.uint8)
    pixels[:] = (0, 255, 0)  # the photo's background
    mask = cs.decode_mask([[3, 2, 42, 5, 30, 28, 6, 20]], 30, 45)
    pixels[mask] = (200, 30, 90)  # the object
    background = np.full((3, 64, 64), 7, dtype=np.uint8)
    image, pasted = cs.paste_instance(background, pixels, mask, 5, 9, 12, 18)
    assert pasted[5:17, 9:27].sum() == pasted.sum() > 50
    assert (image[:, pasted].T == (200, 30, 90)).all()
    assert (image[:, ~pasted] == 7).all()


def test_paste_keeps_a_thin_object_visible() -> None:
    mask = np.zeros((40, 40), dtype=bool)
    mask[:, 20] = True  # one pixel wide: no resized pixel reaches half coverage at 1/4 scale
    pixels = np.full((40, 40, 3), 99, dtype=np.uint8)
    image, pasted = cs.paste_instance(np.zeros((3, 64, 64), np.uint8), pixels, mask, 0, 0, 10, 10)
    assert pasted.any()
    assert (image[:, pasted] == 99).all()


@pytest.mark.parametrize(
    ("top", "left", "height", "width"), [(50, 0, 15, 20), (0, 45, 15, 20), (-1, 0, 15, 20)]
)
def test_paste_refuses_a_box_outside_the_image(top: int, left: int, height: int, width: int) -> None:
    with pytest.raises(ValueError, match="box"):
        cs.paste_instance(
            np.zeros((3, 64, 64), np.uint8),
            np.zeros((15, 20, 3), np.uint8),
            np.ones((15, 20), bool),
            top,
            left,
            height,
            width,
        )


def test_scaled_size_keeps_the_aspect_ratio() -> None:
    assert generation._scaled_size(30, 60, 0.5, 64) == (16, 32)
    assert generation._scaled_size(60, 30, 0.5, 64) == (32, 16)
    assert generation._scaled_size(100, 1, 0.35, 64) == (22, 1)


# ---------------------------------------------------------------------------------------------
# The converter


def test_files_layout_and_report(prepared) -> None:
    _, data_root, _, report = prepared
    folder = data_root / "coco_stitch"
    assert sorted(p.name for p in folder.iterdir()) == ["test.h5", "train.h5"]  # no .partial left
    assert report.paths == {"train": folder / "train.h5", "test": folder / "test.h5"}
    assert (report.n_train, report.n_test, report.size) == (N_TRAIN, N_TEST, 64)
    assert report.classes == cs.SHARED_CLASSES
    assert report.class_mapping["orange"] == (55, 53)
    assert report.eligible == {
        "train": dict.fromkeys(PAPER_CLASSES, 2) | {"bowl": 3},
        "test": dict.fromkeys(PAPER_CLASSES, 1) | {"bowl": 2},
    }
    for split in ("train", "test"):
        assert report.skipped[split] == {"crowd": 1, "small": 1, "degenerate": 1}
        assert sum(report.primary_counts[split].values()) == report.__getattribute__(f"n_{split}")
        assert sum(report.secondary_counts[split].values()) == report.__getattribute__(f"n_{split}")
    for split, n in (("train", N_TRAIN), ("test", N_TEST)):
        arrays = read(folder / f"{split}.h5")
        assert arrays["images"].shape == (n, 3, 64, 64)
        assert arrays["images"].dtype == np.uint8
        assert arrays["masks"].shape == (n, 64, 64)
        assert arrays["masks"].dtype == bool
        assert arrays["boxes"].shape == (n, 4)
        assert arrays["boxes"].dtype == np.int32
        for key in (
            "primary_labels",
            "secondary_labels",
            "cifar_rows",
            "coco_annotation_ids",
            "coco_image_ids",
        ):
            assert arrays[key].shape == (n,)
            assert arrays[key].dtype == np.int64
        assert [name.decode() for name in arrays["class_names"]] == CIFAR100_FINE_NAMES
        assert np.bincount(arrays["primary_labels"], minlength=100)[
            [s.cifar_id for s in cs.SHARED_CLASSES]
        ].tolist() == list(report.primary_counts[split].values())
        with h5py.File(folder / f"{split}.h5", "r") as f:
            attrs = dict(f.attrs)
        assert attrs["format"] == "xder-coco-stitch"
        assert attrs["split"] == split
        assert (attrs["size"], attrs["seed"], attrs["min_area"]) == (64, 0, 1024.0)
        assert attrs["scale"].tolist() == [0.35, 0.6]
        assert attrs["coco_annotations"] == f"instances_{'train' if split == 'train' else 'val'}2017.json"


def test_pairs_are_distinct_shared_classes_and_provenance_agrees(prepared) -> None:
    _, data_root, written, _ = prepared
    shared_ids = {s.cifar_id for s in cs.SHARED_CLASSES}
    cifar_of_coco = {s.coco_id: s.cifar_id for s in cs.SHARED_CLASSES}
    for split, coco_split in (("train", "train2017"), ("test", "val2017")):
        arrays = read(data_root / "coco_stitch" / f"{split}.h5")
        primary, secondary = arrays["primary_labels"], arrays["secondary_labels"]
        assert (primary != secondary).all()
        assert set(primary.tolist()) <= shared_ids
        assert set(secondary.tolist()) <= shared_ids
        # The background is a CIFAR image of the primary class, from the matching CIFAR split.
        _, labels = cifar_images(data_root, split)
        np.testing.assert_array_equal(labels[arrays["cifar_rows"]], primary)
        # The object is an eligible instance of the secondary class, from the matching COCO split.
        anns = {a["id"]: a for a in written[coco_split]["annotations"]}
        for ann_id, image_id, label in zip(
            arrays["coco_annotation_ids"], arrays["coco_image_ids"], secondary, strict=True
        ):
            ann = anns[int(ann_id)]
            assert ann["image_id"] == image_id
            assert cifar_of_coco[ann["category_id"]] == label
            assert ann["iscrowd"] == 0
            assert ann["area"] >= MIN_AREA
            assert isinstance(ann["segmentation"], dict) or len(ann["segmentation"][0]) > 4


def test_pasted_region_is_the_object_and_the_rest_is_the_upscaled_cifar_image(prepared) -> None:
    coco_root, data_root, written, _ = prepared
    for split, coco_split in (("train", "train2017"), ("test", "val2017")):
        arrays = read(data_root / "coco_stitch" / f"{split}.h5")
        cifar, _ = cifar_images(data_root, split)
        files = {image["id"]: image["file_name"] for image in written[coco_split]["images"]}
        for i in range(len(arrays["images"])):
            image, mask = arrays["images"][i], arrays["masks"][i]
            top, left, height, width = arrays["boxes"][i].tolist()
            # Inside the image, longest side in the documented range (35-60% of 64 px), mask in its box.
            assert top >= 0
            assert left >= 0
            assert top + height <= 64
            assert left + width <= 64
            assert round(0.35 * 64) <= max(height, width) <= round(0.6 * 64)
            assert mask.any()
            assert mask[top : top + height, left : left + width].sum() == mask.sum()
            assert mask[top : top + height, left : left + width].any(axis=0).sum() >= width - 1
            background = upscaled(cifar[arrays["cifar_rows"][i]])
            np.testing.assert_array_equal(image[:, ~mask], background[:, ~mask])
            photo = np.asarray(Image.open(coco_root / coco_split / files[int(arrays["coco_image_ids"][i])]))
            colour = photo[0, 0]
            assert (photo == colour).all()  # the fixture's photos are uniform
            assert (colour == image[:, mask].T).all()


def test_masks_follow_pycocotools_geometry(prepared) -> None:
    """Rebuild each example from pycocotools' annToMask, the stored box and the CIFAR pixels."""
    coco_root, data_root, _, _ = prepared
    for split, coco_split in (("train", "train2017"), ("test", "val2017")):
        coco = COCO(str(coco_root / "annotations" / f"instances_{coco_split}.json"))
        arrays = read(data_root / "coco_stitch" / f"{split}.h5")
        cifar, _ = cifar_images(data_root, split)
        for i in range(len(arrays["images"])):
            ann = coco.anns[int(arrays["coco_annotation_ids"][i])]
            full = coco.annToMask(ann).astype(bool)
            rows, cols = np.flatnonzero(full.any(1)), np.flatnonzero(full.any(0))
            crop = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
            photo = np.asarray(Image.open(coco_root / coco_split / coco.imgs[ann["image_id"]]["file_name"]))
            image, mask = cs.paste_instance(
                upscaled(cifar[arrays["cifar_rows"][i]]),
                photo[crop],
                full[crop],
                *arrays["boxes"][i].tolist(),
            )
            np.testing.assert_array_equal(mask, arrays["masks"][i])
            np.testing.assert_array_equal(image, arrays["images"][i])
            # The aspect ratio is kept up to rounding.
            height, width = arrays["boxes"][i, 2:].tolist()
            longest = max(height, width)
            factor = longest / max(full[crop].shape)
            assert abs(height - full[crop].shape[0] * factor) <= 0.5 + 1e-9
            assert abs(width - full[crop].shape[1] * factor) <= 0.5 + 1e-9


def test_same_seed_same_files_other_seed_other_files(prepared, sources, tmp_path: Path) -> None:
    _, data_root, _, _ = prepared
    first = {split: read(data_root / "coco_stitch" / f"{split}.h5") for split in ("train", "test")}
    again = tmp_path / "again"
    shutil.copytree(sources[1] / "cifar-100-python", again / "cifar-100-python")
    cs.prepare_coco_stitch(sources[0], again, n_train=N_TRAIN, n_test=N_TEST, seed=0)
    for split in ("train", "test"):
        second = read(again / "coco_stitch" / f"{split}.h5")
        for key, values in first[split].items():
            np.testing.assert_array_equal(second[key], values)
    # The test set does not depend on n_train; another seed draws other examples.
    cs.prepare_coco_stitch(sources[0], again, n_train=3, n_test=N_TEST, seed=0)
    np.testing.assert_array_equal(read(again / "coco_stitch" / "test.h5")["images"], first["test"]["images"])
    assert read(again / "coco_stitch" / "train.h5")["images"].shape[0] == 3
    cs.prepare_coco_stitch(sources[0], again, n_train=N_TRAIN, n_test=N_TEST, seed=1)
    other = read(again / "coco_stitch" / "train.h5")
    assert not np.array_equal(other["primary_labels"], first["train"]["primary_labels"])
    assert not np.array_equal(other["images"], first["train"]["images"])


def test_progress_wraps_each_splits_examples(sources, tmp_path: Path) -> None:
    data_root = tmp_path / "data"
    shutil.copytree(sources[1] / "cifar-100-python", data_root / "cifar-100-python")
    seen: list[int] = []

    def progress(items):
        items = list(items)
        seen.append(len(items))
        return items

    cs.prepare_coco_stitch(sources[0], data_root, n_train=4, n_test=3, progress=progress)
    assert seen == [4, 3]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"n_train": 0}, "n_train must be an integer of at least 1"),
        ({"n_test": 2.5}, "n_test must be an integer of at least 1"),
        ({"size": 16}, "size must be an integer of at least 32"),
        ({"scale": (0.6, 0.3)}, "scale must be"),
        ({"min_area": -1}, "min_area must be"),
        ({"seed": -3}, "seed must be an integer of at least 0"),
    ],
)
def test_options_are_checked(sources, options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cs.prepare_coco_stitch(sources[0], sources[1], **options)


# ---------------------------------------------------------------------------------------------
# Missing and malformed inputs


def test_missing_annotation_file(sources, tmp_path: Path) -> None:
    coco_root, data_root = copy_sources(sources, tmp_path)
    (coco_root / "annotations" / "instances_val2017.json").unlink()
    with pytest.raises(DataNotFoundError) as exc:
        cs.prepare_coco_stitch(coco_root, data_root, n_train=4, n_test=2)
    message = one_line(exc)
    assert message.startswith(f"{coco_root / 'annotations' / 'instances_val2017.json'}: ")
    assert "annotations_trainval2017.zip" in message


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ("no annotations", "key 'annotations' missing"),
        ("not json", "not readable JSON"),
        ("list", "holds a list"),
        ("renamed category", "category 74 is named 'computer mouse', expected 'mouse'"),
        ("no category", r"category 85 \(clock\) missing"),
        ("unknown image", "names image 424242, absent from 'images'"),
        ("no segmentation", "lacks 'segmentation'"),
        ("no eligible", "no eligible instance of 'bed'"),
    ],
)
def test_malformed_annotation_file(sources, tmp_path: Path, change: str, match: str) -> None:
    coco_root, data_root = copy_sources(sources, tmp_path)
    path = coco_root / "annotations" / "instances_train2017.json"
    data = json.loads(path.read_text())
    if change == "no annotations":
        del data["annotations"]
    elif change == "list":
        data = [data]
    elif change == "renamed category":
        next(c for c in data["categories"] if c["id"] == 74)["name"] = "computer mouse"
    elif change == "no category":
        data["categories"] = [c for c in data["categories"] if c["id"] != 85]
    elif change == "unknown image":
        data["annotations"][3]["image_id"] = 424242
    elif change == "no segmentation":
        del data["annotations"][0]["segmentation"]
    elif change == "no eligible":
        for ann in data["annotations"]:
            if ann["category_id"] == 65:
                ann["area"] = 10.0
    path.write_text("{ truncated" if change == "not json" else json.dumps(data))
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        cs.prepare_coco_stitch(coco_root, data_root, n_train=4, n_test=2)
    assert one_line(exc).startswith(f"{path}: ")
    assert not (data_root / "coco_stitch").exists()


def test_unreadable_image(sources, tmp_path: Path) -> None:
    coco_root, data_root = copy_sources(sources, tmp_path)
    for jpg in (coco_root / "val2017").iterdir():
        jpg.write_bytes(b"\xff\xd8 not a JPEG")
    with pytest.raises(BenchmarkFormatError, match="not a readable image") as exc:
        cs.prepare_coco_stitch(coco_root, data_root, n_train=4, n_test=2)
    message = one_line(exc)
    assert message.startswith(str(coco_root / "val2017"))
    assert ".jpg: " in message
    assert sorted(p.name for p in (data_root / "coco_stitch").iterdir()) == []  # no partial file left


def test_image_of_the_wrong_size(sources, tmp_path: Path) -> None:
    coco_root, data_root = copy_sources(sources, tmp_path)
    for jpg in (coco_root / "train2017").iterdir():
        Image.new("RGB", (10, 10), (1, 2, 3)).save(jpg)
    with pytest.raises(
        BenchmarkFormatError, match=r"image is 10x10 but instances_train2017\.json says"
    ) as exc:
        cs.prepare_coco_stitch(coco_root, data_root, n_train=4, n_test=2)
    one_line(exc)


def test_missing_image(sources, tmp_path: Path) -> None:
    coco_root, data_root = copy_sources(sources, tmp_path)
    shutil.rmtree(coco_root / "val2017")
    with pytest.raises(DataNotFoundError, match="COCO image missing") as exc:
        cs.prepare_coco_stitch(coco_root, data_root, n_train=4, n_test=2)
    assert "val2017.zip" in one_line(exc)


def test_missing_cifar(sources, tmp_path: Path) -> None:
    coco_root, data_root = copy_sources(sources, tmp_path)
    shutil.rmtree(data_root / "cifar-100-python")
    with pytest.raises(DataNotFoundError) as exc:
        cs.prepare_coco_stitch(coco_root, data_root, n_train=4, n_test=2)
    message = one_line(exc)
    assert str(data_root / "cifar-100-python") in message
    assert "download_data('cifar100'" in message


def test_cifar_with_other_class_names(sources, tmp_path: Path) -> None:
    data_root = tmp_path / "data"
    write_cifar100(data_root, names=[f"fine_{c:02d}" for c in range(100)])
    with pytest.raises(BenchmarkFormatError, match="fine label 5 is named 'fine_05', expected 'bed'") as exc:
        cs.prepare_coco_stitch(sources[0], data_root, n_train=4, n_test=2)
    assert one_line(exc).startswith(str(data_root / "cifar-100-python" / "meta"))


# ---------------------------------------------------------------------------------------------
# The benchmark


@pytest.fixture(scope="module")
def bench(prepared):
    return load_benchmark("coco-stitch", prepared[1])


def test_benchmark_holds_the_files(bench, prepared) -> None:
    data_root = prepared[1]
    train, test = (read(data_root / "coco_stitch" / f"{s}.h5") for s in ("train", "test"))
    assert (bench.name, bench.n_tasks, bench.classes_per_task, bench.num_classes) == (
        "coco-stitch",
        1,
        (100,),
        100,
    )
    assert bench.input_shape == (3, 64, 64)
    assert bench.train_x.shape == (N_TRAIN, 3, 64, 64)
    assert bench.train_x.dtype == torch.uint8
    assert bench.test_x.shape == (N_TEST, 3, 64, 64)
    np.testing.assert_array_equal(bench.train_x.numpy(), train["images"])
    np.testing.assert_array_equal(bench.test_x.numpy(), test["images"])
    assert bench.train_y.tolist() == train["primary_labels"].tolist()
    assert bench.test_y.tolist() == test["primary_labels"].tolist()
    assert bench.train_secondary_y.tolist() == train["secondary_labels"].tolist()
    assert bench.test_secondary_y.tolist() == test["secondary_labels"].tolist()
    assert bench.test_masks.shape == (N_TEST, 64, 64)
    assert bench.test_masks.dtype == torch.bool
    np.testing.assert_array_equal(bench.test_masks.numpy(), test["masks"])
    assert bench.class_names == tuple(CIFAR100_FINE_NAMES)
    split = bench.task(0)
    assert (split.class_start, split.class_end) == (0, 100)
    assert len(split.train) == N_TRAIN
    assert len(split.test) == N_TEST


def test_protocol_and_transforms(bench) -> None:
    defaults = benchmark_defaults("coco-stitch")
    assert bench.defaults is defaults
    assert (defaults.epochs, defaults.batch_size, defaults.minibatch_size, defaults.lr) == (50, 32, 32, 0.1)
    assert (defaults.optimizer, defaults.lr_schedule, defaults.buffer_size) == ("sgd", "none", 0)
    assert defaults.backbone == "resnet18-cifar"
    assert defaults.backbone_options["width"] == 64
    mean, std = (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)
    assert (bench.mean, bench.std) == (mean, std)
    assert isinstance(bench.train_transform, Compose)
    crop, normalize = bench.train_transform.transforms
    assert isinstance(crop, CropFlip)
    assert (crop.size, crop.padding, crop.flip) == ((64, 64), 8, True)
    assert isinstance(normalize, Normalize)
    assert (normalize.mean, normalize.std) == (mean, std)
    assert isinstance(bench.test_transform, Normalize)
    g = torch.Generator().manual_seed(0)
    assert bench.train_transform(bench.train_x[:4], g).shape == (4, 3, 64, 64)


def test_class_order_remaps_primary_and_secondary_labels(bench, prepared) -> None:
    reversed_bench = load_benchmark("coco-stitch", prepared[1], class_order="reversed")
    assert reversed_bench.class_order == tuple(range(99, -1, -1))
    assert (reversed_bench.train_y == 99 - bench.train_y).all()
    assert (reversed_bench.test_secondary_y == 99 - bench.test_secondary_y).all()
    assert (reversed_bench.train_secondary_y == 99 - bench.train_secondary_y).all()
    assert torch.equal(reversed_bench.test_masks, bench.test_masks)
    assert reversed_bench.class_names[99 - 50] == "mouse"


def test_benchmark_without_files(tmp_path: Path) -> None:
    with pytest.raises(
        DataNotFoundError,
        match=r"needs a data root .*prepare_data\('coco-stitch', 'ROOT', source='COCO_DIR'\)",
    ):
        load_benchmark("coco-stitch")
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("coco-stitch", tmp_path)
    message = one_line(exc)
    assert str(tmp_path / "coco_stitch" / "train.h5") in message
    assert f"prepare_data('coco-stitch', '{tmp_path}', source='COCO_DIR')" in message


@pytest.mark.parametrize(
    "change", ["not hdf5", "truncated", "no masks", "float images", "label 100", "short boxes", "format"]
)
def test_benchmark_rejects_a_wrong_layout(prepared, tmp_path: Path, change: str) -> None:
    shutil.copytree(prepared[1] / "coco_stitch", tmp_path / "coco_stitch")
    path = tmp_path / "coco_stitch" / "test.h5"
    if change == "not hdf5":
        path.write_bytes(b"plain text")
    elif change == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        with h5py.File(path, "r+") as f:
            if change == "no masks":
                del f["masks"]
            elif change == "float images":
                images = f["images"][...]
                del f["images"]
                f["images"] = images.astype(np.float32)
            elif change == "label 100":
                f["secondary_labels"][2] = 100
            elif change == "short boxes":
                del f["boxes"]
                f["boxes"] = np.zeros((3, 4), np.int32)
            else:
                f.attrs["format"] = "something else"
    match = {
        "not hdf5": "not a readable HDF5 file",
        "truncated": "not a readable HDF5 file",
        "no masks": "dataset 'masks' missing",
        "float images": r"'images' is float32 \(10, 3, 64, 64\), expected uint8",
        "label 100": "'secondary_labels' row 2 is 100, expected 0..99",
        "short boxes": r"'boxes' is int32 \(3, 4\), expected int \(10, 4\)",
        "format": "format attribute is 'something else'",
    }[change]
    with pytest.raises(BenchmarkFormatError, match=match) as exc:
        load_benchmark("coco-stitch", tmp_path)
    message = one_line(exc)
    assert message.startswith(f"{path}: ")
    assert "prepare_data('coco-stitch'" in message
