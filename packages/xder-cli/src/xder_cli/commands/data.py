"""``xder-run data``: what a benchmark holds, and the converters and downloads that make its files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from xder_cli.commands.common import (
    Parser,
    add_plugin_argument,
    add_protocol_argument,
    assignment,
    class_order,
)
from xder_cli.errors import UsageError
from xder_cli.progress import progress_bar
from xder_cli.runs.settings import benchmark_settings, split_key
from xder_data import (
    DEFAULT_PROTOCOL,
    Benchmark,
    benchmark_defaults,
    download_cifar10,
    download_cifar100,
    import_miniimagenet_csv,
    import_miniimagenet_folders,
    import_miniimagenet_pickle,
    import_ntu60_efficientgcn,
    import_ntu60_stgcn,
    list_benchmarks,
    list_protocols,
    load_benchmark,
    prepare_cifar10,
    prepare_cifar100,
    prepare_coco_stitch,
    prepare_cub200,
    prepare_ntu60,
)

__all__ = ["PREPARE_KINDS", "benchmark_info", "command_data"]

PREPARE_KINDS = (
    "cifar10",
    "cifar100",
    "ntu60",
    "ntu60-stgcn",
    "ntu60-efficientgcn",
    "miniimagenet",
    "cub200",
    "coco-stitch",
)
DOWNLOADS = ("cifar10", "cifar100")


def benchmark_info(
    bench: Benchmark, protocol: str = DEFAULT_PROTOCOL, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What a loaded benchmark holds, as the JSON of ``xder-run data info --json``; ``protocol``
    names the protocol whose settings ``"protocol"`` shows (``"protocols"`` lists them all) and
    ``options`` the benchmark options it was loaded with (``"options"``)."""
    info: dict[str, Any] = {
        "name": bench.name,
        "n_tasks": bench.n_tasks,
        "classes_per_task": list(bench.classes_per_task),
        "num_classes": bench.num_classes,
        "class_order": list(bench.class_order),
        "train_size": int(bench.train_y.shape[0]),
        "test_size": int(bench.test_y.shape[0]),
        "input_shape": list(bench.input_shape),
        "dtype": str(bench.train_x.dtype).removeprefix("torch."),
        "mean": list(bench.mean),
        "std": list(bench.std),
        "class_names": list(bench.class_names) if bench.class_names is not None else None,
        "options": dict(options or {}),
        "notes": list(bench.notes),
        "tasks": [],
    }
    if bench.val_y is not None:
        info["val_size"] = int(bench.val_y.shape[0])
    for t in range(bench.n_tasks):
        split = bench.task(t)
        task: dict[str, Any] = {
            "task": t,
            "classes": list(range(split.class_start, split.class_end)),
            "original_classes": [bench.class_order[c] for c in range(split.class_start, split.class_end)],
            "train_size": int(split.train.shape[0]),
            "test_size": int(split.test.shape[0]),
        }
        if split.val is not None:
            task["val_size"] = int(split.val.shape[0])
        info["tasks"].append(task)
    defaults = benchmark_defaults(bench.name, protocol)
    info["protocols"] = list_protocols(bench.name)
    info["protocol"] = {
        "name": protocol,
        "epochs": defaults.epochs,
        "batch_size": defaults.batch_size,
        "minibatch_size": defaults.minibatch_size,
        "lr": defaults.lr,
        "lr_schedule": defaults.lr_schedule,
        "milestones": list(defaults.milestones),
        "buffer_size": defaults.buffer_size,
        "backbone": defaults.backbone,
        "backbone_options": dict(defaults.backbone_options),
        "drop_last": defaults.drop_last,
    }
    return info


def _print_info(info: dict[str, Any]) -> None:
    print(
        f"{info['name']}: {info['n_tasks']} tasks x {info['classes_per_task'][0]} classes"
        if len(set(info["classes_per_task"])) == 1
        else f"{info['name']}: {info['n_tasks']} tasks, classes per task {info['classes_per_task']}"
    )
    val = f", {info['val_size']} validation" if "val_size" in info else ""
    given = {k: v for k, v in info["options"].items() if v is not None}
    if given:
        print("  options: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in given.items()))
    print(
        f"  {info['train_size']} train / {info['test_size']} test{val} examples of shape "
        f"{tuple(info['input_shape'])} ({info['dtype']})"
    )
    for note in info["notes"]:
        print(f"  note: {note}")
    protocol = info["protocol"]
    options = ", ".join(f"{k} {v}" for k, v in protocol["backbone_options"].items())
    last = "dropped" if protocol["drop_last"] else "kept"
    others = [p for p in info["protocols"] if p != protocol["name"]]
    schedule = protocol["lr_schedule"]
    if schedule == "multistep" and protocol["milestones"]:
        schedule += " at epochs " + ", ".join(f"{m:g}" for m in protocol["milestones"])
    print(
        f"  protocol {protocol['name']}: {protocol['epochs']} epochs, batch {protocol['batch_size']}, replay "
        f"{protocol['minibatch_size']}, lr {protocol['lr']} ({schedule}), buffer "
        f"{protocol['buffer_size']}, backbone {protocol['backbone']}"
        + (f" ({options})" if options else "")
        + f", last partial batch {last}"
        + (f" | also: {', '.join(others)} (--protocol)" if others else "")
    )
    names = info["class_names"]
    for task in info["tasks"]:
        label = ", ".join(names[c] for c in task["classes"]) if names else str(task["original_classes"])
        print(f"  task {task['task'] + 1}: {task['train_size']} train / {task['test_size']} test | {label}")


def command_data(args: Any) -> int:
    """Entry point of ``xder-run data {info,prepare,download}``."""
    root = Path(args.data_root)
    if args.data_command == "info":
        protocol = args.protocol or DEFAULT_PROTOCOL
        given: dict[str, Any] = {}
        for dotted, value in args.set or []:
            section, key = split_key(dotted)
            if section != "benchmark":
                raise UsageError(
                    f"--set {dotted}: data info takes the benchmark's options only "
                    "(--set benchmark.KEY=VALUE, e.g. benchmark.tasks=3)"
                )
            given[key] = value
        benchmark_defaults(args.benchmark, protocol)  # an unknown benchmark or protocol first
        options = benchmark_settings(args.benchmark, given)
        bench = load_benchmark(
            args.benchmark,
            root,
            class_order=args.class_order or "natural",
            seed=args.seed,
            protocol=protocol,
            progress=progress_bar("images"),
            **options,
        )
        info = benchmark_info(bench, protocol, options)
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            _print_info(info)
        return 0
    if args.data_command == "download":
        if args.dataset not in DOWNLOADS:
            raise UsageError(f"no download for {args.dataset!r}: choose one of {', '.join(DOWNLOADS)}")
        download = download_cifar10 if args.dataset == "cifar10" else download_cifar100
        folder = download(root)
        print(f"{args.dataset}: downloaded, checked (md5) and unpacked into {folder}")
        return 0
    return _prepare(args, root)


def _prepare(args: Any, root: Path) -> int:
    kind = args.kind
    if kind == "cub200":
        done = prepare_cub200(root, progress=progress_bar("images"))
        masks = "with" if done.masks else "without"
        print(f"cub200: {done.n_train} train / {done.n_test} test images cached {masks} masks -> {done.path}")
        return 0
    source = args.raw or args.source
    if source is None:
        flag = "--raw" if kind == "ntu60" else "--source"
        raise UsageError(f"data prepare {kind} needs {flag} DIR (the folder holding the files to convert)")
    if kind in ("cifar10", "cifar100"):
        prepare_cifar = prepare_cifar10 if kind == "cifar10" else prepare_cifar100
        done = prepare_cifar(source, root, progress=progress_bar("images"))
        converted = f" ({done.converted} converted to RGB)" if done.converted else ""
        print(f"{kind}: {done.n_train} train / {done.n_test} test images{converted} -> {done.folder}")
        return 0
    if kind == "ntu60":
        report = prepare_ntu60(
            source,
            root,
            num_frames=args.frames,
            missing_list=args.missing,
            on_error="skip",
            progress=progress_bar("ntu60"),
        )
    elif kind in ("ntu60-stgcn", "ntu60-efficientgcn"):
        importer = import_ntu60_stgcn if kind == "ntu60-stgcn" else import_ntu60_efficientgcn
        report = importer(
            source, root, num_frames=args.frames, missing_list=args.missing, progress=progress_bar(kind)
        )
    elif kind == "coco-stitch":
        done = prepare_coco_stitch(source, root, seed=args.seed, progress=progress_bar("examples"))
        print(
            f"coco-stitch: {done.n_train} train / {done.n_test} test stitched {done.size}x{done.size} "
            f"images -> {done.paths['train'].parent}"
        )
        return 0
    elif kind == "miniimagenet":
        form = args.format or _detect_miniimagenet(Path(source))
        if form == "folders":
            if args.test_per_class is not None:
                raise UsageError(
                    "--test-per-class re-splits the csv and pickle distributions; the folders layout "
                    "keeps its own split (train/ -> train, val/ -> test): leave it out"
                )
            done = import_miniimagenet_folders(source, root, progress=progress_bar("classes"))
        else:
            importer = import_miniimagenet_csv if form == "csv" else import_miniimagenet_pickle
            test_per_class = 100 if args.test_per_class is None else args.test_per_class
            done = importer(
                source, root, test_per_class=test_per_class, seed=args.seed, progress=progress_bar("classes")
            )
        notes = [f"{done.resized} resized to 84x84"] if done.resized else []
        notes += [f"{done.converted} converted to RGB"] if done.converted else []
        print(
            f"miniimagenet ({form}): {done.n_classes} classes, {done.n_train} train / {done.n_test} test "
            f"images -> {done.folder}" + (f" ({', '.join(notes)})" if notes else "")
        )
        return 0
    else:  # argparse restricts the choices
        raise UsageError(f"unknown kind {kind!r}: choose one of {', '.join(PREPARE_KINDS)}")
    skipped = ", ".join(f"{count} {reason}" for reason, count in report.skipped.items() if count)
    print(
        f"{kind}: {report.train} train / {report.test} test samples -> {report.path}"
        + (f" (skipped: {skipped})" if skipped else "")
    )
    for line in report.malformed[:10]:
        print(f"  malformed: {line}")
    if len(report.malformed) > 10:
        print(f"  ... and {len(report.malformed) - 10} more malformed files")
    return 0


def _detect_miniimagenet(source: Path) -> str:
    """``csv`` (train.csv), ``pickle`` (mini-imagenet-cache-*.pkl) or ``folders`` (train/ and val/
    subfolders, or a file: only the image folders come as a tar archive)."""
    if source.is_file():
        return "folders"
    if (source / "train.csv").is_file():
        return "csv"
    if any(source.glob("mini-imagenet-cache-*.pkl")):
        return "pickle"
    if (source / "train").is_dir() and (source / "val").is_dir():
        return "folders"
    raise UsageError(
        f"{source} holds neither train.csv (+ images/), mini-imagenet-cache-*.pkl nor train/ and val/ "
        "image folders: point --source at one of the miniImageNet distributions (or a tar archive of "
        "the image folders), or pass --format"
    )


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``xder-run data`` to the subcommands."""

    data = commands.add_parser(
        "data",
        help="inspect a benchmark, convert raw datasets, download where allowed",
        description="What a benchmark holds (info), converters from the distributed formats (prepare), "
        "and downloads where the source allows them (download).",
    )
    add_plugin_argument(data)
    data_commands = data.add_subparsers(dest="data_command", metavar="ACTION", parser_class=Parser)
    data_commands.required = True

    info = data_commands.add_parser("info", help="what a benchmark holds: tasks, classes, sizes, protocol")
    info.add_argument("benchmark", metavar="BENCHMARK", help=f"one of {', '.join(list_benchmarks())}")
    info.add_argument("--data-root", default="data", metavar="DIR", help="folder holding the datasets (data)")
    info.add_argument("--class-order", type=class_order, metavar="ORDER", help="as for train (natural)")
    add_protocol_argument(info, recorded=False)
    info.add_argument("--seed", type=int, default=0, metavar="N", help="seed of --class-order random (0)")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.add_argument(
        "--set",
        action="append",
        type=assignment,
        metavar="benchmark.KEY=VALUE",
        help="a benchmark option, as for train, e.g. --set benchmark.tasks=3 on folder (repeatable)",
    )
    add_plugin_argument(info)

    prepare = data_commands.add_parser(
        "prepare",
        help="convert a dataset from its distributed format into the layout its benchmark reads",
        description="cifar10: an image-folder copy of CIFAR-10 (--source: a folder or tar archive holding "
        "train/<class>/* and test/<class>/*, 32x32 images) -> DATA_ROOT/cifar-10-batches-py/ in the official "
        "format; cifar100: the same for CIFAR-100 (train/<fine class>/*, 500 a class, and "
        "test/<fine class>/*, 100 a class, the 100 fine class names of the official meta file; the "
        "super-classes from the standard table) -> DATA_ROOT/cifar-100-python/ in the official format; "
        "ntu60: raw .skeleton files (--raw) -> DATA_ROOT/ntu60/xsub.h5; ntu60-stgcn, "
        "ntu60-efficientgcn: those projects' preprocessed .npy + .pkl (--source) -> the same file; "
        "miniimagenet: the CSV + images or mini-imagenet-cache-*.pkl distribution (--source) -> "
        "DATA_ROOT/MINIIMG/*.npy with a seeded per-class train/test split, or image folders already "
        "split (--format folders: a folder or tar archive holding train/<wnid>/* and val/<wnid>/*, "
        "84x84; val/ is the test set, the split is kept); the format is detected (a tar archive, or "
        "train/ and val/ subfolders: folders); cub200: decode "
        "DATA_ROOT/CUB_200_2011 (+ segmentations/) once into the cache DATA_ROOT/cub200/cub200.h5; "
        "coco-stitch: COCO 2017 objects (--source: annotations/, train2017/, val2017/) pasted on "
        "CIFAR-100 images of DATA_ROOT (the secondary-targets set, DATA_ROOT/coco_stitch/).",
    )
    prepare.add_argument("kind", choices=PREPARE_KINDS, metavar="KIND", help=", ".join(PREPARE_KINDS))
    prepare.add_argument("--raw", metavar="DIR", help="ntu60: the folder of raw .skeleton files")
    prepare.add_argument(
        "--source",
        metavar="DIR",
        help="the folder (cifar10, cifar100, miniimagenet folders: or tar archive) holding the files "
        "to convert",
    )
    prepare.add_argument("--data-root", default="data", metavar="DIR", help="where to write (data)")
    prepare.add_argument("--frames", type=int, default=80, metavar="T", help="ntu60*: frames per sample (80)")
    prepare.add_argument(
        "--missing", metavar="FILE", help="ntu60*: the official NTU_RGBD_samples_with_missing_skeletons.txt"
    )
    prepare.add_argument(
        "--format",
        choices=("csv", "pickle", "folders"),
        help="miniimagenet: the source's format (detected)",
    )
    prepare.add_argument(
        "--test-per-class",
        type=int,
        metavar="N",
        help="miniimagenet csv, pickle: test images drawn per class (100)",
    )
    prepare.add_argument(
        "--seed", type=int, default=0, metavar="N", help="miniimagenet csv, pickle; coco-stitch: seed (0)"
    )
    add_plugin_argument(prepare)

    download = data_commands.add_parser("download", help="fetch and checksum an official archive")
    download.add_argument("dataset", choices=DOWNLOADS, metavar="DATASET", help=", ".join(DOWNLOADS))
    download.add_argument("--data-root", default="data", metavar="DIR", help="where to unpack it (data)")
    add_plugin_argument(download)
    data.set_defaults(handler="data")


run = command_data
