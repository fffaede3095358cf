"""Phases 1-2 of the GPU script: the environment (``env``) and the data (``data``)."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

import torch
from gpu_phases.common import HERE, Script, checked, xder_run


def environment(device: torch.device) -> dict[str, Any]:
    import xder_cli
    import xder_methods

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "packages": {"xder_cli": xder_cli.__file__, "xder_methods": xder_methods.__file__},
        "cpu_count": os.cpu_count(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {
            "card": torch.cuda.get_device_name(device),
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        }
    return info


def smoke_images(folder: Path, kind: str, per_class: int, test_per_class: int) -> Path:
    """A small image-folder copy of CIFAR-10 or CIFAR-100 (random 32x32 JPEGs, one brightness per
    class so that the classes can be learnt) in the layout ``xder-run data prepare`` reads."""
    from PIL import Image

    from xder_data.cifar10 import CIFAR10_CLASSES
    from xder_data.cifar100 import cifar100_superclasses

    fine = sorted(name for members in cifar100_superclasses().values() for name in members)
    classes = CIFAR10_CLASSES if kind == "cifar10" else tuple(fine)

    rng = torch.Generator().manual_seed(0)
    for split, count in (("train", per_class), ("test", test_per_class)):
        for index, name in enumerate(classes):
            target = folder / split / name
            target.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                noise = torch.randint(0, 40, (32, 32, 3), generator=rng, dtype=torch.uint8)
                pixels = (noise + index * 215 // len(classes)).numpy()
                Image.fromarray(pixels).save(target / f"{i}.jpg", quality=90)
    return folder


def prepare_data(script: Script, smoke: bool, kind: str) -> dict[str, Any]:
    """``xder-run data prepare KIND`` (cifar10 or cifar100) from ``data/<kind>-jpg.tar.gz`` beside
    this script, or in smoke mode from a small image folder written here."""
    data_root = script.out / "data"
    from xder_data.cifar10 import CIFAR10_FOLDER
    from xder_data.cifar100 import CIFAR100_FOLDER

    prepared = data_root / {"cifar10": CIFAR10_FOLDER, "cifar100": CIFAR100_FOLDER}[kind]
    if prepared.is_dir():  # an earlier call's, in the same folder
        return {"data_root": str(data_root), "reused": str(prepared), "seconds": 0.0}
    if smoke:  # the CIFAR-100 importer wants the real counts: 500 and 100 a class
        counts = (40, 10) if kind == "cifar10" else (500, 100)
        source = smoke_images(script.out / f"smoke-{kind}", kind, *counts)
    else:
        source = HERE / "data" / f"{kind}-jpg.tar.gz"
    started = time.monotonic()
    checked(
        xder_run(
            ["data", "prepare", kind, "--source", str(source), "--data-root", str(data_root)],
            script.out / "data.log",
            timeout=script.left() if smoke else min(120, script.left()),
        ),
        f"data prepare {kind}",
    )
    return {"source": str(source), "data_root": str(data_root), "seconds": time.monotonic() - started}
