"""xder-run experiment: the flatness, class-order and sensitivity protocols on seq-digits with tiny
settings; their numbers recomputed from the run directories; reruns that skip finished runs and
resume interrupted ones; a run another process holds left to it; one-line usage errors. The table
experiment: its differences and 2-SE flags from synthetic run directories against values worked
out by hand, its quick (laptop) form, and a tiny end-to-end run on seq-digits."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
from pathlib import Path

import pytest
import torch

from xder_cli.main import main
from xder_cli.progress import TaskProgress
from xder_cli.runs import rundir
from xder_cli.runs.experiments.class_order import plan_class_order
from xder_cli.runs.experiments.table import plan_table, table_entries

TINY = ["--set", "train.epochs=1", "--set", "backbone.width=4", "--set", "run.device=cpu"]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def one_thread():
    """The runs are tiny: one intra-op thread is faster than several on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def _events(run_dir: Path) -> list[str]:
    return [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]


def _check_files(out: Path, plot: str) -> dict:
    assert (out / plot).read_bytes().startswith(PNG)
    summary = json.loads((out / "experiment.json").read_text())
    assert summary["files"] == ["experiment.json", "experiment.md", plot]
    assert (out / "experiment.md").read_text().startswith("# ")
    return summary


def test_flatness_pairs_regularisers_interrupt_and_resume(tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "flat"
    argv = ["experiment", "flatness", "--pairs", "1", "--seeds", "0", "--out", str(out), *TINY]
    original = TaskProgress.on_task_end

    def crash(self, loop, record) -> None:  # the lfr run is killed after its first task
        original(self, loop, record)
        if loop.method.config.regulariser == "lfr" and record.task == 0:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(TaskProgress, "on_task_end", crash)
        assert main(argv) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "interrupted: run the same command again; finished runs are kept and interrupted ones resume "
        "from their checkpoints"
    )
    runs = out / "runs"
    assert _results(runs / "pair1-none-s0")["complete"] is True
    assert _results(runs / "pair1-lfr-s0")["complete"] is False
    assert not (runs / "pair1-llr-s0").exists()
    plastic_events = (runs / "pair1-none-s0" / "events.jsonl").read_bytes()
    capsys.readouterr()

    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "3 runs, 1 already finished; training 2 in this process" in printed
    assert "[2/3] pair1-lfr-s0 finished | first-task accuracy" in printed
    assert "[3/3] pair1-llr-s0 finished" in printed
    assert "| 1 (tasks 1→2) |" in printed
    summary = _check_files(out, "flatness.png")
    assert (runs / "pair1-none-s0" / "events.jsonl").read_bytes() == plastic_events  # skipped
    lfr_events = _events(runs / "pair1-lfr-s0")
    assert (lfr_events.count("start"), lfr_events.count("resume"), lfr_events.count("task")) == (1, 1, 2)
    assert _events(runs / "pair1-llr-s0").count("start") == 1

    (row,) = summary["rows"]
    assert row["pair"] == 1
    assert row["tasks"] == [1, 2]
    for regulariser in ("none", "lfr", "llr"):
        run_dir = runs / f"pair1-{regulariser}-s0"
        config = rundir.read_config(run_dir / "config.toml")
        assert config["run"]["method"] == "er_flat"
        assert config["run"]["class_order"] == [2, 3, 4, 5, 0, 1, 6, 7, 8, 9] == row["class_order"]
        assert config["train"]["tasks"] == 2
        assert config["method"]["regulariser"] == regulariser
        results = _results(run_dir)
        matrix = results["accuracy_matrix"]
        assert results["n_tasks"] == 2
        assert [len(r) for r in matrix] == [1, 2]
        assert len(results["task_il_accuracy_matrix"][-1]) == 2
        cell = row["cells"][regulariser]
        assert cell["first_task_accuracy_mean"] == pytest.approx(matrix[1][0])
        assert cell["forgetting_mean"] == pytest.approx(matrix[0][0] - matrix[1][0])
        assert cell["first_task_accuracy_std"] is None  # one seed
        assert (cell["seeds_finished"], cell["seeds"]) == (1, 1)
        assert summary["mean_over_pairs"][regulariser]["first_task_accuracy"] == pytest.approx(matrix[1][0])
    assert [r["status"] for r in summary["runs"]] == ["finished"] * 3

    # A third invocation trains nothing.
    assert main(argv) == 0
    assert "3 runs, 3 already finished; training 0" in capsys.readouterr().out
    assert (runs / "pair1-none-s0" / "events.jsonl").read_bytes() == plastic_events


def test_class_order_forward_and_backward(tmp_path: Path, capsys) -> None:
    out = tmp_path / "order"
    argv = ["experiment", "class-order", "--methods", "er", "--seeds", "0,1", "--out", str(out), *TINY]
    assert main([*argv, "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert printed.count(" finished | Class-IL FAA ") == 4
    # Each run's log says the thread count its numbers come from, as xder-run train does.
    log = (out / "runs" / "er-natural-s0" / "log.txt").read_text().splitlines()
    assert log[0] == "threads: 1 (fixed)"
    assert log[1].startswith("task 1/5 | class-il [")
    assert "| er |" in printed
    summary = _check_files(out, "class_order.png")
    (row,) = summary["rows"]
    assert row["method"] == "er"
    faa: dict[str, list[float]] = {}
    for order in ("natural", "reversed"):
        results = [_results(out / "runs" / f"er-{order}-s{seed}") for seed in (0, 1)]
        assert all(r["complete"] and r["method"] == "er" for r in results)
        assert (
            rundir.read_config(out / "runs" / f"er-{order}-s0" / "config.toml")["run"]["class_order"] == order
        )
        cell = row["cells"][order]
        faa[order] = [r["faa"] for r in results]
        assert cell["faa_mean"] == pytest.approx(statistics.fmean(faa[order]))
        assert cell["faa_std"] == pytest.approx(statistics.stdev(faa[order]))
        assert cell["ff_mean"] == pytest.approx(statistics.fmean([r["ff"] for r in results]))
        assert cell["ff_std"] == pytest.approx(statistics.stdev([r["ff"] for r in results]))
    difference = statistics.fmean(faa["reversed"]) - statistics.fmean(faa["natural"])
    assert row["faa_reversed_minus_natural"] == pytest.approx(difference)
    assert f"{difference:+.2f}" in (out / "experiment.md").read_text()

    before = {p.name: (p / "events.jsonl").read_bytes() for p in (out / "runs").iterdir()}
    assert main(argv) == 0
    assert "4 runs, 4 already finished; training 0" in capsys.readouterr().out
    assert {p.name: (p / "events.jsonl").read_bytes() for p in (out / "runs").iterdir()} == before


def test_a_run_held_by_another_process_is_left_to_it(tmp_path: Path, capsys) -> None:
    out = tmp_path / "order"
    argv = ["experiment", "class-order", "--methods", "sgd", "--seeds", "0", "--out", str(out), *TINY]
    held = out / "runs" / "sgd-reversed-s0"
    held.mkdir(parents=True)
    with rundir.lock_run_dir(held, then="-"):  # the same experiment, started twice, trains it
        assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"[2/2] sgd-reversed-s0 running elsewhere (held by process {os.getpid()} on host " in printed
    assert "note: 1 run(s) are being trained by another process" in printed
    assert [p.name for p in held.iterdir()] == [".lock"]  # nothing written into it
    summary = json.loads((out / "experiment.json").read_text())
    statuses = {r["name"]: r["status"] for r in summary["runs"]}
    assert statuses == {"sgd-natural-s0": "finished", "sgd-reversed-s0": "running elsewhere"}
    assert summary["rows"][0]["cells"]["reversed"]["seeds_finished"] == 0
    assert (
        "- runs/sgd-reversed-s0: running elsewhere (held by process " in (out / "experiment.md").read_text()
    )

    assert main(argv) == 0  # once it is free, that run alone is trained
    assert "2 runs, 1 already finished; training 1 in this process" in capsys.readouterr().out
    summary = json.loads((out / "experiment.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["finished", "finished"]


def test_sensitivity_on_ray(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sens"
    argv = ["experiment", "sensitivity", "--method", "er", "--param", "train.lr=0.02,0.05", "--seeds", "0"]
    argv += ["--max-concurrent", "2", "--out", str(out), *TINY, "--set", "train.tasks=2"]  # Ray is the point
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "training 2 on Ray" in printed
    assert printed.count(" finished | test FAA ") == 2
    summary = _check_files(out, "sensitivity.png")
    assert summary["method"] == "er"
    assert summary["preset"] == "none"
    (param,) = summary["params"]
    assert param["key"] == "train.lr"
    assert param["base_value"] == 0.05  # seq-digits' protocol
    by_value = {}
    for run_dir in (out / "runs").iterdir():
        config = rundir.read_config(run_dir / "config.toml")
        assert config["run"]["validation"] == 0.0  # the test FAA is reported: nothing held out
        assert config["train"]["epochs"] == 1
        assert config["train"]["tasks"] == 2
        by_value[config["train"]["lr"]] = _results(run_dir)
    assert sorted(by_value) == [0.02, 0.05]
    for row in param["rows"]:
        results = by_value[row["value"]]
        assert row["faa_mean"] == pytest.approx(results["faa"])
        assert row["ff_mean"] == pytest.approx(results["ff"])
        assert row["is_base"] is (row["value"] == 0.05)
        assert (row["seeds_finished"], row["seeds"]) == (1, 1)
    table = (out / "experiment.md").read_text()
    assert "| train.lr | 0.05 (base) |" in table
    assert "test split is reported" in table

    assert main(argv) == 0  # everything finished: no Ray instance is even started
    assert "2 runs, 2 already finished; training 0" in capsys.readouterr().out


def test_usage_errors_exit_2(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "out")
    bad = [
        ["experiment", "nope", "--out", out],
        ["experiment", "flatness", "--pairs", "7", "--out", out],
        ["experiment", "flatness", "--pairs", "one", "--out", out],
        ["experiment", "flatness", "--set", "train.tasks=3", "--out", out],
        ["experiment", "class-order", "--pairs", "1", "--out", out],
        ["experiment", "class-order", "--methods", "nope", "--out", out],
        ["experiment", "class-order", "--set", "method.nope=1", "--out", out],
        ["experiment", "class-order", "--set", "run.seed=3", "--out", out],
        ["experiment", "class-order", "--seeds", "a,b", "--out", out],
        ["experiment", "class-order", "--max-concurrent", "0", "--out", out],
        ["experiment", "sensitivity", "--out", out],
        ["experiment", "sensitivity", "--param", "method.alpha", "--out", out],
        ["experiment", "sensitivity", "--param", "method.nope=1,2", "--out", out],
        [
            "experiment",
            "sensitivity",
            "--param",
            "method.alpha=0.1",
            "--set",
            "method.alpha=0.2",
            "--out",
            out,
        ],
        ["experiment", "sensitivity", "--param", "train.lr=0.1", "--param", "train.lr=0.2", "--out", out],
    ]
    for argv in bad:
        assert main(argv) == 2, argv
    errors = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(errors) == len(bad)
    assert all(line.startswith("xder-run experiment: error: ") for line in errors)
    assert "invalid choice: 'nope'" in errors[0]
    assert "7 is not a pair of adjacent tasks" in errors[1]
    assert "the experiment sets it: 2, the pair" in errors[3]
    assert "unknown method 'nope'" in errors[5]
    assert "method.nope is not a setting" in errors[6]
    assert "use --seeds" in errors[7]
    assert "varied by --param" in errors[13]

    # A run directory left by an experiment with other settings is never reused.
    run, _ = plan_class_order(
        "seq-digits",
        ["er"],
        [0],
        {"train.epochs": 2, "backbone.width": 4, "run.device": "cpu"},
    )
    run_dir = Path(out) / "runs" / run.name
    run_dir.mkdir(parents=True)
    rundir.write_config(run_dir / "config.toml", run.config)
    argv = ["experiment", "class-order", "--methods", "er", "--seeds", "0", "--out", out, *TINY]
    assert main(argv) == 2
    (error,) = capsys.readouterr().err.splitlines()
    assert "was trained with train.epochs = 2, this experiment asks for 1" in error
    assert error.endswith(": use another --out, or delete that run directory")
    assert not (run_dir / "results.json").exists()


# ---------------------------------------------------------------------------------------------
# table


def _write_run(run_dir: Path, config: dict, faa: float, ff: float | None, wall_time_s: float = 60.0) -> None:
    """A finished run directory in the real format (config.toml, results.json), of given FAA and
    FF: two tasks, accuracies (a00), (a10, a11) with (a10 + a11) / 2 = FAA and a00 - a10 = FF."""
    run_dir.mkdir(parents=True)
    rundir.write_config(run_dir / "config.toml", config)
    step = max(1.0, faa + (ff or 0.0) - 100.0)
    matrix = [[faa - step + (ff or 0.0)], [faa - step, faa + step]]
    results = {
        "method": config["run"]["method"],
        "benchmark": config["run"]["benchmark"],
        "seed": config["run"]["seed"],
        "buffer_size": config["method"].get("buffer_size", 0),
        "n_tasks": 2,
        "tasks_done": 2,
        "complete": True,
        "accuracy_matrix": matrix,
        "task_il_accuracy_matrix": matrix,
        "faa": faa,
        "ff": ff,
        "task_il_faa": faa,  # the same figure: the Task-IL column shows it
        "forgetting_defined": ff is not None,
        "wall_time_s": wall_time_s,
    }
    rundir.write_json(run_dir / "results.json", results)


# Ours on seq-cifar100 at buffer 500 (seeds 0-2), against the X-DER paper's Table 1 (no std, no run
# count: sigma is our sample std, SE = s / sqrt(3), 2 SE = 1.1547 s):
#   er        FAA 20, 22, 24: 22 ± 2 vs 22.10, Δ -0.10, 2 SE 2.3094: no;  FF 70, 75, 80: 75 ± 5 vs
#             73.64, Δ +1.36, 2 SE 5.7735: no
#   derpp     FAA 30, 31, 32: 31 ± 1 vs 38.25, Δ -7.25 > 1.1547: yes;   FF 50, 52, 54: 52 ± 2 vs
#             50.54, Δ +1.46 < 2.3094: no
#   xder-rpc  FAA 48, 49, 50: 49 ± 1 vs 48.53, Δ +0.47: no;           FF 20, 21, 22: 21 ± 1 vs
#             26.94, Δ -5.94: yes
#   sgd       FAA 9, 10, 11: 10 ± 1 vs 9.43, Δ +0.57: no;              FF 90, 90, 93: 91 ± sqrt(3) vs
#             89.82, Δ +1.18, SE 1, 2 SE 2: no
#   joint     seeds 0, 1 (seed 2 is being trained elsewhere): FAA 71, 73: 72 ± sqrt(2) vs 70.44,
#             Δ +1.56, SE sqrt(2)/sqrt(2) = 1, 2 SE 2: no; no FF (JT's "-")
HAND = {
    "er": ([20.0, 22.0, 24.0], [70.0, 75.0, 80.0]),
    "derpp": ([30.0, 31.0, 32.0], [50.0, 52.0, 54.0]),
    "xder-rpc": ([48.0, 49.0, 50.0], [20.0, 21.0, 22.0]),
    "sgd": ([9.0, 10.0, 11.0], [90.0, 90.0, 93.0]),
    "joint": ([71.0, 73.0], [None, None]),
}


def test_table_from_synthetic_run_directories_worked_out_by_hand(tmp_path: Path, capsys) -> None:
    out = tmp_path / "table"
    entries = table_entries("seq-cifar100", 500, methods=list(HAND))
    assert [e.name for e in entries] == ["joint", "sgd", "er", "derpp", "xder-rpc"]  # the paper's order
    runs = plan_table("seq-cifar100", 500, entries, [0, 1, 2], {})
    assert [r.name for r in runs[:6]] == ["joint-s0", "joint-s1", "joint-s2", "sgd-s0", "sgd-s1", "sgd-s2"]
    configs = {r.name: r.config for r in runs}
    assert configs["xder-rpc-m500-s1"]["run"]["preset"] == "paper:xder-rpc"
    assert configs["xder-rpc-m500-s1"]["method"]["future_heads"] == "rpc"
    assert configs["xder-rpc-m500-s1"]["method"]["buffer_size"] == 500
    assert configs["derpp-m500-s0"]["run"]["preset"] == "paper"
    assert configs["derpp-m500-s0"]["train"]["epochs"] == 50  # the paper's protocol
    assert (configs["sgd-s0"]["run"]["preset"], configs["joint-s0"]["run"]["preset"]) == ("paper", "none")
    assert "buffer_size" not in configs["sgd-s0"]["method"]
    for run in runs:
        if run.name == "joint-s2":
            continue
        faa, ff = HAND[run.tags["entry"]]
        _write_run(out / "runs" / run.name, run.config, faa[run.seed], ff[run.seed], 60.0 * (run.seed + 1))
    held = out / "runs" / "joint-s2"
    held.mkdir(parents=True)
    argv = ["experiment", "table", "--benchmark", "seq-cifar100", "--buffer-size", "500", "--out", str(out)]
    argv += ["--methods", "er,derpp,xder-rpc,sgd,joint"]
    with rundir.lock_run_dir(held, then="-"):  # the same table, started twice, is training it
        assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "15 runs, 14 already finished; training 1 in this process" in printed
    assert "[15/15] joint-s2 running elsewhere (held by process" in printed
    assert "note: 1 run(s) are being trained by another process" in printed
    assert [p.name for p in held.iterdir()] == [".lock"]

    summary = json.loads((out / "experiment.json").read_text())
    assert summary["files"] == ["experiment.json", "table.md", "table.csv", "table.png"]
    assert (out / "table.png").read_bytes().startswith(PNG)
    assert (summary["mode"], summary["buffer_size"]) == ("judged", 500)
    rows = {row["entry"]: row for row in summary["rows"]}
    expected = {  # (mean, std, published, difference, standard error, exceeds) per metric
        "er": ((22, 2, 22.10, -0.10, 2 / math.sqrt(3), False), (75, 5, 73.64, 1.36, 5 / math.sqrt(3), False)),
        "derpp": (
            (31, 1, 38.25, -7.25, 1 / math.sqrt(3), True),
            (52, 2, 50.54, 1.46, 2 / math.sqrt(3), False),
        ),
        "xder-rpc": (
            (49, 1, 48.53, 0.47, 1 / math.sqrt(3), False),
            (21, 1, 26.94, -5.94, 1 / math.sqrt(3), True),
        ),
        "sgd": ((10, 1, 9.43, 0.57, 1 / math.sqrt(3), False), (91, math.sqrt(3), 89.82, 1.18, 1.0, False)),
        "joint": ((72, math.sqrt(2), 70.44, 1.56, 1.0, False), None),
    }
    for entry, metrics in expected.items():
        for metric, values in zip(("faa", "ff"), metrics, strict=True):
            cell = rows[entry][metric]
            if values is None:
                assert (cell["mean"], cell["published"], cell["exceeds_two_se"]) == (None, None, None)
                continue
            mean, std, published, difference, standard_error, exceeds = values
            assert cell["mean"] == pytest.approx(mean)
            assert cell["std"] == pytest.approx(std)
            assert cell["published"] == published
            assert cell["difference"] == pytest.approx(difference)
            assert cell["standard_error"] == pytest.approx(standard_error)
            assert cell["sigma_from"] == "ours"
            assert cell["exceeds_two_se"] is exceeds, (entry, metric)
    assert (rows["joint"]["seeds_finished"], rows["joint"]["seeds"]) == (2, 3)
    assert rows["xder-rpc"]["preset"] == "paper:xder-rpc"
    assert rows["xder-rpc"]["row"] == "X-DER w/ RPC future heads"

    table = (out / "table.md").read_text()
    assert table.startswith("# Table: seq-cifar100, buffer 500\n")
    assert (
        "| method | preset | FAA | FAA published | Δ FAA | > 2 SE | FF | FF published | Δ FF | > 2 SE "
        "| Task-IL | n | one run |" in table  # the X-DER paper prints no Task-IL: ours alone
    )
    # one run: the mean wall time of the finished seeds, 1, 2 and 3 min -> 2.0 min (JT: 1 and 2)
    assert (
        "| derpp | paper | 31.00 ± 1.00 | 38.25 | -7.25 | yes | 52.00 ± 2.00 | 50.54 | +1.46 | no "
        "| 31.00 ± 1.00 | 3/3 | 2.0 min |" in table
    )
    joint = "| joint | none | 72.00 ± 1.41 | 70.44 | +1.56 | no | - | - | - | - | 72.00 ± 1.41 | 2/3 "
    joint += "| 1.5 min |"
    assert joint in table
    assert (rows["derpp"]["wall_time_s"], rows["joint"]["wall_time_s"]) == (120.0, 90.0)
    assert "σ the published std where the paper gives one, else our sample std" in table
    assert "- runs/joint-s2: running elsewhere (held by process" in table
    # The X-DER paper's claims about this table: with only five of its rows trained, each claim has
    # pairs it cannot check (its verdict: not checked), but the pairs it can are judged. FT below ER:
    # d = 10 - 22 = -12, SE = sqrt(1/3 + 4/3) = 1.291: holds.
    claims = {c["id"]: c for c in summary["claims"]}
    ids = ["xder-highest-faa", "xder-above-derpp", "xder-forgets-less", "xder-ablations", "ft-lowest"]
    assert list(claims) == [*ids, "jt-highest"]
    assert {c["verdict"] for c in claims.values()} == {"not checked"}
    assert claims["xder-above-derpp"]["missing"] == ["xder"]
    pairs = {p["other"]: p for p in claims["ft-lowest"]["pairs"]}
    assert pairs["er"]["difference"] == pytest.approx(-12.0)
    assert pairs["er"]["standard_error"] == pytest.approx(math.sqrt(5 / 3))
    assert [pairs[o]["verdict"] for o in ("joint", "er", "derpp", "xder-rpc")] == ["holds"] * 4
    assert pairs["bic"]["verdict"] == "not checked"
    assert "## The papers' claims, checked on this table" in table
    assert "- **not checked**: FT (fine-tuning) has the lowest FAA (X-DER paper, Sec. 5.2" in table
    lines = {r["entry"]: r for r in csv.DictReader(io.StringIO((out / "table.csv").read_text()))}
    assert list(lines) == ["joint", "sgd", "er", "derpp", "xder-rpc"]
    assert (lines["derpp"]["faa_difference"], lines["derpp"]["faa_exceeds_two_se"]) == ("-7.2500", "yes")
    assert lines["derpp"]["wall_time_s_mean"] == "120.0000"
    assert (lines["er"]["ff_standard_error"], lines["er"]["ff_exceeds_two_se"]) == ("2.8868", "no")
    assert (lines["joint"]["ff_published"], lines["joint"]["ff_exceeds_two_se"]) == ("", "")
    assert lines["er"]["source"].endswith("Table 1")
    assert lines["er"]["mode"] == "judged"

    # xder-run report over the same runs shows the published value beside each group.
    assert main(["report", str(out / "runs"), "--out", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "table.md").read_text()
    assert "31.00 ± 1.00 (52.00 ± 2.00) n=3; published 38.25 (50.54)" in report
    assert "49.00 ± 1.00 (21.00 ± 1.00) n=3; published 48.53 (26.94)" in report


def test_table_on_another_protocol_is_for_orientation_only(tmp_path: Path, capsys) -> None:
    out = tmp_path / "laptop"
    entries = table_entries("seq-cifar10", 200, "laptop", ["er", "derpp"])
    runs = plan_table("seq-cifar10", 200, entries, [0], {}, "laptop")
    for run, faa in zip(runs, (40.0, 60.0), strict=True):
        assert (run.config["run"]["protocol"], run.config["backbone"]["width"]) == ("laptop", 8)
        _write_run(out / "runs" / run.name, run.config, faa, 30.0)
    argv = [
        "experiment",
        "table",
        "--benchmark",
        "seq-cifar10",
        "--protocol",
        "laptop",
        "--buffer-size",
        "200",
    ]
    assert main([*argv, "--methods", "er,derpp", "--seeds", "0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        "note: protocol laptop is not the paper's: a quick table, the published values shown for " in printed
    )
    summary = json.loads((out / "experiment.json").read_text())
    assert summary["mode"] == "orientation"
    assert summary["rule"] is None
    for row in summary["rows"]:
        assert row["faa"]["published"] in (44.79, 64.88)
        assert (row["faa"]["difference"], row["faa"]["exceeds_two_se"]) == (None, None)
    table = (out / "table.md").read_text()
    assert table.startswith("# Table: seq-cifar10, protocol laptop (a quick table), buffer 200\n")
    assert "shown for orientation only" in table
    header = "| method | preset | FAA | FAA published | FF | FF published | Task-IL | Task-IL published | n |"
    assert header in table  # the DER paper prints Task-IL too
    # the laptop entry of tuned.toml; the DER paper's ER at buffer 200: 44.79 ± 1.86 (Task-IL 91.19 ± 0.94)
    assert "| er | tuned | 40.00 | 44.79 ± 1.86 | 30.00 | - | 40.00 | 91.19 ± 0.94 | 1/1 |" in table
    assert "Δ" not in table
    assert {r["mode"] for r in csv.DictReader(io.StringIO((out / "table.csv").read_text()))} == {
        "orientation"
    }


# seq-cifar10, laptop, two seeds per row: the DER paper's claims checked on our rows, by hand.
#   derpp-at-least-der  derpp 60, 62 against der 61, 63: d = -1, SE = sqrt(2/2 + 2/2) = 1.414; "at or
#                       above" fails only below -2 SE = -2.83: holds
#   der-above-er        der 62 - er 42 = 20, SE sqrt(1 + 4) = 2.236; derpp 61 - 42 = 19, margin
#                       19 / 2.236 = 8.50 (the smaller: the deciding pair): holds
#   ft-lowest           sgd 19 against icarl 20: d = -1, SE 1.414, within 2 SE: not separated
#   jt-highest          joint 51 against der 62: d = -11, 2 SE 2.83: does not hold (DER++'s -10 too;
#                       der's margin -7.78 is the worst)
#   regularisers-at-ft  ewc_on 19 - sgd 19 = 0, si 20 - 19 = +1 (SE 1.414 each: within 2 SE); lwf 23 -
#                       19 = +4 > 2 SE 2.83, above FT beyond two standard errors: does not hold
#   derpp-above-baselines  derpp 61 against gss 60: d = +1 within 2 SE 2.83 (every other baseline
#                       at least 24 below): not separated
CLAIM_ROWS = {
    "joint": [50.0, 52.0],
    "sgd": [18.0, 20.0],
    "ewc_on": [18.0, 20.0],
    "si": [19.0, 21.0],
    "lwf": [22.0, 24.0],
    "er": [40.0, 44.0],
    "gem": [30.0, 32.0],
    "agem": [20.0, 22.0],
    "icarl": [19.0, 21.0],
    "fdr": [25.0, 27.0],
    "gss": [59.0, 61.0],
    "hal": [35.0, 37.0],
    "der": [61.0, 63.0],
    "derpp": [60.0, 62.0],
}


def test_table_checks_the_papers_claims_worked_out_by_hand(tmp_path: Path, capsys) -> None:
    out = tmp_path / "claims"
    entries = table_entries("seq-cifar10", 200, "laptop")
    assert [e.name for e in entries] == list(CLAIM_ROWS)
    for run in plan_table("seq-cifar10", 200, entries, [0, 1], {}, "laptop"):
        _write_run(out / "runs" / run.name, run.config, CLAIM_ROWS[run.tags["entry"]][run.seed], 30.0)
    argv = ["experiment", "table", "--benchmark", "seq-cifar10", "--protocol", "laptop"]
    assert main([*argv, "--buffer-size", "200", "--seeds", "0,1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    claims = {c["id"]: c for c in json.loads((out / "experiment.json").read_text())["claims"]}
    assert {name: c["verdict"] for name, c in claims.items()} == {
        "derpp-at-least-der": "holds",
        "der-above-er": "holds",
        "ft-lowest": "not separated",
        "jt-highest": "does not hold",
        "regularisers-at-ft": "does not hold",
        "derpp-above-baselines": "not separated",
    }
    deciding = {name: c["deciding"] for name, c in claims.items()}
    assert (
        deciding["derpp-at-least-der"]["difference"],
        deciding["derpp-at-least-der"]["standard_error"],
    ) == (
        pytest.approx(-1.0),
        pytest.approx(math.sqrt(2)),
    )
    assert (deciding["der-above-er"]["row"], deciding["der-above-er"]["margin"]) == (
        "derpp",
        pytest.approx(19 / math.sqrt(5)),
    )
    assert deciding["ft-lowest"]["other"] == "icarl"
    assert (deciding["jt-highest"]["other"], deciding["jt-highest"]["margin"]) == (
        "der",
        pytest.approx(-11 / math.sqrt(2)),
    )
    assert deciding["regularisers-at-ft"]["row"] == "lwf"
    assert deciding["derpp-above-baselines"]["other"] == "gss"
    assert all(not c["missing"] for c in claims.values())
    line = (
        "- **does not hold**: JT (JOINT) has the highest FAA (DER paper, Table 2: JOINT is the upper bound). "
        "FAA, joint above der? 51.00 (n 2) against 62.00 (n 2): difference -11.00, 2 SE 2.83."
    )
    assert line in (out / "table.md").read_text()
    assert line in printed  # the table, claims included, is printed too


def test_table_on_seq_digits_trains_and_tabulates_with_nothing_published(tmp_path: Path, capsys) -> None:
    out = tmp_path / "digits"
    argv = ["experiment", "table", "--benchmark", "seq-digits", "--buffer-size", "200", "--seeds", "0"]
    argv += ["--methods", "sgd,derpp", "--out", str(out), *TINY]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == (
        "note: no published results for seq-digits: training the X-DER paper's Table 1 methods "
        "(sgd, derpp) and tabulating ours alone"
    )
    assert "2 runs, 0 already finished; training 2 in this process" in printed
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["derpp-m200-s0", "sgd-s0"]
    summary = json.loads((out / "experiment.json").read_text())
    assert summary["mode"] == "ours only"
    rows = {row["entry"]: row for row in summary["rows"]}
    for name in ("sgd-s0", "derpp-m200-s0"):
        results = _results(out / "runs" / name)
        row = rows[name.split("-")[0]]
        assert row["faa"]["mean"] == pytest.approx(results["faa"])
        assert row["ff"]["mean"] == pytest.approx(results["ff"])
        assert row["faa"]["published"] is None
    assert rows["derpp"]["preset"] == "tuned"
    table = (out / "table.md").read_text()
    assert "No published results for seq-digits" in table
    assert "| method | preset | FAA | FF | Task-IL | n |" in table
    # The overrides of every run (TINY's --set) are named: this is not the protocol's own table.
    # (run.device places the runs, it does not configure them: not named)
    assert table.startswith(
        "# Table: seq-digits, buffer 200, with overrides\n\n**Overrides** (`--set`, every run): "
        "`train.epochs=1, backbone.width=4`: these runs are not the protocol's own settings.\n"
    )
    lines = list(csv.DictReader(io.StringIO((out / "table.csv").read_text())))
    assert {line["overrides"] for line in lines} == {"train.epochs=1, backbone.width=4"}
    assert (
        f"| sgd | none | {rows['sgd']['faa']['mean']:.2f} | {rows['sgd']['ff']['mean']:.2f} "
        f"| {rows['sgd']['task_il']['mean']:.2f} | 1/1 |" in table
    )
    assert (out / "table.png").read_bytes().startswith(PNG)

    # A table at another buffer size in the same folder shares the buffer-less runs.
    argv[argv.index("200")] = "20"
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "2 runs, 1 already finished; training 1 in this process" in printed
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["derpp-m20-s0", "derpp-m200-s0", "sgd-s0"]


# seq-digits at buffer 200 with a method of the DER paper's table beside the X-DER paper's: nothing is
# published for seq-digits, so ours alone. Seeds 0-1 (synthetic run directories: nothing trains):
#   sgd    FAA 19, 21 -> 20.00 ± 1.41;  derpp 90, 94 -> 92.00 ± 2.83;  gem 60, 61 -> 60.50 ± 0.71
DIGITS = {"sgd": [19.0, 21.0], "derpp": [90.0, 94.0], "gem": [60.0, 61.0]}


def test_table_on_seq_digits_takes_any_registered_method(tmp_path: Path, capsys) -> None:
    out = tmp_path / "digits"
    entries = table_entries("seq-digits", 200, methods=["sgd", "gem", "derpp"])
    assert [e.name for e in entries] == ["sgd", "derpp", "gem"]  # the X-DER table's rows, then the others
    for run in plan_table("seq-digits", 200, entries, [0, 1], {}):
        _write_run(out / "runs" / run.name, run.config, DIGITS[run.tags["entry"]][run.seed], 10.0)
    argv = ["experiment", "table", "--benchmark", "seq-digits", "--buffer-size", "200", "--seeds", "0,1"]
    assert main([*argv, "--methods", "sgd,gem,derpp", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[:2] == [
        "note: no published results for seq-digits: training the X-DER paper's Table 1 methods (sgd, derpp) "
        "and gem and tabulating ours alone",
        "note: no preset has values of sgd, gem for seq-digits at buffer 200: preset none, the benchmark's "
        "protocol and the method's own defaults",
    ]
    assert "6 runs, 6 already finished; training 0 in this process" in printed
    summary = json.loads((out / "experiment.json").read_text())
    assert (summary["mode"], summary["paper"], summary["claims"]) == ("ours only", "x-der", [])
    rows = {row["entry"]: row for row in summary["rows"]}
    assert rows["gem"]["faa"]["mean"] == pytest.approx(60.5)
    assert rows["gem"]["faa"]["std"] == pytest.approx(math.sqrt(0.5))
    assert (rows["gem"]["preset"], rows["derpp"]["preset"]) == ("none", "tuned")
    table = (out / "table.md").read_text()
    assert "Rows: the methods of the X-DER paper's Table 1, and gem." in table
    assert "No published results for seq-digits: ours alone." in table
    assert "the benchmark's protocol and the method's own defaults, for sgd, gem." in table
    assert "| gem | none | 60.50 ± 0.71 | 10.00 ± 0.00 | 60.50 ± 0.71 | 2/2 | 1.0 min |" in table
    assert "claims" not in table  # no claim is about seq-digits
    assert [line["entry"] for line in csv.DictReader(io.StringIO((out / "table.csv").read_text()))] == [
        "sgd",
        "derpp",
        "gem",
    ]


DER_PAPER = [
    "joint",
    "sgd",
    "ewc_on",
    "si",
    "lwf",
    "er",
    "gem",
    "agem",
    "icarl",
    "fdr",
    "gss",
    "hal",
    "der",
    "derpp",
]


def test_table_on_seq_digits_with_the_der_papers_methods(tmp_path: Path, capsys) -> None:
    """--paper der: the DER paper's Table 2 rows on a benchmark it never ran; every row FAA 50 + its
    index, seed 0 only (so no std, n 1)."""
    entries = table_entries("seq-digits", 200, paper="der")
    assert [e.name for e in entries] == DER_PAPER
    assert all(e.published is None and e.name == e.method for e in entries)
    out = tmp_path / "der"
    runs = plan_table("seq-digits", 200, entries, [0], {})
    assert {r.name: r.config["run"]["preset"] for r in runs}["gem-m200-s0"] == "none"
    for run in runs:
        _write_run(out / "runs" / run.name, run.config, 50.0 + DER_PAPER.index(run.tags["entry"]), 5.0)
    argv = ["experiment", "table", "--benchmark", "seq-digits", "--buffer-size", "200", "--seeds", "0"]
    assert main([*argv, "--paper", "der", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == (
        "note: no published results for seq-digits: training the DER paper's Table 2 methods "
        f"({', '.join(DER_PAPER)}) and tabulating ours alone"
    )
    summary = json.loads((out / "experiment.json").read_text())
    assert (summary["mode"], summary["paper"], summary["paper_name"]) == (
        "ours only",
        "der",
        "DER paper's Table 2",
    )
    assert [r["entry"] for r in summary["rows"]] == DER_PAPER
    table = (out / "table.md").read_text()
    assert "Rows: the methods of the DER paper's Table 2." in table
    assert "| gem | none | 56.00 | 5.00 | 56.00 | 1/1 | 1.0 min |" in table
    assert "| derpp | tuned | 63.00 | 5.00 | 63.00 | 1/1 | 1.0 min |" in table


def test_a_row_the_published_table_lacks_shows_a_dash(tmp_path: Path, capsys) -> None:
    """seq-cifar10 at buffer 200, ER (published 44.79 ± 1.86) and X-DER (not in the DER paper's
    table), seeds 0-1: ER 44, 46 -> 45.00 ± 1.41, Δ +0.21, σ the published 1.86, SE 1.86/sqrt(2)
    = 1.315: no; X-DER 60, 62 -> 61.00 ± 1.41 beside -. The DER paper's claims name ER but not
    X-DER: DER and DER++ above ER is not checked (they were not trained)."""
    out = tmp_path / "mixed"
    entries = table_entries("seq-cifar10", 200, methods=["xder", "er"])
    assert [(e.name, e.published is not None) for e in entries] == [("er", True), ("xder", False)]
    values = {"er": [44.0, 46.0], "xder": [60.0, 62.0]}
    for run in plan_table("seq-cifar10", 200, entries, [0, 1], {}):
        _write_run(out / "runs" / run.name, run.config, values[run.tags["entry"]][run.seed], 30.0)
    argv = ["experiment", "table", "--benchmark", "seq-cifar10", "--buffer-size", "200", "--seeds", "0,1"]
    assert main([*argv, "--methods", "xder,er", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        "note: nothing published for xder on seq-cifar10 at buffer 200: ours alone in those rows "
        "(- in the published columns)" in printed
    )
    summary = json.loads((out / "experiment.json").read_text())
    assert summary["mode"] == "judged"
    rows = {row["entry"]: row for row in summary["rows"]}
    assert rows["er"]["faa"]["difference"] == pytest.approx(0.21)
    assert rows["er"]["faa"]["standard_error"] == pytest.approx(1.86 / math.sqrt(2))
    assert rows["xder"]["faa"]["published"] is None
    table = (out / "table.md").read_text()
    assert "Rows: the methods of the DER paper's Table 2, and xder." in table
    assert "Not in the published table, so - in its columns: xder." in table
    assert (
        "| xder | none | 61.00 ± 1.41 | - | - | - | 30.00 ± 0.00 | - | - | - | 61.00 ± 1.41 | - | - | - |"
        in table
    )
    claims = {c["id"]: c for c in summary["claims"]}
    assert claims["der-above-er"]["verdict"] == "not checked"
    assert "xder" not in json.dumps(summary["claims"])


def test_table_usage_errors_are_one_line(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "out")
    bad = [
        (["--benchmark", "nope", "--buffer-size", "200"], "unknown benchmark 'nope': choose one of "),
        (
            ["--benchmark", "seq-cifar10", "--buffer-size", "300"],
            "seq-cifar10 has no published table at buffer size 300: the published ones are at 200, 500, 5120",
        ),
        (
            ["--benchmark", "seq-cifar10", "--buffer-size", "200", "--methods", "xder-rpc"],
            "--methods: no method registers 'xder-rpc' and the DER paper's Table 2 has no row of that name; "
            "its rows are joint, sgd, ewc_on, si, lwf, er, gem",
        ),
        (
            ["--benchmark", "seq-digits", "--buffer-size", "200", "--methods", "sgd,nope"],
            "--methods: no method registers 'nope' and the X-DER paper's Table 1 has no row of that name",
        ),
        (
            ["--benchmark", "seq-digits", "--buffer-size", "200", "--paper", "mammoth"],
            "--paper 'mammoth': no such paper; choose one of x-der, der",
        ),
        (["--benchmark", "seq-digits"], "experiment table needs --buffer-size M"),
        (["--buffer-size", "0"], "--buffer-size must be >= 1"),
        (["--buffer-size", "200", "--set", "method.buffer_size=20"], "use --buffer-size"),
        (["--buffer-size", "200", "--pairs", "1"], "--pairs is an option of experiment flatness"),
    ]
    for flags, _ in bad:
        assert main(["experiment", "table", *flags, "--out", out]) == 2, flags
    assert main(["experiment", "class-order", "--buffer-size", "200", "--out", out]) == 2
    assert main(["experiment", "class-order", "--paper", "der", "--out", out]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(errors) == len(bad) + 2
    assert all(line.startswith("xder-run experiment: error: ") for line in errors)
    for (flags, message), line in zip(bad, errors, strict=False):
        assert message in line, (flags, line)
    assert "--buffer-size is an option of experiment table, not of class-order" in errors[-2]
    assert "--paper is an option of experiment table, not of class-order" in errors[-1]
    assert not (tmp_path / "out").exists()  # nothing planned, nothing created


@pytest.mark.parametrize(
    ("benchmark", "buffer_size", "why"),
    [
        (
            "perm-mnist",
            200,
            "No Task-IL column: perm-mnist is domain-il (every task holds the same classes, so a task's own "
            "classes are all of them); FAA is its Domain-IL accuracy.",
        ),
        (
            "mnist-360",
            1000,
            "No Task-IL column: mnist-360 is general (one stream without task boundaries, a single task to "
            "the learner); FAA is the accuracy over every class at the stream's end.",
        ),
    ],
)
def test_a_domain_il_or_general_table_has_no_task_il_column(
    tmp_path: Path, capsys, benchmark: str, buffer_size: int, why: str
) -> None:
    """--paper der on the DER paper's Domain-IL and general benchmarks (no figure transcribed): the
    rows its preset holds, each with its paper entry; every row FAA 50 + its index, FF 5, seed 0;
    the runs' Task-IL figures (written anyway) appear nowhere, and one line says why."""
    entries = table_entries(benchmark, buffer_size, paper="der")
    names = [e.name for e in entries]
    out = tmp_path / benchmark
    runs = plan_table(benchmark, buffer_size, entries, [0], {})
    assert {r.config["run"]["preset"] for r in runs} == {"paper"}
    for run in runs:
        _write_run(out / "runs" / run.name, run.config, 50.0 + names.index(run.tags["entry"]), 5.0)
    argv = [
        "experiment",
        "table",
        "--benchmark",
        benchmark,
        "--buffer-size",
        str(buffer_size),
        "--seeds",
        "0",
    ]
    assert main([*argv, "--paper", "der", "--out", str(out)]) == 0
    capsys.readouterr()
    summary = json.loads((out / "experiment.json").read_text())
    assert (summary["mode"], summary["paper"]) == ("ours only", "der")
    assert summary["scenario"] == ("domain-il" if benchmark == "perm-mnist" else "general")
    assert "Task-IL" not in summary["metric"]
    table = (out / "table.md").read_text()
    assert why in table.splitlines()
    assert "| method | preset | FAA | FF | n | one run |" in table
    derpp = 50 + names.index("derpp")
    assert f"| derpp | paper | {derpp}.00 | 5.00 | 1/1 | 1.0 min |" in table
    assert "Task-IL FAA" not in table
    assert f"No published results for {benchmark} (the DER paper's are not transcribed): ours alone." in table
    assert "Rows:" not in table  # every row is one the DER paper ran there (agem_r and mer too)
