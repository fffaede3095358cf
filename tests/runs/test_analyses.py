"""The analyses of a trained run (xder_cli.runs.analyses) called as a library on a tiny seq-digits
run: Grad-CAM pointing against object masks planted on the test set."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from xder_cli.runs.analyses import AnalysisOptions, analyse_pointing, load_trained_run
from xder_cli.runs.lifecycle import RunLife
from xder_cli.runs.settings import resolve_run

TINY = {"train.epochs": 1, "backbone.width": 4, "run.device": "cpu", "run.threads": 1}


@pytest.fixture(scope="module")
def derpp_run(tmp_path_factory) -> Path:
    """DER++ on seq-digits, trained as ``xder-run train --method derpp --epochs 1 --device cpu
    --record-analyses --set backbone.width=4 --set run.threads=1 --set train.record_every=2`` would."""
    overrides = TINY | {"run.record_analyses": True, "train.record_every": 2}
    plan = resolve_run("derpp", "seq-digits", overrides=overrides)
    return RunLife().new(plan, tmp_path_factory.mktemp("runs")).run_dir


def test_pointing_on_planted_masks(derpp_run: Path) -> None:
    run = load_trained_run(derpp_run)
    test_y = run.bench.test_y
    n = test_y.shape[0]

    def pointing(masks: torch.Tensor, tolerance: float = 0.0) -> dict:
        run.bench = dataclasses.replace(run.bench, test_masks=masks)
        return analyse_pointing(run, derpp_run / "analysis", AnalysisOptions(tolerance=tolerance))

    # Wherever the Grad-CAM maximum is: a mask over the whole image is hit, an empty one missed.
    assert pointing(torch.ones(n, 8, 8, dtype=torch.bool))["accuracy"] == 1.0
    nowhere = pointing(torch.zeros(n, 8, 8, dtype=torch.bool), tolerance=3.0)
    assert (nowhere["accuracy"], nowhere["overall_accuracy"]) == (0.0, 0.0)
    # Half and half: the even classes' items get the whole image, the odd classes' nothing. The mean
    # over the 10 classes is 5/10; over the items, the even classes' share of the 355 test items
    # (35 + 35 + 36 + 36 + 34 = 176 by the split's n_c // 5).
    even = (test_y % 2 == 0)[:, None, None].expand(n, 8, 8).contiguous()
    half = pointing(even)
    assert half["accuracy"] == pytest.approx(0.5)
    assert half["overall_accuracy"] == pytest.approx(176 / 355)


def test_the_secondary_targets_probe_trains_with_the_coco_stitch_protocol() -> None:
    """One owner: the probe's SGD and batch are the coco-stitch protocol's, not values of its own."""
    from torch import nn

    from xder_cli.runs.analyses import probe_optimizer
    from xder_data import benchmark_defaults

    protocol = benchmark_defaults("coco-stitch")
    optimizer, batch = probe_optimizer(nn.Linear(4, 3))
    (group,) = optimizer.param_groups
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (
        protocol.lr,
        protocol.momentum,
        protocol.weight_decay,
    )
    assert batch == protocol.batch_size == 32
    assert (protocol.lr, protocol.momentum) == (0.1, 0.0)  # the protocol's own choice, stated there
