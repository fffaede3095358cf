"""seq-cub200: the CUB-200-2011 reader, its checks, the cache, the annotations and the training
transform, on a tiny tree of files written in the exact real format (docs/data-formats.md,
"CUB-200-2011").

The tree has all 200 class folders (the benchmark's 10 x 20 tasks need them) with one or two
JPEGs of 10-16 x 8-13 pixels each (some grayscale), the seven txt files with 1-based ids, and
``segmentations/`` PNG masks in modes L and LA.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from xder_data import cub200  # registers seq-cub200
from xder_data.augment import StrongAugment
from xder_data.benchmark import benchmark_defaults, list_benchmarks, load_benchmark
from xder_data.errors import BenchmarkFormatError, DataNotFoundError

PART_NAMES = (
    "back",
    "beak",
    "belly",
    "breast",
    "crown",
    "forehead",
    "left eye",
    "left leg",
    "left wing",
    "nape",
    "right eye",
    "right leg",
    "right wing",
    "tail",
    "throat",
)
MEAN = (0.4856, 0.4994, 0.4324)
STD = (0.2272, 0.2226, 0.2613)


def class_dir(c: int) -> str:
    return f"{c:03d}.Species_{c}_Bird"


def plan() -> list[dict]:
    """The images of the tree, in id order: class c holds one training and one test image, except
    classes with c % 10 == 0 (one training image) and c % 10 == 5 (one test image)."""
    images = []
    for c in range(1, 201):
        splits = (1,) if c % 10 == 0 else (0,) if c % 10 == 5 else (1, 0)
        for k, train in enumerate(splits):
            image_id = len(images) + 1
            width, height = 10 + image_id % 7, 8 + (3 * image_id) % 6
            images.append(
                {
                    "id": image_id,
                    "class": c,
                    "train": train,
                    "name": f"{class_dir(c)}/Species_{c}_Bird_{k:04d}_{7000 + image_id}.jpg",
                    "size": (width, height),
                    "gray": image_id % 50 == 7,
                    "la": image_id % 9 == 0,
                }
            )
    images[1]["size"] = (16, 8)  # the planted test image (id 2, class 1): see write_tree
    return images


PLAN = plan()
TRAIN = [im for im in PLAN if im["train"]]
TEST = [im for im in PLAN if not im["train"]]


def box_of(image_id: int) -> tuple[float, float, float, float]:
    return (4.0, 2.0, 8.0, 4.0) if image_id == 2 else (1.0 + image_id % 3, 0.5 + image_id % 2, 4.0, 3.5)


def part_of(image_id: int, part: int, size: tuple[int, int]) -> tuple[float, float, int]:
    """(x, y, visible) of part id ``part``; the planted image's back is at (8, 4), its beak hidden."""
    if image_id == 2 and part in (1, 2):
        return (8.0, 4.0, 1) if part == 1 else (0.0, 0.0, 0)
    if (image_id + part) % 3:
        return 0.0, 0.0, 0
    return part % size[0] + 0.5, part % size[1] + 0.25, 1


def mask_of(image: dict, rng: np.random.Generator) -> np.ndarray:
    width, height = image["size"]
    if image["id"] == 2:
        mask = np.zeros((8, 16), dtype=np.uint8)
        mask[2:6, 5:10] = 200  # the bird: >= 128
        mask[6:8, 12:15] = 100  # a soft fringe: below 128, above 0
        return mask
    return rng.choice(np.array([0, 60, 128, 255], dtype=np.uint8), size=(height, width))


def write_tree(root: Path) -> None:
    rng = np.random.default_rng(0)
    folder = root / "CUB_200_2011"
    (folder / "parts").mkdir(parents=True)
    for c in range(1, 201):
        (folder / "images" / class_dir(c)).mkdir(parents=True)
        (root / "segmentations" / class_dir(c)).mkdir(parents=True)
    for image in PLAN:
        width, height = image["size"]
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        picture = Image.fromarray(pixels).convert("L") if image["gray"] else Image.fromarray(pixels)
        picture.save(folder / "images" / image["name"], quality=95)
        if not image["train"]:
            mask = Image.fromarray(mask_of(image, rng), mode="L")
            if image["la"]:  # the L band is the mask; alpha is anything
                alpha = Image.fromarray(rng.integers(0, 256, (height, width), dtype=np.uint8), mode="L")
                mask = Image.merge("LA", (mask, alpha))
            mask.save(root / "segmentations" / Path(image["name"]).with_suffix(".png"))

    def write(name: str, lines: list[str]) -> None:
        (folder / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")

    write("classes.txt", [f"{c} {class_dir(c)}" for c in range(1, 201)])
    write("images.txt", [f"{im['id']} {im['name']}" for im in PLAN])
    write("image_class_labels.txt", [f"{im['id']} {im['class']}" for im in PLAN])
    # Listed in reverse: files are matched by id, not by line.
    write("train_test_split.txt", [f"{im['id']} {im['train']}" for im in reversed(PLAN)])
    write("bounding_boxes.txt", [f"{im['id']} " + " ".join(map(repr, box_of(im["id"]))) for im in PLAN])
    write("parts/parts.txt", [f"{p} {name}" for p, name in enumerate(PART_NAMES, start=1)])
    write(
        "parts/part_locs.txt",
        [
            "{} {} {!r} {!r} {}".format(im["id"], p, *part_of(im["id"], p, im["size"]))
            for im in PLAN
            for p in range(1, 16)
        ],
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cub")
    write_tree(root)
    return root


@pytest.fixture(scope="module")
def bench(tree: Path):
    return load_benchmark("seq-cub200", tree, cache=False)


@pytest.fixture
def copy(tree: Path, tmp_path: Path) -> Path:
    """A private copy of the tree, to break."""
    root = tmp_path / "root"
    shutil.copytree(tree, root)
    return root


@pytest.fixture
def listing_copy(tree: Path, tmp_path: Path) -> Path:
    """A private copy of the tree's txt files only (no image nor mask), to break a listing."""
    root = tmp_path / "root"
    shutil.copytree(tree / "CUB_200_2011", root / "CUB_200_2011", ignore=shutil.ignore_patterns("images"))
    return root


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def _expected_image(root: Path, image: dict, size: int) -> torch.Tensor:
    with Image.open(root / "CUB_200_2011" / "images" / image["name"]) as picture:
        resized = picture.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
    return torch.from_numpy(np.asarray(resized).transpose(2, 0, 1).copy())


# ---------------------------------------------------------------------------------------------
# The benchmark


def test_registered_with_the_papers_protocol() -> None:
    assert "seq-cub200" in list_benchmarks()
    defaults = benchmark_defaults("seq-cub200")
    assert defaults is cub200.SEQ_CUB200_DEFAULTS
    assert defaults.epochs == 70
    assert defaults.optimizer == "radam"
    assert defaults.lr_schedule == "multistep"
    assert defaults.milestones == (20, 40, 60)
    assert defaults.lr_gamma == 0.2
    assert defaults.backbone == "resnet18"
    assert (defaults.batch_size, defaults.minibatch_size, defaults.lr, defaults.buffer_size) == (
        32,
        32,
        0.001,
        500,
    )


def test_shapes_dtypes_labels_and_split(bench) -> None:
    assert bench.name == "seq-cub200"
    assert (bench.n_tasks, bench.classes_per_task) == (10, (20,) * 10)
    assert bench.train_x.shape == (len(TRAIN), 3, 256, 256)
    assert bench.test_x.shape == (len(TEST), 3, 224, 224)
    assert bench.train_x.dtype == bench.test_x.dtype == torch.uint8
    assert bench.test_masks.shape == (len(TEST), 224, 224)
    assert bench.test_masks.dtype == torch.bool
    assert bench.input_shape == (3, 256, 256)
    assert (bench.mean, bench.std) == (MEAN, STD)
    assert bench.train_y.dtype == bench.test_y.dtype == torch.int64
    # Rows in image-id order within each split; class id c is label c - 1.
    assert bench.train_y.tolist() == [im["class"] - 1 for im in TRAIN]
    assert bench.test_y.tolist() == [im["class"] - 1 for im in TEST]
    assert bench.class_order == tuple(range(200))
    assert bench.class_names[0] == "Species_1_Bird"
    assert bench.class_names[199] == "Species_200_Bird"


def test_rows_are_the_resized_images(tree: Path, bench) -> None:
    gray = next(i for i, im in enumerate(TRAIN) if im["gray"])
    for row in (0, gray, len(TRAIN) - 1):
        assert torch.equal(bench.train_x[row], _expected_image(tree, TRAIN[row], 256))
    for row in (0, len(TEST) - 1):
        assert torch.equal(bench.test_x[row], _expected_image(tree, TEST[row], 224))


def test_each_task_holds_twenty_classes_in_id_order(bench) -> None:
    for t in range(10):
        split = bench.task(t)
        assert (split.class_start, split.class_end) == (20 * t, 20 * t + 20)
        train_classes = {TRAIN[r]["class"] for r in split.train.tolist()}
        test_classes = {TEST[r]["class"] for r in split.test.tolist()}
        assert train_classes | test_classes == set(range(20 * t + 1, 20 * t + 21))
    assert sum(len(bench.task(t).train) for t in range(10)) == len(TRAIN)
    assert sum(len(bench.task(t).test) for t in range(10)) == len(TEST)


def test_class_orders_through_load_benchmark(tree: Path, bench) -> None:
    reversed_bench = load_benchmark("seq-cub200", tree, class_order="reversed", cache=False)
    assert reversed_bench.train_y.tolist() == [200 - im["class"] for im in TRAIN]
    assert reversed_bench.class_order == tuple(range(199, -1, -1))
    first = reversed_bench.task(0)
    assert {TRAIN[r]["class"] for r in first.train.tolist()} <= set(range(181, 201))
    assert reversed_bench.class_names[0] == "Species_200_Bird"
    # Test rows (and so their masks) are never reordered.
    assert torch.equal(reversed_bench.test_x, bench.test_x)
    assert torch.equal(reversed_bench.test_masks, bench.test_masks)

    order = [int(c) for c in np.random.default_rng(5).permutation(200)]
    permuted = load_benchmark("seq-cub200", tree, class_order=order, cache=False)
    position = {c: i for i, c in enumerate(order)}
    assert permuted.test_y.tolist() == [position[im["class"] - 1] for im in TEST]
    assert permuted.class_order == tuple(order)


def test_masks_carry_the_test_geometry(bench) -> None:
    # The planted 16x8 mask (test row 0): 200 on rows 2..5, columns 5..9; 100 on rows 6..7,
    # columns 12..14. Output column j takes column floor((j + 0.5) * 16 / 224): columns 5..9 land
    # on 70..139; rows (factor 28) 2..5 land on 56..167.
    mask = bench.test_masks[0]
    expected = torch.zeros(224, 224, dtype=torch.bool)
    expected[56:168, 70:140] = True
    assert torch.equal(mask, expected)
    assert int(mask.sum()) == 112 * 70


def test_mask_threshold_option(tree: Path) -> None:
    mammoth = load_benchmark("seq-cub200", tree, cache=False, mask_threshold=1)
    expected = torch.zeros(224, 224, dtype=torch.bool)
    expected[56:168, 70:140] = True
    expected[168:224, 168:210] = True  # the 100 fringe: rows 6..7 -> 168..223, columns 12..14 -> 168..209
    assert torch.equal(mammoth.test_masks[0], expected)
    with pytest.raises(ValueError, match="mask_threshold"):
        load_benchmark("seq-cub200", tree, cache=False, mask_threshold=0)


def test_every_mask_matches_pillows_nearest_resize(tree: Path, bench) -> None:
    assert any(im["la"] for im in TEST)
    for row, image in enumerate(TEST):
        with Image.open(tree / "segmentations" / Path(image["name"]).with_suffix(".png")) as mask:
            assert mask.mode == ("LA" if image["la"] else "L")
            band = mask.getchannel(0)  # the L band (LA's alpha is not the mask)
        resized = np.asarray(band.resize((224, 224), Image.Resampling.NEAREST))
        assert torch.equal(bench.test_masks[row], torch.from_numpy(resized >= 128)), image["name"]


def test_masks_optional(tree: Path, copy: Path) -> None:
    assert load_benchmark("seq-cub200", tree, cache=False, masks=False).test_masks is None
    shutil.rmtree(copy / "segmentations")
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cub200", copy, cache=False)
    assert "segmentations" in _one_line(exc)
    assert "masks=False" in _one_line(exc)
    assert load_benchmark("seq-cub200", copy, cache=False, masks=False).test_masks is None


def test_transforms_of_the_benchmark(bench) -> None:
    generator = torch.Generator().manual_seed(0)
    out = bench.train_transform(bench.train_x[:4], generator)
    assert out.shape == (4, 3, 224, 224)
    assert out.dtype == torch.float32
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    test = bench.test_transform(bench.test_x[:4])
    torch.testing.assert_close(test, (bench.test_x[:4] / 255 - mean) / std)
    # Validation rows come from the 256x256 training rows: evaluated at 224 too.
    assert bench.test_transform(bench.train_x[:2]).shape == (2, 3, 224, 224)
    # StrongAugment at 224 on the stored 256x256 rows (its random resized crop goes to 224).
    assert isinstance(bench.strong_transform, StrongAugment)
    assert bench.strong_transform.size == 224
    assert bench.strong_transform(bench.train_x[:1], generator).shape == (1, 3, 224, 224)


# ---------------------------------------------------------------------------------------------
# Annotations


def test_annotations_in_the_test_geometry(tree: Path) -> None:
    notes = cub200.read_cub200_annotations(tree, cache=False)
    n = len(TEST)
    assert notes.image_ids.tolist() == [im["id"] for im in TEST]
    assert notes.boxes.shape == (n, 4)
    assert notes.parts.shape == (n, 15, 2)
    assert notes.part_visible.shape == (n, 15)
    assert notes.part_names == PART_NAMES
    # The planted 16x8 image: scale (224 / 16, 224 / 8) = (14, 28).
    assert notes.image_sizes[0].tolist() == [16, 8]
    assert notes.scale[0].tolist() == [14.0, 28.0]
    assert notes.boxes[0].tolist() == [56.0, 56.0, 112.0, 112.0]  # (4, 2, 8, 4) scaled
    assert notes.parts[0, 0].tolist() == [112.0, 112.0]  # the back at (8, 4)
    assert bool(notes.part_visible[0, 0])
    assert not notes.part_visible[0, 1]
    assert torch.isnan(notes.parts[0, 1]).all()  # the hidden beak
    for row, image in enumerate(TEST):
        sx, sy = 224 / image["size"][0], 224 / image["size"][1]
        x, y, w, h = box_of(image["id"])
        torch.testing.assert_close(notes.boxes[row], torch.tensor([x * sx, y * sy, w * sx, h * sy]))
        for p in range(1, 16):
            px, py, visible = part_of(image["id"], p, image["size"])
            assert bool(notes.part_visible[row, p - 1]) == bool(visible)
            if visible:
                torch.testing.assert_close(notes.parts[row, p - 1], torch.tensor([px * sx, py * sy]))
    boxes = notes.box_masks()
    expected = torch.zeros(224, 224, dtype=torch.bool)
    expected[56:168, 56:168] = True  # pixel centres 56.5 .. 167.5 lie in [56, 168]
    assert torch.equal(boxes[0], expected)
    backs = notes.part_masks(["back"])
    assert torch.nonzero(backs[0]).tolist() == [[112, 112]]
    assert int(notes.part_masks().flatten(1).sum(1)[0]) == int(notes.part_visible[0].sum())
    with pytest.raises(ValueError, match="unknown part"):
        notes.part_masks(["wing"])


# ---------------------------------------------------------------------------------------------
# The cache


def test_prepare_then_load_gives_the_same_benchmark(copy: Path, bench) -> None:
    seen = []

    def progress(items):
        seen.append(len(items))
        return items

    report = cub200.prepare_cub200(copy, progress=progress)
    assert seen == [len(PLAN)]
    assert report.path == copy / "cub200" / "cub200.h5" == cub200.cub200_cache_path(copy)
    assert report.path.is_file()
    assert not list(report.path.parent.glob("*.partial"))
    assert (report.n_train, report.n_test, report.masks) == (len(TRAIN), len(TEST), True)
    n_gray = sum(im["gray"] for im in PLAN)
    assert report.image_modes == {"RGB": len(PLAN) - n_gray, "L": n_gray}
    n_la = sum(im["la"] for im in TEST)
    assert report.mask_modes == {"L": len(TEST) - n_la, "LA": n_la}

    shutil.rmtree(copy / "CUB_200_2011" / "images")  # the cache needs only the listing
    shutil.rmtree(copy / "segmentations")
    cached = load_benchmark("seq-cub200", copy)
    for name in ("train_x", "train_y", "test_x", "test_y", "test_masks"):
        assert torch.equal(getattr(cached, name), getattr(bench, name)), name
    assert cached.class_names == bench.class_names
    mammoth = load_benchmark("seq-cub200", copy, mask_threshold=1)
    assert int(mammoth.test_masks[0].sum()) == 112 * 70 + 56 * 42
    notes = cub200.read_cub200_annotations(copy)  # sizes from the cache: no image is opened
    assert notes.image_sizes[0].tolist() == [16, 8]


def test_stale_cache_is_detected(copy: Path) -> None:
    cub200.prepare_cub200(copy, masks=False)
    split = copy / "CUB_200_2011" / "train_test_split.txt"
    split.write_text(split.read_text().replace(f"\n{PLAN[0]['id']} 1\n", f"\n{PLAN[0]['id']} 0\n"))
    with pytest.raises(BenchmarkFormatError) as exc:
        load_benchmark("seq-cub200", copy, masks=False)
    message = _one_line(exc)
    assert "cub200.h5" in message
    assert "stale" in message
    assert "prepare" in message
    with pytest.raises(BenchmarkFormatError, match="stale"):
        cub200.read_cub200_annotations(copy)
    fresh = load_benchmark("seq-cub200", copy, masks=False, cache=False)  # the tree itself still loads
    assert len(fresh.test_y) == len(TEST) + 1


def test_cache_without_masks(copy: Path) -> None:
    report = cub200.prepare_cub200(copy, masks=False)
    assert not report.masks
    assert report.mask_modes == {}
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cub200", copy)
    assert "without segmentation masks" in _one_line(exc)
    assert "masks=False" in _one_line(exc)
    assert load_benchmark("seq-cub200", copy, masks=False).test_masks is None


def test_corrupt_cache(copy: Path) -> None:
    path = cub200.cub200_cache_path(copy)
    path.parent.mkdir()
    path.write_bytes(b"not an HDF5 file")
    with pytest.raises(BenchmarkFormatError) as exc:
        load_benchmark("seq-cub200", copy)
    assert str(path) in _one_line(exc)
    assert "HDF5" in _one_line(exc)


def test_failed_prepare_leaves_no_file(copy: Path) -> None:
    bad = copy / "CUB_200_2011" / "images" / TEST[-1]["name"]
    bad.write_bytes(b"\xff\xd8 not a jpeg")
    with pytest.raises(BenchmarkFormatError, match="unreadable image"):
        cub200.prepare_cub200(copy)
    assert list((copy / "cub200").iterdir()) == []


# ---------------------------------------------------------------------------------------------
# The training transform


def _pixels(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(9))


def test_crop_flip_rotate_draws_per_sample_parameters() -> None:
    transform = cub200.CropFlipRotate(224, 10.0)
    top, left, flipped, angle = transform.sample(20000, 256, 256, torch.Generator().manual_seed(0))
    for offset in (top, left):
        assert offset.dtype == torch.int64
        assert set(offset.tolist()) == set(range(33))  # uniform over 0..32, like RandomCrop
        assert abs(offset.float().mean().item() - 16) < 0.3
    assert abs(flipped.float().mean().item() - 0.5) < 0.02
    assert angle.min().item() >= -10
    assert angle.max().item() <= 10
    assert abs(angle.mean().item()) < 0.2
    assert abs(angle.std().item() - 20 / math.sqrt(12)) < 0.1  # uniform on [-10, 10]
    x = _pixels((1, 3, 256, 256)).expand(16, -1, -1, -1)
    out = transform(x, torch.Generator().manual_seed(1))
    assert out.shape == (16, 3, 224, 224)
    assert out.dtype == torch.float32
    assert out.min().item() >= 0
    assert out.max().item() <= 1
    flat = out.flatten(1)
    assert (torch.cdist(flat, flat) + torch.eye(16) * 1e9).min() > 1e-3  # no two samples alike


def test_crop_and_flip_without_rotation_are_exact() -> None:
    transform = cub200.CropFlipRotate(224, 10.0)
    x = _pixels((2, 3, 256, 256))
    top, left = torch.tensor([0, 32]), torch.tensor([7, 32])
    zero = torch.zeros(2)
    crops = torch.stack([x[0, :, 0:224, 7:231], x[1, :, 32:256, 32:256]]) / 255
    plain = transform.apply(x, top, left, torch.tensor([False, False]), zero)
    torch.testing.assert_close(plain, crops, atol=1e-4, rtol=0)  # float32 grid rounding
    flipped = transform.apply(x, top, left, torch.tensor([True, True]), zero)
    torch.testing.assert_close(flipped, crops.flip(-1), atol=1e-4, rtol=0)


def _centroid(image: torch.Tensor) -> tuple[float, float]:
    """Intensity centroid (x, y) in continuous coordinates (pixel centres at +0.5)."""
    weights = image / image.sum()
    coords = torch.arange(image.shape[-1], dtype=torch.float64) + 0.5
    return float((weights.sum(0) * coords).sum()), float((weights.sum(1) * coords).sum())


@pytest.mark.parametrize("flip", [False, True])
def test_rotation_turns_counter_clockwise_about_the_crop_centre(flip: bool) -> None:
    # A Gaussian blob 40 px right of the centre of the crop at (top 10, left 20).
    top, left = 10, 20
    ys, xs = torch.meshgrid(torch.arange(256.0) + 0.5, torch.arange(256.0) + 0.5, indexing="ij")
    centre_x, centre_y = left + 112 + 40, top + 112
    blob = torch.exp(-((xs - centre_x) ** 2 + (ys - centre_y) ** 2) / (2 * 2.0**2))
    x = blob.expand(1, 3, 256, 256).contiguous()
    out = cub200.CropFlipRotate(224, 10.0).apply(
        x, torch.tensor([top]), torch.tensor([left]), torch.tensor([flip]), torch.tensor([10.0])
    )
    theta = math.radians(10)
    dx = -40 if flip else 40  # the flip comes first, then the rotation
    # Counter-clockwise on screen (y down): (dx, 0) -> (dx cos, -dx sin).
    expected = (112 + dx * math.cos(theta), 112 - dx * math.sin(theta))
    got = _centroid(out[0, 0].double())
    assert got == pytest.approx(expected, abs=0.05)


@pytest.mark.parametrize(("angle", "flip"), [(10.0, False), (-7.3, True), (3.1, False)])
def test_matches_pillow_on_each_image(angle: float, flip: bool) -> None:
    """The oracle is the paper's per-image pipeline on a PIL image: crop, flip, then
    ``Image.rotate(angle, BILINEAR)`` (what torchvision's RandomRotation calls), zero fill."""
    image = np.random.default_rng(1).random((256, 256), dtype=np.float32)
    top, left = 10, 25
    picture = Image.fromarray(image[top : top + 224, left : left + 224], mode="F")
    if flip:
        picture = picture.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    expected = np.asarray(picture.rotate(angle, resample=Image.Resampling.BILINEAR))
    out = cub200.CropFlipRotate(224, 10.0).apply(
        torch.from_numpy(image)[None, None],
        torch.tensor([top]),
        torch.tensor([left]),
        torch.tensor([flip]),
        torch.tensor([angle]),
    )
    torch.testing.assert_close(out[0, 0], torch.from_numpy(expected.copy()), atol=1e-4, rtol=0)
    assert (expected == 0).sum() > 1000  # the rotated corners are compared too


def test_rotated_corners_come_from_outside_the_crop_and_are_zero() -> None:
    transform = cub200.CropFlipRotate(224, 10.0)
    white = torch.full((1, 3, 256, 256), 255, dtype=torch.uint8)
    args = (torch.tensor([16]), torch.tensor([16]), torch.tensor([False]))
    rotated = transform.apply(white, *args, torch.tensor([10.0]))
    # The input is white around the crop too: black corners mean the crop alone is rotated.
    assert rotated[0, :, 0, 0].tolist() == [0.0, 0.0, 0.0]
    assert rotated[0, :, 223, 223].tolist() == [0.0, 0.0, 0.0]
    torch.testing.assert_close(rotated[0, :, 112, 112], torch.ones(3))
    torch.testing.assert_close(rotated[0, :, 112, 0], torch.ones(3))  # an edge midpoint stays on the crop
    straight = transform.apply(white, *args, torch.tensor([0.0]))
    torch.testing.assert_close(straight, torch.ones(1, 3, 224, 224))


def test_reproducible_from_the_generator_and_global_rng_untouched() -> None:
    transform = cub200.CropFlipRotate(24, 10.0)
    x = _pixels((5, 3, 32, 32))
    state = torch.get_rng_state()
    a = transform(x, torch.Generator().manual_seed(3))
    b = transform(x, torch.Generator().manual_seed(3))
    c = transform(x, torch.Generator().manual_seed(4))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.equal(state, torch.get_rng_state())
    with pytest.raises(ValueError, match="larger"):
        transform(x[:, :, :20], torch.Generator())


def test_resize_passes_test_images_and_resizes_others() -> None:
    resize = cub200.Resize(224)
    x = _pixels((2, 3, 224, 224))
    assert resize(x) is x
    flat = torch.full((2, 3, 256, 256), 51, dtype=torch.uint8)
    out = resize(flat)
    assert out.shape == (2, 3, 224, 224)
    torch.testing.assert_close(out, torch.full((2, 3, 224, 224), 0.2))


# ---------------------------------------------------------------------------------------------
# Malformed inputs: each raises the right exception with one line naming the file (and line)


def _edit(path: Path, edit: Callable[[list[str]], list[str]]) -> None:
    path.write_text("".join(f"{line}\n" for line in edit(path.read_text().splitlines())))


def _set_line(number: int, text: str) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        lines[number - 1] = text
        return lines

    return edit


FIRST_TEST_MASK = Path(TEST[0]["name"]).with_suffix(".png")

LISTING_CASES = [
    # (file under CUB_200_2011, edit, exception, words of the message)
    ("images.txt", None, DataNotFoundError, ["images.txt", "missing"]),
    ("classes.txt", None, DataNotFoundError, ["classes.txt", "missing"]),
    ("image_class_labels.txt", None, DataNotFoundError, ["image_class_labels.txt", "missing"]),
    ("train_test_split.txt", None, DataNotFoundError, ["train_test_split.txt", "missing"]),
    ("images.txt", _set_line(3, "3 a b.jpg"), BenchmarkFormatError, ["images.txt: line 3", "3 columns"]),
    ("images.txt", _set_line(1, "x1 a/b.jpg"), BenchmarkFormatError, ["line 1", "'x1' is not an integer"]),
    ("images.txt", _set_line(4, f"3 {PLAN[3]['name']}"), BenchmarkFormatError, ["line 4", "listed again"]),
    ("images.txt", _set_line(2, "2 flat.jpg"), BenchmarkFormatError, ["line 2", "<class_dir>/<file>"]),
    ("classes.txt", lambda lines: lines[:-1], BenchmarkFormatError, ["classes.txt", "199 classes"]),
    ("classes.txt", _set_line(5, "6 x"), BenchmarkFormatError, ["classes.txt: line 5", "expected 5"]),
    ("image_class_labels.txt", _set_line(7, "7 201"), BenchmarkFormatError, ["line 7", "out of range"]),
    ("image_class_labels.txt", lambda lines: lines[:-1], BenchmarkFormatError, ["has no line"]),
    ("image_class_labels.txt", _set_line(2, "9999 1"), BenchmarkFormatError, ["line 2", "not in images.txt"]),
    ("image_class_labels.txt", _set_line(1, "1 2"), BenchmarkFormatError, ["line 1", "lies in folder"]),
    ("train_test_split.txt", _set_line(1, f"{PLAN[-1]['id']} 2"), BenchmarkFormatError, ["line 1", "range"]),
    ("train_test_split.txt", _set_line(1, "1"), BenchmarkFormatError, ["line 1", "1 columns"]),
]


@pytest.mark.parametrize(("name", "edit", "error", "words"), LISTING_CASES)
def test_malformed_listing(listing_copy: Path, name, edit, error, words) -> None:
    path = listing_copy / "CUB_200_2011" / name
    if edit is None:
        path.unlink()
    else:
        _edit(path, edit)
    with pytest.raises(error) as exc:
        load_benchmark("seq-cub200", listing_copy, cache=False)
    message = _one_line(exc)
    assert str(path) in message
    for word in words:
        assert word in message


def test_listing_that_is_not_utf8(listing_copy: Path) -> None:
    path = listing_copy / "CUB_200_2011" / "classes.txt"
    path.write_bytes(b"1 \xff\xfe\n")
    with pytest.raises(BenchmarkFormatError) as exc:
        load_benchmark("seq-cub200", listing_copy, cache=False)
    assert str(path) in _one_line(exc)
    assert "UTF-8" in _one_line(exc)


def test_no_root_and_no_folder(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cub200", None)
    assert "run.data_root ROOT" in _one_line(exc)
    with pytest.raises(DataNotFoundError) as exc:
        load_benchmark("seq-cub200", tmp_path)
    assert str(tmp_path / "CUB_200_2011") in _one_line(exc)


def _garbage(path: Path) -> None:
    path.write_bytes(b"definitely not an image")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:40])


FILE_CASES = [
    # (path under the root, how to break it, exception, words of the message)
    (
        Path("CUB_200_2011/images") / PLAN[0]["name"],
        Path.unlink,
        DataNotFoundError,
        ["image missing", "line 1"],
    ),
    (Path("CUB_200_2011/images") / PLAN[0]["name"], _garbage, BenchmarkFormatError, ["unreadable image"]),
    (Path("CUB_200_2011/images") / PLAN[0]["name"], _truncate, BenchmarkFormatError, ["unreadable image"]),
    (
        Path("segmentations") / FIRST_TEST_MASK,
        Path.unlink,
        DataNotFoundError,
        ["mask missing", "masks=False"],
    ),
    (Path("segmentations") / FIRST_TEST_MASK, _garbage, BenchmarkFormatError, ["unreadable mask"]),
    (
        Path("segmentations") / FIRST_TEST_MASK,
        lambda path: Image.new("L", (5, 5)).save(path),
        BenchmarkFormatError,
        ["mask is 5x5", "image is 16x8"],
    ),
]


@pytest.mark.parametrize(("relative", "breaks", "error", "words"), FILE_CASES)
def test_missing_or_unreadable_image_or_mask(copy: Path, relative, breaks, error, words) -> None:
    path = copy / relative
    breaks(path)
    with pytest.raises(error) as exc:
        load_benchmark("seq-cub200", copy, cache=False)
    message = _one_line(exc)
    assert str(path) in message
    for word in words:
        assert word in message


ANNOTATION_CASES = [
    ("bounding_boxes.txt", None, DataNotFoundError, ["missing"]),
    ("bounding_boxes.txt", _set_line(3, "3 1.0 abc 2.0 2.0"), BenchmarkFormatError, ["line 3", "y 'abc'"]),
    ("bounding_boxes.txt", _set_line(3, "3 1.0 1.0 -2.0 2.0"), BenchmarkFormatError, ["line 3", "negative"]),
    ("bounding_boxes.txt", lambda lines: lines[1:], BenchmarkFormatError, ["image id 1", "has no line"]),
    ("parts/parts.txt", None, DataNotFoundError, ["missing"]),
    ("parts/parts.txt", _set_line(2, "3 beak"), BenchmarkFormatError, ["line 2", "expected 2"]),
    ("parts/part_locs.txt", _set_line(5, "1 5 0.0 0.0 2"), BenchmarkFormatError, ["line 5", "visible 2"]),
    ("parts/part_locs.txt", _set_line(5, "1 16 0.0 0.0 0"), BenchmarkFormatError, ["line 5", "part id 16"]),
    ("parts/part_locs.txt", _set_line(5, "1 4 0.0 0.0 0"), BenchmarkFormatError, ["line 5", "listed again"]),
    ("parts/part_locs.txt", lambda lines: lines[:-1], BenchmarkFormatError, ["no line for image"]),
    ("parts/part_locs.txt", _set_line(5, "1 5 0.0 0.0"), BenchmarkFormatError, ["line 5", "4 columns"]),
]


@pytest.mark.parametrize(("name", "edit", "error", "words"), ANNOTATION_CASES)
def test_malformed_annotations(listing_copy: Path, name, edit, error, words) -> None:
    path = listing_copy / "CUB_200_2011" / name
    if edit is None:
        path.unlink()
    else:
        _edit(path, edit)
    with pytest.raises(error) as exc:
        cub200.read_cub200_annotations(listing_copy, cache=False)
    message = _one_line(exc)
    assert str(path) in message
    for word in words:
        assert word in message
