"""xder-run analyze on tiny seq-digits runs: every analysis runs or says why it does not apply;
never beside another writer of the run."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from xder_cli.main import main
from xder_cli.runs import rundir
from xder_cli.runs.analyses import ANALYSES

TINY = ["--epochs", "1", "--set", "backbone.width=4", "--device", "cpu"]
FAST = ["--buffer-epochs", "2", "--max-items", "40"]


def _train(out: Path, *extra: str) -> Path:
    assert (
        main(["train", "--method", "derpp", "--out", str(out), *TINY, "--set", "run.threads=1", *extra]) == 0
    )
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


@pytest.fixture(scope="module")
def derpp_run(tmp_path_factory) -> Path:
    return _train(tmp_path_factory.mktemp("runs"), "--record-analyses", "--set", "train.record_every=2")


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> Path:
    """The same run trained as by default: no training analyses recorded."""
    return _train(tmp_path_factory.mktemp("plain"), "--set", "train.record_every=2")


def _events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def test_a_default_run_records_no_training_analyses(plain_run: Path) -> None:
    events = _events(plain_run)
    analysis = [e for e in events if e["event"] == "analysis"]
    assert [sorted(e) for e in analysis] == [["event", "peak_memory_mb", "task"]] * 5
    assert all(e["grad_norms"] == {} for e in events if e["event"] == "epoch")
    assert tomllib.loads((plain_run / "config.toml").read_text())["run"]["record_analyses"] is False


def test_recording_the_analyses_changes_no_result(derpp_run: Path, plain_run: Path) -> None:
    recorded, plain = (json.loads((r / "results.json").read_text()) for r in (derpp_run, plain_run))
    for key in ("accuracy_matrix", "task_il_accuracy_matrix", "faa", "ff"):
        assert recorded[key] == plain[key], key
    assert recorded["environment"]["threads"] == plain["environment"]["threads"] == [1]
    with_norms = [e for e in _events(derpp_run) if e["event"] == "epoch"]
    assert all(e["grad_norms"] for e in with_norms)  # the probes ran, and moved nothing


def test_analyze_of_a_run_without_records_names_the_setting(plain_run: Path, capsys) -> None:
    for only in ("future_fewshot_auc", "grad_norms,ece"):
        assert main(["analyze", str(plain_run), "--only", only]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"xder-run analyze: error: {plain_run} was trained without recording what ")
        assert line.endswith("train it with --record-analyses (run.record_analyses = true)")
        assert not (plain_run / "analysis").exists()
    # Asked for everything, it gives what it can and says, for each of the two, what is missing.
    assert main(["analyze", str(plain_run), "--only", "ece,head_bias,resources", "--json"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(plain_run), *FAST]) == 0
    out = capsys.readouterr().out
    hint = (
        "skipped (not recorded while training: train it with --record-analyses (run.record_analyses = true))"
    )
    assert f"grad_norms: {hint}" in out
    assert f"future_fewshot_auc: {hint}" in out
    assert "resources: " in out
    assert "peak memory" in out.split("resources: ")[1].splitlines()[0]


def test_training_records_what_analyze_needs(derpp_run: Path) -> None:
    events = _events(derpp_run)
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


def test_analyze_only_and_text_output(derpp_run: Path, tmp_path: Path, capsys) -> None:
    only = ["--only", "ece,ss,secondary_targets", "--data-root", str(tmp_path)]
    assert main(["analyze", str(derpp_run), *only]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ece: ECE ")
    assert "ss: skipped (seq-digits has no super-classes)" in out
    # The data it lacks is named by the command that makes it, not by a Python call.
    (secondary,) = [line for line in out.splitlines() if line.startswith("secondary_targets: skipped")]
    assert "xder-run data prepare coco-stitch" in secondary, secondary
    assert "prepare_data(" not in secondary


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


def test_a_finished_shortened_run_is_analysed_as_complete(tmp_path: Path, capsys) -> None:
    run = _train(tmp_path, "--set", "train.tasks=2")
    capsys.readouterr()
    assert main(["analyze", str(run), "--only", "ece", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["complete"] is True
    assert "not finished" not in captured.err
