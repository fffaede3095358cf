"""``seq-miniimg``: miniImageNet (Vinyals et al., 2016; 100 classes at 84x84) as 20 tasks of 5 classes.

The benchmark reads the layout the X-DER authors used (their mammoth ``seq_miniimg``;
docs/data-formats.md, "miniImageNet")::

    <root>/MINIIMG/train_x.npy   uint8 (N, 84, 84, 3): RGB images, height x width x channel
    <root>/MINIIMG/train_y.npy   integer (N,): labels 0..99
    <root>/MINIIMG/test_x.npy    the same for the test split
    <root>/MINIIMG/test_y.npy
    <root>/MINIIMG/wnids.txt     optional: the 100 WordNet ids in label order (written by the
                                 importers below; becomes ``Benchmark.class_names``)

Images are stored as (N, 3, 84, 84) uint8 tensors, converted from the memory-mapped HWC arrays in
chunks so that only one full copy (1.27 GB for 60,000 images) is ever held in memory.

Protocol (Sec. 5.1, App. "Data Augmentation Techniques", the authors' ``seq_miniimg``): natural
label order, 20 tasks x 5 classes; random 84x84 crop after 4-pixel zero padding and a horizontal
flip, then normalisation by the authors' mean and std; 80 epochs, batch 128, replay minibatch 128,
SGD lr 0.1 divided by 10 at epochs 35, 60 and 75 (the paper's text; the authors' mammoth file sets
a factor of 0.2); buffer 2000; EfficientNet-B2, trained from scratch.

The authors' arrays come from a zip that is not publicly mirrored, so three importers build the
same layout from the common distributions (docs/data-formats.md, "miniImageNet"):

* :func:`import_miniimagenet_csv` (``images/`` + ``train.csv``/``val.csv``/``test.csv``) and
  :func:`import_miniimagenet_pickle` (``mini-imagenet-cache-*.pkl``) pool all 100 classes
  (Ravi & Larochelle's 64 + 16 + 20, 600 images each) and re-split every class into train and
  test with a seed;
* :func:`import_miniimagenet_folders` reads image folders already split per class,
  ``train/<wnid>/*.jpg`` (500 a class) and ``val/<wnid>/*.jpg`` (100 a class, the test set), from
  a folder or a tar archive (``.tar``, ``.tar.gz``...), and keeps that split as given:
  ``val/`` becomes ``test_*.npy``.

The authors' own split is unknown, so results on imported data are comparable among themselves
(and among copies of the same split) but not image-for-image with the authors' split.
"""

from __future__ import annotations

from pathlib import Path

from xder_data._miniimagenet_import import (
    FOLDERS,
    import_miniimagenet_csv,
    import_miniimagenet_folders,
    import_miniimagenet_pickle,
)
from xder_data._miniimg_format import (
    MINIIMG_FILES,
    MINIIMG_FOLDER,
    N_CLASSES,
    SIZE,
    WNIDS_FILE,
    ClassSplit,
    MiniImageNetImport,
    ReadRows,
    import_hint,
    read_split,
    read_wnids,
)
from xder_data.augment import Compose, CropFlip, Normalize, StrongAugment
from xder_data.benchmark import Benchmark, BenchmarkDefaults, register_benchmark
from xder_data.errors import DataNotFoundError

__all__ = [
    "FOLDERS",
    "MINIIMG_FILES",
    "MINIIMG_FOLDER",
    "MINIIMG_MEAN",
    "MINIIMG_STD",
    "SEQ_MINIIMG_DEFAULTS",
    "WNIDS_FILE",
    "ClassSplit",
    "MiniImageNetImport",
    "ReadRows",
    "import_miniimagenet_csv",
    "import_miniimagenet_folders",
    "import_miniimagenet_pickle",
    "seq_miniimg",
]
MINIIMG_MEAN = (0.47313006, 0.44905752, 0.40378186)
MINIIMG_STD = (0.27292014, 0.26559181, 0.27953038)

SEQ_MINIIMG_DEFAULTS = BenchmarkDefaults(
    epochs=80,  # Sec. 5.1: "80 for miniImageNet"
    batch_size=128,  # the authors' seq_miniimg.get_setting(): batch 128, minibatch 128
    minibatch_size=128,
    lr=0.1,  # App. "Hyperparameter Choice": X-DER on Split miniImageNet selects lr 0.1
    momentum=0.0,
    weight_decay=0.0,
    lr_schedule="multistep",
    milestones=(35, 60, 75),  # Sec. 5.1: "divided by 10 (... [35, 60, 75] for miniImageNet)"
    lr_gamma=0.1,
    buffer_size=2000,
    backbone="efficientnet-b2",  # Sec. 5.1 and App. "Backbone Architectures"
    backbone_options={},
    drop_last=False,  # the authors' DataLoader keeps each epoch's last partial batch
)


@register_benchmark("seq-miniimg", defaults=SEQ_MINIIMG_DEFAULTS)
def seq_miniimg(root: Path | None) -> Benchmark:
    """Load ``seq-miniimg`` from ``<root>/MINIIMG/`` in natural class order.

    Returns a benchmark with ``train_x``/``test_x`` (N, 3, 84, 84) uint8 and labels 0..99;
    ``class_names`` are the WordNet ids when ``wnids.txt`` is present.

    Raises:
        DataNotFoundError: ``root`` is None, or the folder or one of its four files is missing.
        BenchmarkFormatError: a file is truncated or not an .npy array, or has a wrong dtype,
            shape or label range, or a class has no images.
    """
    if root is None:
        raise DataNotFoundError(
            "seq-miniimg needs a data root: pass run.data_root ROOT (the folder that holds MINIIMG/)"
        )
    root = Path(root)
    folder = root / MINIIMG_FOLDER
    if not folder.is_dir():
        raise DataNotFoundError(f"{folder}: miniImageNet folder not found: {import_hint(root)}")
    for name in MINIIMG_FILES:  # report a missing file before reading 1 GB of the others
        if not (folder / name).is_file():
            raise DataNotFoundError(f"{folder / name}: miniImageNet file missing: {import_hint(root)}")
    wnids = read_wnids(folder)
    train_x, train_y = read_split(folder, "train")
    test_x, test_y = read_split(folder, "test")
    return Benchmark(
        name="seq-miniimg",
        n_tasks=20,
        classes_per_task=(5,) * 20,
        class_order=tuple(range(N_CLASSES)),
        input_shape=(3, SIZE, SIZE),
        mean=MINIIMG_MEAN,
        std=MINIIMG_STD,
        train_x=train_x,
        train_y=train_y,
        test_x=test_x,
        test_y=test_y,
        defaults=SEQ_MINIIMG_DEFAULTS,
        train_transform=Compose(CropFlip(SIZE, padding=4, flip=True), Normalize(MINIIMG_MEAN, MINIIMG_STD)),
        test_transform=Normalize(MINIIMG_MEAN, MINIIMG_STD),
        strong_transform=StrongAugment(SIZE, MINIIMG_MEAN, MINIIMG_STD),
        class_names=wnids,
    )
