"""The importers behind ``xder-run data prepare KIND`` and the downloads of ``xder-run data download``.

An importer turns a dataset as it is distributed (raw files, another project's arrays, an
image-folder copy) into the files its benchmark reads under the data root. Importers are
registered by kind (:func:`register_importer`), as benchmarks are by name, and run through
:func:`prepare_data`, which checks what the kind needs and returns an :class:`ImportResult`
whose text is the command's report. The built-in kinds, in the order :func:`list_importers`
gives them: ``cifar10``, ``cifar100`` (image-folder copies, also downloadable), ``mnist`` (the
official IDX files, also downloadable), ``tinyimagenet`` (the official ``tiny-imagenet-200``
folder or zip, decoded once; also downloadable), ``ntu60`` (raw
``.skeleton`` files), ``ntu60-stgcn``, ``ntu60-efficientgcn`` (those projects' arrays),
``miniimagenet`` (any of its three distributions, detected), ``cub200`` (decoded once into a
cache) and ``coco-stitch`` (the secondary-targets set).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from xder_data import cifar10, cifar100, coco_stitch, cub200, miniimagenet, mnist, ntu60, tinyimagenet
from xder_data.benchmark import Progress, no_progress
from xder_data.errors import (
    BenchmarkFormatError,
    DataNotFoundError,
    ImportOptionError,
    UnknownImporterError,
    prepare_call,
)

__all__ = [
    "MINIIMAGENET_FORMATS",
    "ImportOptions",
    "ImportResult",
    "detect_miniimagenet_format",
    "download_data",
    "list_downloads",
    "list_importers",
    "prepare_data",
    "register_importer",
]

MiniImageNetFormat = Literal["csv", "pickle", "folders"]
MINIIMAGENET_FORMATS: tuple[MiniImageNetFormat, ...] = ("csv", "pickle", "folders")
"""The miniImageNet distributions: the CSV + images one, the ``mini-imagenet-cache-*.pkl`` one,
and image folders already split (``train/``, ``val/``)."""
MALFORMED_SHOWN = 10
"""Malformed NTU files an :class:`ImportResult` lists one by one (the rest are counted)."""


def _no_progress_bar(label: str) -> Progress:
    return no_progress


@dataclass(frozen=True, kw_only=True)
class ImportOptions:
    """What the importers take beside the source and the data root. Each kind reads the fields it
    needs and ignores the others; the flags of ``xder-run data prepare`` are given in brackets.

    Attributes:
        num_frames: ntu60, ntu60-stgcn, ntu60-efficientgcn: frames per sample (``--frames``).
        missing_list: the ntu60 kinds: the official ``NTU_RGBD_samples_with_missing_skeletons.txt``,
            whose samples are left out (``--missing``).
        miniimagenet_format: miniimagenet: the source's distribution, one of
            :data:`MINIIMAGENET_FORMATS`; None: detected (:func:`detect_miniimagenet_format`)
            (``--format``).
        test_per_class: miniimagenet csv and pickle: test images drawn per class; None: 100. The
            folders layout keeps its own split and takes none (``--test-per-class``).
        seed: miniimagenet csv and pickle: the seed of the train/test split; coco-stitch: the seed
            of the stitching (``--seed``).
        progress: ``progress(label)`` is the :data:`~xder_data.Progress` wrapper of an import that
            walks through ``label`` (``"images"``, ``"classes"``, ``"examples"``, or the kind for
            the ntu60 kinds), e.g. a tqdm bar with that description; by default nothing is shown.
    """

    num_frames: int = 80
    missing_list: str | Path | None = None
    miniimagenet_format: MiniImageNetFormat | None = None
    test_per_class: int | None = None
    seed: int = 0
    progress: Callable[[str], Progress] = _no_progress_bar


@dataclass(frozen=True)
class ImportResult:
    """What an import wrote, as ``xder-run data prepare`` reports it: ``str(result)`` is the
    summary line, then each of ``details`` on its own line, indented by two spaces.

    Attributes:
        kind: the importer's kind, e.g. ``"cifar10"``.
        summary: one line: the counts written and where, e.g. ``"cifar10: 50000 train / 10000
            test images -> data/cifar-10-batches-py"``.
        details: further lines, e.g. ntu60's ``malformed: <file>: <problem>`` (the first
            :data:`MALFORMED_SHOWN`, then ``... and N more malformed files``).
        report: the importer's own report (e.g. :class:`~xder_data.NTUConversionReport`,
            :class:`~xder_data.MiniImageNetImport`), for a caller that needs more than the text.
    """

    kind: str
    summary: str
    details: tuple[str, ...] = ()
    report: object = None

    def __str__(self) -> str:
        return "\n".join([self.summary, *(f"  {line}" for line in self.details)])


Importer = Callable[[Path | None, Path, ImportOptions], ImportResult]
"""``importer(source, data_root, options)``: convert ``source`` into the files of ``data_root``."""
Download = Callable[[Path], Path]
"""``download(data_root) -> folder``: fetch, check and unpack an official archive."""


@dataclass(frozen=True)
class _Entry:
    importer: Importer
    needs_source: bool
    download: Download | None


_REGISTRY: dict[str, _Entry] = {}


def register_importer(
    kind: str, *, needs_source: bool = True, download: Download | None = None
) -> Callable[[Importer], Importer]:
    """Register ``importer(source: Path | None, data_root: Path, options: ImportOptions) ->
    ImportResult`` as ``xder-run data prepare KIND`` (a decorator, as
    :func:`~xder_data.register_benchmark` is).

    Args:
        kind: the name the command takes, e.g. ``"cifar10"``.
        needs_source: whether the importer converts files given as ``source``, which
            :func:`prepare_data` then requires; False for one that reads only the data root
            (``cub200``): it is passed the source if one is given, None otherwise.
        download: ``download(data_root) -> folder``, fetching, checking and unpacking the official
            archive where its licence allows it: ``xder-run data download KIND``
            (:func:`download_data`).

    Raises:
        ValueError: ``kind`` is already registered (by this package or a plugin).
    """

    def decorator(importer: Importer) -> Importer:
        if kind in _REGISTRY:
            raise ValueError(f"importer {kind!r} is already registered")
        _REGISTRY[kind] = _Entry(importer, needs_source, download)
        return importer

    return decorator


def list_importers() -> list[str]:
    """Registered importer kinds in the order of registration: the built-ins (``cifar10``,
    ``cifar100``, ``mnist``, ``tinyimagenet``, ``ntu60``, ``ntu60-stgcn``, ``ntu60-efficientgcn``,
    ``miniimagenet``, ``cub200``, ``coco-stitch``), then the plugins'."""
    return list(_REGISTRY)


def list_downloads() -> list[str]:
    """The kinds that can be downloaded (:func:`download_data`), in the order of registration."""
    return [kind for kind, entry in _REGISTRY.items() if entry.download is not None]


def prepare_data(
    kind: str,
    data_root: str | Path,
    *,
    source: str | Path | None = None,
    options: ImportOptions | None = None,
) -> ImportResult:
    """Run the importer of ``kind``: convert ``source`` into the files its benchmark reads under
    ``data_root``.

    Args:
        kind: one of :func:`list_importers`.
        data_root: the data root written to (read too, by ``cub200`` and ``coco-stitch``).
        source: the files to convert (a folder, or an archive where the importer takes one);
            required unless the kind reads only the data root.
        options: what the kind takes beside (:class:`ImportOptions`; its defaults when None).

    Returns:
        What was written, with the text ``xder-run data prepare`` prints (:class:`ImportResult`).

    Raises:
        UnknownImporterError: no importer of that kind.
        ImportOptionError: no ``source`` where the kind needs one, or options that do not fit it.
        DataError: the importer's own errors (missing files, a malformed source...).
    """
    if kind not in _REGISTRY:
        raise UnknownImporterError(f"unknown kind {kind!r}: choose one of {', '.join(list_importers())}")
    entry = _REGISTRY[kind]
    if source is None and entry.needs_source:
        raise ImportOptionError(
            f"{kind} needs a source, the folder holding the files to convert: "
            f"`{prepare_call(kind, data_root, source='DIR')}`"
        )
    given = None if source is None else Path(source)
    return entry.importer(given, Path(data_root), options or ImportOptions())


def download_data(dataset: str, data_root: str | Path) -> Path:
    """Download ``dataset`` (one of :func:`list_downloads`) into ``data_root``.

    Returns:
        The folder its benchmark reads, e.g. ``<data_root>/cifar-10-batches-py``.

    Raises:
        UnknownImporterError: no download of that name.
        DataNotFoundError: the download failed.
    """
    entry = _REGISTRY.get(dataset)
    if entry is None or entry.download is None:
        raise UnknownImporterError(
            f"no download for {dataset!r}: choose one of {', '.join(list_downloads())}"
        )
    return entry.download(Path(data_root))


def detect_miniimagenet_format(source: str | Path) -> MiniImageNetFormat:
    """Which miniImageNet distribution ``source`` holds: ``"csv"`` (``train.csv``, beside
    ``images/``), ``"pickle"`` (``mini-imagenet-cache-*.pkl``) or ``"folders"`` (``train/`` and
    ``val/`` subfolders; or a file, since only the image folders come as a tar archive).

    Raises:
        DataNotFoundError: ``source`` does not exist.
        BenchmarkFormatError: a folder holding none of the three.
    """
    source = Path(source)
    if source.is_file():
        return "folders"
    if not source.exists():
        raise DataNotFoundError(
            f"{source}: no such folder or archive: point prepare_data.source at one of the miniImageNet "
            "distributions (or a tar archive of the image folders)"
        )
    if (source / "train.csv").is_file():
        return "csv"
    if any(source.glob("mini-imagenet-cache-*.pkl")):
        return "pickle"
    if (source / "train").is_dir() and (source / "val").is_dir():
        return "folders"
    raise BenchmarkFormatError(
        f"{source} holds neither train.csv (+ images/), mini-imagenet-cache-*.pkl nor train/ and val/ "
        "image folders: point prepare_data.source at one of the miniImageNet distributions (or a tar "
        "archive of the image folders), or pass ImportOptions.miniimagenet_format"
    )


# ---------------------------------------------------------------------------------------------
# The built-in importers, registered in the order the command lists them. The converters are
# called through their modules, so that a test can replace one (monkeypatch) and see it called.


def _given(source: Path | None) -> Path:
    if source is None:  # prepare_data checks first; this guards a direct call
        raise ImportOptionError("this importer needs a source")
    return source


def _check_at_least(name: str, value: int, low: int) -> None:
    """The converters raise a plain ValueError on these (a programming error there); here they
    are the user's options (``ImportOptions.<name>``), reported in one line."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ImportOptionError(f"ImportOptions.{name} must be an integer of at least {low}, got {value!r}")


def _cifar_result(kind: str, done: cifar10.CIFAR10Import | cifar100.CIFAR100Import) -> ImportResult:
    converted = f" ({done.converted} converted to RGB)" if done.converted else ""
    summary = f"{kind}: {done.n_train} train / {done.n_test} test images{converted} -> {done.folder}"
    return ImportResult(kind, summary, report=done)


@register_importer("cifar10", download=lambda root: cifar10.download_cifar10(root))
def _import_cifar10(source: Path | None, data_root: Path, options: ImportOptions) -> ImportResult:
    done = cifar10.prepare_cifar10(_given(source), data_root, progress=options.progress("images"))
    return _cifar_result("cifar10", done)


@register_importer("cifar100", download=lambda root: cifar100.download_cifar100(root))
def _import_cifar100(source: Path | None, data_root: Path, options: ImportOptions) -> ImportResult:
    done = cifar100.prepare_cifar100(_given(source), data_root, progress=options.progress("images"))
    return _cifar_result("cifar100", done)


def _mnist_download(root: Path) -> Path:
    return mnist.download_mnist(root).folder


@register_importer("mnist", download=_mnist_download)
def _import_mnist(source: Path | None, data_root: Path, options: ImportOptions) -> ImportResult:
    done = mnist.prepare_mnist(_given(source), data_root)
    return ImportResult(
        "mnist", f"mnist: {done.n_train} train / {done.n_test} test images -> {done.folder}", report=done
    )


def _tinyimagenet_download(root: Path) -> Path:
    return tinyimagenet.download_tinyimagenet(root).path


@register_importer("tinyimagenet", download=_tinyimagenet_download)
def _import_tinyimagenet(source: Path | None, data_root: Path, options: ImportOptions) -> ImportResult:
    done = tinyimagenet.prepare_tinyimagenet(_given(source), data_root, progress=options.progress("images"))
    converted = f" ({done.converted} converted to RGB)" if done.converted else ""
    summary = f"tinyimagenet: {done.n_train} train / {done.n_test} test images{converted} -> {done.path}"
    return ImportResult("tinyimagenet", summary, report=done)


def _ntu_result(kind: str, report: ntu60.NTUConversionReport) -> ImportResult:
    skipped = ", ".join(f"{count} {reason}" for reason, count in report.skipped.items() if count)
    summary = f"{kind}: {report.train} train / {report.test} test samples -> {report.path}" + (
        f" (skipped: {skipped})" if skipped else ""
    )
    details = [f"malformed: {line}" for line in report.malformed[:MALFORMED_SHOWN]]
    if len(report.malformed) > MALFORMED_SHOWN:
        details.append(f"... and {len(report.malformed) - MALFORMED_SHOWN} more malformed files")
    return ImportResult(kind, summary, tuple(details), report)


@register_importer("ntu60")
def _import_ntu60(source: Path | None, data_root: Path, options: ImportOptions) -> ImportResult:
    _check_at_least("num_frames", options.num_frames, 1)
    report = ntu60.prepare_ntu60(
        _given(source),
        data_root,
        num_frames=options.num_frames,
        missing_list=options.missing_list,
        on_error="skip",  # one bad file of 56,880 should not stop the conversion: it is listed
        progress=options.progress("ntu60"),
    )
    return _ntu_result("ntu60", report)


def _register_ntu_arrays(kind: str, converter: str) -> None:
    """Register ``kind``: another project's preprocessed NTU-60 arrays (ST-GCN's, EfficientGCN's),
    converted by ``xder_data.ntu60.<converter>`` (looked up when it runs)."""

    @register_importer(kind)
    def _import(source: Path | None, data_root: Path, options: ImportOptions) -> ImportResult:
        _check_at_least("num_frames", options.num_frames, 1)
        report = getattr(ntu60, converter)(
            _given(source),
            data_root,
            num_frames=options.num_frames,
            missing_list=options.missing_list,
            progress=options.progress(kind),
        )
        return _ntu_result(kind, report)


_register_ntu_arrays("ntu60-stgcn", "import_ntu60_stgcn")
_register_ntu_arrays("ntu60-efficientgcn", "import_ntu60_efficientgcn")


@register_importer("miniimagenet")
def _import_miniimagenet(source: Path | None, data_root: Path, options: ImportOptions) -> ImportResult:
    source = _given(source)
    form = options.miniimagenet_format or detect_miniimagenet_format(source)
    if form not in MINIIMAGENET_FORMATS:
        raise ImportOptionError(
            f"ImportOptions.miniimagenet_format {form!r}: choose one of {', '.join(MINIIMAGENET_FORMATS)}"
        )
    progress = options.progress("classes")
    if form == "folders":
        if options.test_per_class is not None:
            raise ImportOptionError(
                "ImportOptions.test_per_class re-splits the csv and pickle distributions; the folders layout "
                "keeps its own split (train/ -> train, val/ -> test): leave it out"
            )
        done = miniimagenet.import_miniimagenet_folders(source, data_root, progress=progress)
    else:
        test_per_class = 100 if options.test_per_class is None else options.test_per_class
        _check_at_least("test_per_class", test_per_class, 1)
        _check_at_least("seed", options.seed, 0)
        importer = (
            miniimagenet.import_miniimagenet_csv if form == "csv" else miniimagenet.import_miniimagenet_pickle
        )
        done = importer(
            source, data_root, test_per_class=test_per_class, seed=options.seed, progress=progress
        )
    notes = [f"{done.resized} resized to 84x84"] if done.resized else []
    notes += [f"{done.converted} converted to RGB"] if done.converted else []
    summary = (
        f"miniimagenet ({form}): {done.n_classes} classes, {done.n_train} train / {done.n_test} test "
        f"images -> {done.folder}" + (f" ({', '.join(notes)})" if notes else "")
    )
    return ImportResult("miniimagenet", summary, report=done)


@register_importer("cub200", needs_source=False)
def _import_cub200(source: Path | None, data_root: Path, options: ImportOptions) -> ImportResult:
    done = cub200.prepare_cub200(data_root, progress=options.progress("images"))
    masks = "with" if done.masks else "without"
    summary = f"cub200: {done.n_train} train / {done.n_test} test images cached {masks} masks -> {done.path}"
    return ImportResult("cub200", summary, report=done)


@register_importer("coco-stitch")
def _import_coco_stitch(source: Path | None, data_root: Path, options: ImportOptions) -> ImportResult:
    _check_at_least("seed", options.seed, 0)
    done = coco_stitch.prepare_coco_stitch(
        _given(source), data_root, seed=options.seed, progress=options.progress("examples")
    )
    summary = (
        f"coco-stitch: {done.n_train} train / {done.n_test} test stitched {done.size}x{done.size} "
        f"images -> {done.paths['train'].parent}"
    )
    return ImportResult("coco-stitch", summary, report=done)
