"""``xder-run data``: what a benchmark holds, and the converters and downloads that make its files
(:func:`~xder_data.benchmark_info`, :func:`~xder_data.prepare_data`, :func:`~xder_data.download_data`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from xder_cli import catalogue
from xder_cli.arguments import Parser, assignment, class_order
from xder_cli.commands.common import add_plugin_argument, add_protocol_argument

__all__ = ["add_parser", "run"]


def run(args: Any) -> int:
    """Entry point of ``xder-run data {info,prepare,download}``."""
    from xder_cli.progress import progress_bar
    from xder_data import ImportOptions, download_data, prepare_data

    root = Path(args.data_root)
    if args.data_command == "info":
        return _info(args, root)
    if args.data_command == "download":
        folder = download_data(args.dataset, root)
        print(f"{args.dataset}: downloaded, checked (md5) and unpacked into {folder}")
        return 0
    options = ImportOptions(
        num_frames=args.frames,
        missing_list=args.missing,
        miniimagenet_format=args.format,
        test_per_class=args.test_per_class,
        seed=args.seed,
        progress=progress_bar,
    )
    print(prepare_data(args.kind, root, source=args.raw or args.source, options=options))
    return 0


def _info(args: Any, root: Path) -> int:
    from xder_cli.progress import progress_bar
    from xder_cli.runs.settings import benchmark_section, benchmark_settings
    from xder_data import DEFAULT_PROTOCOL, benchmark_defaults, benchmark_info, load_benchmark

    protocol = args.protocol or DEFAULT_PROTOCOL
    given = benchmark_section(args.set or [], "data info")
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


def _print_info(info: dict[str, Any]) -> None:
    print(f"{info['name']} ({info['scenario']}): {info['layout']}")
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


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    info.add_argument(
        "benchmark", metavar="BENCHMARK", help=f"one of {', '.join(catalogue.BENCHMARKS.names())}"
    )
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
        "mnist: the four official IDX files, .gz or not (--source: a folder holding them, or any folder "
        "below it) -> copied into DATA_ROOT/MNIST/; tinyimagenet: the official tiny-imagenet-200 folder or "
        "zip (--source) -> every image decoded once into DATA_ROOT/TINYIMG/*.npy (labels: sorted "
        "wnids.txt; val/ is the test set); ntu60: raw .skeleton files (--raw) -> "
        "DATA_ROOT/ntu60/xsub.h5; ntu60-stgcn, ntu60-efficientgcn: those projects' preprocessed .npy + "
        ".pkl (--source) -> the same file; "
        "miniimagenet: the CSV + images or mini-imagenet-cache-*.pkl distribution (--source) -> "
        "DATA_ROOT/MINIIMG/*.npy with a seeded per-class train/test split, or image folders already "
        "split (--format folders: a folder or tar archive holding train/<wnid>/* and val/<wnid>/*, "
        "84x84; val/ is the test set, the split is kept); the format is detected (a tar archive, or "
        "train/ and val/ subfolders: folders); cub200: decode "
        "DATA_ROOT/CUB_200_2011 (+ segmentations/) once into the cache DATA_ROOT/cub200/cub200.h5; "
        "coco-stitch: COCO 2017 objects (--source: annotations/, train2017/, val2017/) pasted on "
        "CIFAR-100 images of DATA_ROOT (the secondary-targets set, DATA_ROOT/coco_stitch/).",
    )
    kinds = catalogue.IMPORTERS.names()
    prepare.add_argument("kind", choices=kinds, metavar="KIND", help=", ".join(kinds))
    prepare.add_argument("--raw", metavar="DIR", help="ntu60: the folder of raw .skeleton files")
    prepare.add_argument(
        "--source",
        metavar="DIR",
        help="the folder (cifar10, cifar100, miniimagenet folders: or tar archive; tinyimagenet: or zip) "
        "holding the files to convert",
    )
    prepare.add_argument("--data-root", default="data", metavar="DIR", help="where to write (data)")
    prepare.add_argument("--frames", type=int, default=80, metavar="T", help="ntu60*: frames per sample (80)")
    prepare.add_argument(
        "--missing", metavar="FILE", help="ntu60*: the official NTU_RGBD_samples_with_missing_skeletons.txt"
    )
    prepare.add_argument(
        "--format",
        choices=catalogue.MINIIMAGENET_FORMATS,
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
    downloads = catalogue.DOWNLOADS.names()
    download.add_argument("dataset", choices=downloads, metavar="DATASET", help=", ".join(downloads))
    download.add_argument("--data-root", default="data", metavar="DIR", help="where to unpack it (data)")
    add_plugin_argument(download)
    data.set_defaults(handler="data")
