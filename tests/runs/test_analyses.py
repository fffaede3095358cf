"""The analyses of a trained run (xder_cli.runs.analyses) called as a library on a tiny seq-digits
run: Grad-CAM pointing against object masks planted on the test set."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from xder_cli.runs.analyses import AnalysisOptions, load_trained_run
from xder_cli.runs.analyses.pointing import analyse_pointing
from xder_cli.runs.lifecycle import live
from xder_cli.runs.settings import resolve_run

TINY = {"train.epochs": 1, "backbone.width": 4, "run.device": "cpu", "run.threads": 1}


@pytest.fixture(scope="module")
def derpp_run(tmp_path_factory) -> Path:
    """DER++ on seq-digits, trained as ``xder-run train --method derpp --epochs 1 --device cpu
    --record-analyses --set backbone.width=4 --set run.threads=1 --set train.record_every=2`` would."""
    overrides = TINY | {"run.record_analyses": True, "train.record_every": 2}
    plan = resolve_run("derpp", "seq-digits", overrides=overrides)
    return live(plan, out=tmp_path_factory.mktemp("runs")).run_dir


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


def test_a_registered_analysis_runs_through_analyze_run_filed_as_it_says(
    derpp_run: Path, fresh_registries
) -> None:
    """A plugin's analysis beside a built-in one: run in the order asked, its fields filed each
    under its own name where it says so, its seconds measured, its summary its own."""
    from xder_cli.runs.analyses import register_analysis
    from xder_cli.runs.run_analysis import analyze_run, read_analysis, summary_line

    @register_analysis(
        "toy_pair", summary=lambda v: f"{v['toy_a']} and {v['toy_b']}", filed_as=("toy_a", "toy_b")
    )
    def toy_pair(run, out, options):
        return {"toy_a": len(run.events), "toy_b": options.max_items}

    heard = []
    report = analyze_run(
        derpp_run,
        ["toy_pair", "resources"],
        options=AnalysisOptions(max_items=3),
        on_result=lambda *a: heard.append(a),
    )
    events = len((derpp_run / "events.jsonl").read_text().splitlines())
    assert list(report["analyses"]) == ["toy_a", "toy_b", "resources"]
    assert (report["analyses"]["toy_a"], report["analyses"]["toy_b"]) == (events, 3)
    assert read_analysis(derpp_run) == report["analyses"]
    (name, value, skipped), _ = heard
    assert (name, skipped) == ("toy_pair", None)
    assert value["seconds"] >= 0
    assert summary_line("toy_pair", value) == f"{events} and 3"
