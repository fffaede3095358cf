"""xder-run analyze on tiny seq-digits runs: every analysis runs or says why it does not apply;
never beside another writer of the run."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from xder_cli import rundir
from xder_cli.analyze import ANALYSES, analyse_pointing, load_trained_run
from xder_cli.main import main

TINY = ["--epochs", "1", "--set", "backbone.width=4", "--device", "cpu"]
FAST = ["--buffer-epochs", "2", "--max-items", "40"]


@pytest.fixture(scope="module")
def derpp_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    assert (
        main(["train", "--method", "derpp", "--out", str(out), *TINY, "--set", "train.record_every=2"]) == 0
    )
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def test_training_records_what_analyze_needs(derpp_run: Path) -> None:
    events = [json.loads(line) for line in (derpp_run / "events.jsonl").read_text().splitlines()]
    analysis = [e for e in events if e["event"] == "analysis"]
    assert [e["task"] for e in analysis] == [0, 1, 2, 3, 4]
    assert [sorted(e["fewshot"]["auc"]) for e in analysis[:2]] == [["1", "2", "3", "4"], ["2", "3", "4"]]
    assert "fewshot" not in analysis[-1]  # no future task after the last one
    assert all(len(e["buffer_class_logits"]) == 10 for e in analysis)
    epochs = [e for e in events if e["event"] == "epoch"]
    assert {"stream", "buffer"} <= set(epochs[1]["grad_norms"])
    tasks = [e for e in events if e["event"] == "task"]
    assert [len(e["head_counts"]) for e in tasks] == [1, 2, 3, 4, 5]


def test_analyze_writes_every_applicable_analysis(derpp_run: Path, capsys) -> None:
    assert main(["analyze", str(derpp_run), *FAST, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads((derpp_run / "analysis" / "analysis.json").read_text())
    done = set(report["analyses"])
    assert {"ece", "head_bias", "grad_norms", "buffer_logits", "future_fewshot_auc", "resources"} <= done
    assert {"flatness", "fisher_trace", "buffer_informativeness"} <= done
    assert set(report["skipped"]) == {"ss", "pointing", "secondary_targets"}
    assert 0 <= report["analyses"]["ece"]["ece"] <= 1
    assert set(report["analyses"]["buffer_informativeness"]["accuracy"]) == {"labels", "logits", "both"}
    assert report["analyses"]["flatness"]["sigmas"][0] == 0.0
    assert report["analyses"]["fisher_trace"]["trace"] > 0
    for name in ("reliability.png", "head_bias.png", "grad_norms.png", "buffer_logits.png", "flatness.png"):
        assert (derpp_run / "analysis" / name).read_bytes().startswith(b"\x89PNG")


def test_analyze_only_and_text_output(derpp_run: Path, capsys) -> None:
    assert main(["analyze", str(derpp_run), "--only", "ece,ss"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ece: ECE ")
    assert "ss: skipped (seq-digits has no super-classes)" in out


def test_analyze_does_not_change_the_run(derpp_run: Path) -> None:
    before = (derpp_run / "checkpoint.pt").read_bytes()
    assert main(["analyze", str(derpp_run), "--only", "flatness,fisher_trace", *FAST]) == 0
    assert (derpp_run / "checkpoint.pt").read_bytes() == before


def test_analyze_is_refused_while_another_process_writes_the_run(derpp_run: Path, capsys) -> None:
    with rundir.lock_run_dir(derpp_run, then="-"):  # e.g. xder-run train --resume of this run
        before = {
            p: (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns) for p in derpp_run.rglob("*")
        }
        assert main(["analyze", str(derpp_run), "--only", "ece"]) == 2
        after = {
            p: (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns) for p in derpp_run.rglob("*")
        }
        assert after == before
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"xder-run analyze: error: {derpp_run} is in use by process {os.getpid()} on host "
    )
    assert line.endswith(f"then run xder-run analyze {derpp_run} again")


def test_pointing_on_planted_masks(derpp_run: Path) -> None:
    run = load_trained_run(derpp_run)
    n = run.bench.test_y.shape[0]
    masks = torch.zeros(n, 8, 8, dtype=torch.bool)
    masks[:, 2:6, 2:6] = True
    run.bench = dataclasses.replace(run.bench, test_masks=masks)
    result = analyse_pointing(run, derpp_run / "analysis", SimpleNamespace(tolerance=0.0))
    assert 0.0 <= result["accuracy"] <= 1.0
    everywhere = torch.ones(n, 8, 8, dtype=torch.bool)
    run.bench = dataclasses.replace(run.bench, test_masks=everywhere)
    assert analyse_pointing(run, derpp_run / "analysis", SimpleNamespace(tolerance=0.0))["accuracy"] == 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["analyze", "{tmp}/absent"], "no such directory"),
        (["analyze", "{tmp}"], "not a run directory"),
        (["analyze", "{run}", "--only", "vibes"], "unknown analysis 'vibes'"),
    ],
)
def test_analyze_mistakes_exit_2(argv, message, derpp_run: Path, tmp_path: Path, capsys) -> None:
    code = main([a.replace("{tmp}", str(tmp_path)).replace("{run}", str(derpp_run)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_every_analysis_is_listed_in_the_help(capsys) -> None:
    assert main(["analyze", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in ANALYSES:
        assert name in text


def test_analyze_on_a_folder_that_is_not_a_run(tmp_path: Path, capsys) -> None:
    for target in (tmp_path, tmp_path / "nothing"):
        assert main(["analyze", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert "resume" not in err
        assert err.startswith(f"xder-run analyze: error: {target}: ")
        assert "give a folder that xder-run train created" in err
