"""xder-data: class-incremental benchmarks as device-resident tensors, and batched augmentation.

Benchmarks are registered by name and built with :func:`load_benchmark`: ``seq-digits``
(offline), ``seq-cifar10``, ``seq-cifar100``, ``seq-miniimg``, ``seq-ntu60``, ``seq-cub200``,
``seq-mnist``, ``seq-tinyimg``, ``coco-stitch`` (the secondary-targets probe set) and ``folder``
(the user's own images or ``.npz``); :func:`benchmark_from_tensors` builds one from tensors in
memory. A benchmark may define protocols beside its paper's (:func:`list_protocols`) and take options
(:func:`benchmark_options`); :func:`benchmark_info` describes a loaded one. The converters from
the datasets' distributed formats are registered by kind beside them (:func:`register_importer`)
and run with :func:`prepare_data` (``xder-run data prepare KIND``); :func:`download_data` fetches
the archives that may be downloaded. Augmentations in
:mod:`xder_data.augment` and :mod:`xder_data.skeleton` act on whole batches with per-sample random
parameters.
"""

from xder_data import digits as _digits  # noqa: F401  (registers seq-digits)
from xder_data.augment import Compose, CropFlip, Normalize, StrongAugment, Transform
from xder_data.benchmark import (
    DEFAULT_PROTOCOL,
    PROTOCOL_ALIASES,
    Benchmark,
    BenchmarkDefaults,
    Progress,
    Scenario,
    TaskSplit,
    benchmark_defaults,
    benchmark_info,
    benchmark_option_types,
    benchmark_options,
    benchmark_scenario,
    canonical_protocol,
    check_scenario,
    list_benchmarks,
    list_protocols,
    load_benchmark,
    register_benchmark,
    remap_labels,
    resolve_class_order,
    task_indices,
    validation_split,
    with_class_order,
    with_scenario,
    with_validation,
)
from xder_data.cifar10 import (  # registers seq-cifar10
    CIFAR10Import,
    download_cifar10,
    prepare_cifar10,
    verify_cifar10,
)
from xder_data.cifar100 import (  # registers seq-cifar100
    CIFAR100Import,
    cifar100_coarse_names,
    cifar100_superclasses,
    download_cifar100,
    prepare_cifar100,
    upsample_images,
    verify_cifar100,
)
from xder_data.coco_stitch import (  # registers coco-stitch
    COCOStitchReport,
    decode_mask,
    paste_instance,
    prepare_coco_stitch,
)
from xder_data.cub200 import (  # registers seq-cub200
    CUB200Annotations,
    CUB200PrepareReport,
    prepare_cub200,
    read_cub200_annotations,
)
from xder_data.custom import CUSTOM_DEFAULTS, benchmark_from_tensors, channel_stats, split_classes
from xder_data.errors import (
    BenchmarkFormatError,
    BenchmarkOptionError,
    CacheWriteError,
    ClassOrderError,
    DataError,
    DataNotFoundError,
    ImportOptionError,
    UnknownBenchmarkError,
    UnknownImporterError,
    UnknownProtocolError,
    UnsafePickleError,
)
from xder_data.folder import FolderListing, folder_cache_path, read_folder_listing  # registers folder
from xder_data.importers import (  # registers the importers of `xder-run data prepare`
    MINIIMAGENET_FORMATS,
    ImportOptions,
    ImportResult,
    detect_miniimagenet_format,
    download_data,
    list_downloads,
    list_importers,
    prepare_data,
    register_importer,
)
from xder_data.miniimagenet import (  # registers seq-miniimg
    MiniImageNetImport,
    import_miniimagenet_csv,
    import_miniimagenet_folders,
    import_miniimagenet_pickle,
)
from xder_data.mnist import MNISTImport, download_mnist, prepare_mnist, read_idx  # registers seq-mnist
from xder_data.ntu60 import (  # registers seq-ntu60
    NTUConversionReport,
    import_ntu60_efficientgcn,
    import_ntu60_stgcn,
    prepare_ntu60,
)
from xder_data.skeleton import SkeletonAugment, SkeletonNormalize
from xder_data.tinyimagenet import (  # registers seq-tinyimg
    TinyImageNetImport,
    download_tinyimagenet,
    prepare_tinyimagenet,
)

__all__ = [
    "CUSTOM_DEFAULTS",
    "DEFAULT_PROTOCOL",
    "MINIIMAGENET_FORMATS",
    "PROTOCOL_ALIASES",
    "Benchmark",
    "BenchmarkDefaults",
    "BenchmarkFormatError",
    "BenchmarkOptionError",
    "CIFAR10Import",
    "CIFAR100Import",
    "COCOStitchReport",
    "CUB200Annotations",
    "CUB200PrepareReport",
    "CacheWriteError",
    "ClassOrderError",
    "Compose",
    "CropFlip",
    "DataError",
    "DataNotFoundError",
    "FolderListing",
    "ImportOptionError",
    "ImportOptions",
    "ImportResult",
    "MNISTImport",
    "MiniImageNetImport",
    "NTUConversionReport",
    "Normalize",
    "Progress",
    "Scenario",
    "SkeletonAugment",
    "SkeletonNormalize",
    "StrongAugment",
    "TaskSplit",
    "TinyImageNetImport",
    "Transform",
    "UnknownBenchmarkError",
    "UnknownImporterError",
    "UnknownProtocolError",
    "UnsafePickleError",
    "benchmark_defaults",
    "benchmark_from_tensors",
    "benchmark_info",
    "benchmark_option_types",
    "benchmark_options",
    "benchmark_scenario",
    "canonical_protocol",
    "channel_stats",
    "check_scenario",
    "cifar100_coarse_names",
    "cifar100_superclasses",
    "decode_mask",
    "detect_miniimagenet_format",
    "download_cifar10",
    "download_cifar100",
    "download_data",
    "download_mnist",
    "download_tinyimagenet",
    "folder_cache_path",
    "import_miniimagenet_csv",
    "import_miniimagenet_folders",
    "import_miniimagenet_pickle",
    "import_ntu60_efficientgcn",
    "import_ntu60_stgcn",
    "list_benchmarks",
    "list_downloads",
    "list_importers",
    "list_protocols",
    "load_benchmark",
    "paste_instance",
    "prepare_cifar10",
    "prepare_cifar100",
    "prepare_coco_stitch",
    "prepare_cub200",
    "prepare_data",
    "prepare_mnist",
    "prepare_ntu60",
    "prepare_tinyimagenet",
    "read_cub200_annotations",
    "read_folder_listing",
    "read_idx",
    "register_benchmark",
    "register_importer",
    "remap_labels",
    "resolve_class_order",
    "split_classes",
    "task_indices",
    "upsample_images",
    "validation_split",
    "verify_cifar10",
    "verify_cifar100",
    "with_class_order",
    "with_scenario",
    "with_validation",
]
