"""Reports over many runs, from hand-made run records (no training): grouping, statistics worked
out by hand, the exact Markdown and CSV, buffer-less methods, the missing/incomplete list, plots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from xder_eval import (
    GroupKey,
    RepeatedSeed,
    ReportColumn,
    RunRecord,
    build_report,
    count_each_seed_once,
    group_runs,
    plot_report_curves,
    plot_report_matrix,
    report_csv,
    report_dict,
    report_markdown,
    report_problems,
    summarize_group,
)

PNG = b"\x89PNG\r\n\x1a\n"

# Task-IL matrices are square (row t: every task after training task t).
TIL = [[60.0, 50.0, 50.0], [70.0, 80.0, 50.0], [70.0, 80.0, 90.0]]  # FAA 80, FF (70-70 + 80-80)/2 = 0


def record(
    method: str,
    seed: int,
    cil: list[list[float]] | None,
    *,
    benchmark: str = "seq-a",
    buffer: int = 200,
    preset: str = "none",
    til: list[list[float]] | None = None,
    complete: bool = True,
    train: dict[str, Any] | None = None,
    device: str = "cpu",
    path: str | None = None,
    buffered: bool | None = None,
) -> RunRecord:
    """A run as ``xder-run train`` leaves it: config sections and results.json (None: no file).
    ``buffered``: the method keeps a buffer (method.buffer_size in its config; default: buffer > 0)."""
    config = {
        "run": {
            "method": method,
            "benchmark": benchmark,
            "seed": seed,
            "device": device,
            "data_root": "data",
            "preset": preset,
        },
        "train": {"epochs": 1, "lr": 0.05, **(train or {})},
        "backbone": {"name": "resnet18-cifar", "width": 4},
        "method": {"buffer_size": buffer} if (bool(buffer) if buffered is None else buffered) else {},
    }
    results = None
    if cil is not None:
        results = {
            "method": method,
            "benchmark": benchmark,
            "seed": seed,
            "buffer_size": buffer,
            "complete": complete,
            "n_tasks": 3,
            "tasks_done": len(cil),
            "accuracy_matrix": cil,
            "task_il_accuracy_matrix": til or TIL[: len(cil)],
        }
    return RunRecord(path or f"runs/{method}-{benchmark}-m{buffer}-s{seed}", config, results)


# ER, seeds 0-2: FAA 60/70/80 (mean 70, sample std 10); FF 10/20/30 (mean 20, std 10).
ER = {
    0: [[60.0], [55.0, 70.0], [50.0, 60.0, 70.0]],  # FF: (60-50 + 70-60)/2 = 10
    1: [[80.0], [70.0, 90.0], [60.0, 70.0, 80.0]],  # FF: (80-60 + 90-70)/2 = 20
    2: [[100.0], [90.0, 100.0], [60.0, 80.0, 100.0]],  # FF: (100-60 + 100-80)/2 = 30
}
# Task-IL for ER: FAA 80/85/90 (mean 85, std 5); FF 0/7.5/10.
ER_TIL = {
    0: TIL,
    1: [[80.0, 50.0, 50.0], [90.0, 85.0, 50.0], [75.0, 85.0, 95.0]],  # FF: (90-75 + 85-85)/2 = 7.5
    2: [[100.0, 50.0, 50.0], [100.0, 90.0, 50.0], [80.0, 90.0, 100.0]],  # FF: (100-80 + 0)/2 = 10
}
# FT (sgd, no buffer), seeds 0-1: FAA 30/32 (mean 31, std sqrt(2)); FF 100/95 (97.5, 5/sqrt(2)).
SGD = {
    0: [[100.0], [0.0, 100.0], [0.0, 0.0, 90.0]],
    1: [[90.0], [0.0, 100.0], [0.0, 0.0, 96.0]],
}
# DER++ at buffer 500, seed 0 only: FAA 60, FF (90-40 + 90-60)/2 = 40.
DERPP = [[90.0], [50.0, 90.0], [40.0, 60.0, 80.0]]


def table_records() -> list[RunRecord]:
    return [
        *(record("er", s, ER[s], til=ER_TIL[s]) for s in (0, 1, 2)),
        *(record("sgd", s, SGD[s], buffer=0) for s in (0, 1)),
        record("derpp", 0, DERPP, buffer=500),
        record("derpp", 1, DERPP[:2], buffer=500, complete=False),
        record("derpp", 2, None, buffer=500),
        RunRecord("runs/broken", None, None, error="unreadable results.json: Expecting value"),
    ]


def sample_std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


# ---------------------------------------------------------------------------------------------
# Statistics


def test_group_statistics_by_hand() -> None:
    key = GroupKey("seq-a", 200, "er", "none")
    runs = [record("er", s, ER[s], til=ER_TIL[s]) for s in (2, 0, 1)]
    group = summarize_group(key, runs)
    assert group.seeds == (0, 1, 2)
    assert group.paths == tuple(f"runs/er-seq-a-m200-s{s}" for s in (0, 1, 2))
    c = group.class_il
    assert c.faa.values == pytest.approx((60.0, 70.0, 80.0))
    assert (c.faa.mean, c.faa.std, c.faa.n) == (pytest.approx(70.0), pytest.approx(10.0), 3)
    assert (c.ff.mean, c.ff.std) == (pytest.approx(20.0), pytest.approx(10.0))
    # Average accuracy on seen tasks per seed: [60, 62.5, 60], [80, 80, 70], [100, 95, 80].
    assert c.curve_mean == pytest.approx((80.0, (62.5 + 80 + 95) / 3, 70.0))
    assert c.curve_std == pytest.approx((20.0, sample_std([62.5, 80.0, 95.0]), 10.0))
    assert c.matrix_mean == (
        pytest.approx((80.0,)),
        pytest.approx((215 / 3, 260 / 3)),
        pytest.approx((170 / 3, 70.0, 250 / 3)),
    )
    t = group.task_il
    assert (t.faa.mean, t.faa.std) == (pytest.approx(85.0), pytest.approx(5.0))
    assert t.ff.values == pytest.approx((0.0, 7.5, 10.0))
    assert t.ff.mean == pytest.approx(17.5 / 3)
    assert t.ff.std == pytest.approx(sample_std([0.0, 7.5, 10.0]))
    assert t.matrix_mean[0] == pytest.approx((80.0, 50.0, 50.0))  # square: unseen tasks too


def test_one_seed_has_no_std_and_one_task_no_forgetting() -> None:
    group = summarize_group(GroupKey("seq-a", 200, "er", "none"), [record("er", 0, [[40.0]])])
    assert group.class_il.faa.mean == pytest.approx(40.0)
    assert group.class_il.faa.std is None
    assert group.class_il.ff.mean is None
    assert group.class_il.curve_std == (None,)
    report = build_report([record("er", 0, [[40.0]])])
    assert "| er | none | 40.00 (-) n=1 |" in report_markdown(report)


def test_summarize_group_refuses_incomplete_runs() -> None:
    with pytest.raises(ValueError, match="not a complete run"):
        summarize_group(GroupKey("seq-a", 200, "er", "none"), [record("er", 0, ER[0][:2], complete=False)])


# ---------------------------------------------------------------------------------------------
# Grouping


def test_groups_by_benchmark_buffer_method_and_preset() -> None:
    groups, problems = group_runs(
        [
            record("er", 0, ER[0]),
            record("er", 1, ER[1], device="cuda:1"),  # where it trained: the caller's ignore
            record("er", 0, ER[0], buffer=500),
            record("er", 0, ER[0], benchmark="seq-b"),
            record("er", 0, ER[0], preset="tuned"),
            record("sgd", 0, SGD[0], buffer=0),
        ],
        ignore={"run.device"},
    )
    assert problems == []
    assert {key: len(runs) for key, runs in groups.items()} == {
        GroupKey("seq-a", 200, "er", "none"): 2,
        GroupKey("seq-a", 500, "er", "none"): 1,
        GroupKey("seq-b", 200, "er", "none"): 1,
        GroupKey("seq-a", 200, "er", "tuned"): 1,
        GroupKey("seq-a", 0, "sgd", "none", buffered=False): 1,
    }


def test_a_replay_method_at_buffer_0_has_a_column_of_its_own() -> None:
    # ER with --buffer-size 0 is ER with an empty buffer, not a buffer-less method: its own column
    # "m0", beside ER at 200; FT (no buffer at all) fills both.
    runs = [
        record("er", 0, ER[0], buffer=0, buffered=True),
        record("er", 0, ER[1]),
        record("sgd", 0, SGD[0], buffer=0),
    ]
    report = build_report(runs)
    assert [c.header for c in report.columns] == ["seq-a m0", "seq-a m200"]
    er = next(r for r in report.rows if r.method == "er")
    sgd = next(r for r in report.rows if r.method == "sgd")
    at_0, at_200 = report.columns
    assert report.cell(er, at_0).class_il.faa.mean == 60.0  # ER[0]: last row 50, 60, 70
    assert report.cell(er, at_200).class_il.faa.mean == 70.0  # ER[1]: 60, 70, 80
    assert report.cell(sgd, at_0) is report.cell(sgd, at_200) is not None
    table = report_markdown(report)
    assert "| seq-a m0 | seq-a m200 |" in table


def test_another_protocol_is_another_benchmark_column() -> None:
    laptop = record("er", 0, ER[0])
    laptop.config["run"]["protocol"] = "laptop"
    paper = record("er", 0, ER[0])
    paper.config["run"]["protocol"] = "paper"  # as runs recorded the full protocol before its rename
    full = record("er", 2, ER[2])
    full.config["run"]["protocol"] = "full"  # as every run records it now
    legacy = record("er", 1, ER[1])  # runs from before protocols existed: the full protocol
    groups, problems = group_runs([laptop, paper, full, legacy])
    assert problems == []
    assert {key: len(runs) for key, runs in groups.items()} == {
        GroupKey("seq-a (laptop)", 200, "er", "none"): 1,
        GroupKey("seq-a", 200, "er", "none"): 3,
    }
    assert "| seq-a (laptop) m200 |" in report_markdown(build_report([laptop, paper, legacy]))


def test_keys_the_caller_ignores_tell_no_runs_apart() -> None:
    logged = record("er", 1, ER[1])
    logged.config["run"]["loggers"] = ["tensorboard", "wandb"]  # observes the run, configures nothing
    logged.config["run"]["data_device"] = "host"  # where its data lived
    ignore = {"run.loggers", "run.data_device"}
    groups, problems = group_runs([record("er", 0, ER[0]), logged], ignore)
    assert problems == []
    assert {key: len(runs) for key, runs in groups.items()} == {GroupKey("seq-a", 200, "er", "none"): 2}
    # Without being told, the report keeps them apart: a key it does not know is a setting.
    groups, _ = group_runs([record("er", 0, ER[0]), logged])
    assert len(groups) == 2


def test_differently_configured_runs_are_not_merged() -> None:
    records = [
        record("er", 0, ER[0], train={"epochs": 1}),
        record("er", 1, ER[1], train={"epochs": 1}),
        record("er", 0, ER[1], train={"epochs": 5}),
        # Another benchmark's single configuration is labelled with the same key, so that rows
        # line up where the setting agrees.
        record("er", 0, ER[2], benchmark="seq-b", train={"epochs": 5}),
        # A setting that only differs between benchmarks labels nothing.
        record("sgd", 0, SGD[0], buffer=0, train={"lr": 0.1}),
        record("sgd", 0, SGD[0], buffer=0, benchmark="seq-b", train={"lr": 0.2}),
    ]
    groups, _ = group_runs(records)
    assert sorted(groups) == [
        GroupKey("seq-a", 0, "sgd", "none", "", buffered=False),
        GroupKey("seq-a", 200, "er", "none", "train.epochs=1"),
        GroupKey("seq-a", 200, "er", "none", "train.epochs=5"),
        GroupKey("seq-b", 0, "sgd", "none", "", buffered=False),
        GroupKey("seq-b", 200, "er", "none", "train.epochs=5"),
    ]
    report = build_report(records)
    assert [row.name for row in report.rows] == [
        "sgd",
        "er [none; train.epochs=1]",
        "er [none; train.epochs=5]",
    ]
    assert report_markdown(report).splitlines()[2:7] == [
        "| method | preset | settings | seq-a m200 | seq-b m200 |",
        "|---|---|---|:-:|:-:|",
        "| sgd | none |  | 30.00 (100.00) n=1 | 30.00 (100.00) n=1 |",
        "| er | none | train.epochs=1 | 65.00 ± 7.07 (15.00 ± 7.07) n=2 |  |",
        "| er | none | train.epochs=5 | 70.00 (20.00) n=1 | 80.00 (30.00) n=1 |",
    ]


def test_a_key_missing_from_one_config_labels_it_unset() -> None:
    plain = record("er", 0, ER[0])
    extra = record("er", 1, ER[1])
    extra.config["train"]["warmup_epochs"] = 2  # type: ignore[index]
    groups, _ = group_runs([plain, extra])
    assert sorted(k.settings for k in groups) == ["train.warmup_epochs=2", "train.warmup_epochs=unset"]


# ---------------------------------------------------------------------------------------------
# The table


def test_markdown_table_exactly() -> None:
    report = build_report(table_records())
    assert [c.header for c in report.columns] == ["seq-a m200", "seq-a m500"]
    assert report_markdown(report) == (
        "Class-IL final average accuracy FAA (final forgetting FF), %: mean ± sample standard deviation "
        "over n seeds.\n"
        "\n"
        "| method | preset | seq-a m200 | seq-a m500 |\n"
        "|---|---|:-:|:-:|\n"
        "| sgd | none | 31.00 ± 1.41 (97.50 ± 3.54) n=2 | 31.00 ± 1.41 (97.50 ± 3.54) n=2 |\n"
        "| er | none | 70.00 ± 10.00 (20.00 ± 10.00) n=3 |  |\n"
        "| derpp | none |  | 60.00 (40.00) n=1 |\n"
        "\n"
        "Missing or incomplete:\n"
        "\n"
        "- runs/derpp-seq-a-m500-s1: incomplete, 2 of 3 tasks done (derpp on seq-a m500 seed 1)\n"
        "- runs/derpp-seq-a-m500-s2: no results.json, no task finished (derpp on seq-a m500 seed 2)\n"
        "- runs/broken: unreadable results.json: Expecting value (? on ? seed ?)\n"
        "- sgd [none] on seq-a: seed 2 missing (complete: 0, 1)\n"
        "- derpp [none] on seq-a m500: seeds 1, 2 missing (complete: 0)\n"
    )


def test_markdown_task_il() -> None:
    report = build_report([record("er", s, ER[s], til=ER_TIL[s]) for s in (0, 1, 2)])
    til_ff = f"{17.5 / 3:.2f} ± {sample_std([0.0, 7.5, 10.0]):.2f}"
    assert report_markdown(report, task_il=True) == (
        "Task-IL final average accuracy FAA (final forgetting FF), %: mean ± sample standard deviation "
        "over n seeds.\n"
        "\n"
        "| method | preset | seq-a m200 |\n"
        "|---|---|:-:|\n"
        f"| er | none | 85.00 ± 5.00 ({til_ff}) n=3 |\n"
    )
    assert til_ff == "5.83 ± 5.20"


def test_csv_exactly() -> None:
    report = build_report(table_records())
    s2 = f"{math.sqrt(2):.4f}"
    ff_std = f"{5 / math.sqrt(2):.4f}"
    til_ff_std = f"{sample_std([0.0, 7.5, 10.0]):.4f}"
    assert report_csv(report).splitlines() == [
        "benchmark,scenario,buffer,method,preset,settings,n,seeds,missing_seeds,faa_mean,faa_std,ff_mean,ff_std,"
        "task_il_faa_mean,task_il_faa_std,task_il_ff_mean,task_il_ff_std,runs,"
        "published_faa,published_faa_std,published_ff,published_ff_std,published_seeds,published_source",
        f"seq-a,class-il,0,sgd,none,,2,0;1,2,31.0000,{s2},97.5000,{ff_std},80.0000,0.0000,0.0000,0.0000,"
        "runs/sgd-seq-a-m0-s0;runs/sgd-seq-a-m0-s1,,,,,,",
        f"seq-a,class-il,200,er,none,,3,0;1;2,,70.0000,10.0000,20.0000,10.0000,85.0000,5.0000,5.8333,{til_ff_std},"
        "runs/er-seq-a-m200-s0;runs/er-seq-a-m200-s1;runs/er-seq-a-m200-s2,,,,,,",
        "seq-a,class-il,500,derpp,none,,1,0,1;2,60.0000,,40.0000,,80.0000,,0.0000,,runs/derpp-seq-a-m500-s0,,,,,,",
    ]


def test_bufferless_methods_fill_every_buffer_column_of_their_benchmark() -> None:
    report = build_report(
        [
            record("sgd", 0, SGD[0], buffer=0),
            record("er", 0, ER[0], buffer=200),
            record("er", 0, ER[0], buffer=2000),
            record("sgd", 0, SGD[1], buffer=0, benchmark="seq-b"),
            record("joint", 0, ER[2], buffer=0, benchmark="seq-b"),
        ]
    )
    assert [c.header for c in report.columns] == ["seq-a m200", "seq-a m2000", "seq-b"]
    assert [row.method for row in report.rows] == ["joint", "sgd", "er"]  # the paper's order
    sgd = next(row for row in report.rows if row.method == "sgd")
    cells = [report.cell(sgd, column) for column in report.columns]
    assert cells[0] is cells[1]  # the same buffer-less group in both buffer columns
    assert cells[0].key == GroupKey("seq-a", 0, "sgd", "none", buffered=False)
    assert cells[2].key == GroupKey("seq-b", 0, "sgd", "none", buffered=False)
    joint = next(row for row in report.rows if row.method == "joint")
    assert report.cell(joint, ReportColumn("seq-a", 200)) is None
    assert "| joint | none |  |  | 80.00 (30.00) n=1 |" in report_markdown(report)
    assert report.problems == ()


# ---------------------------------------------------------------------------------------------
# Missing, incomplete, seeds


def test_missing_and_incomplete_runs_are_listed_and_excluded() -> None:
    report = build_report(table_records())
    problems = {(p.kind, p.path): p for p in report.problems}
    incomplete = problems[("incomplete", "runs/derpp-seq-a-m500-s1")]
    assert (incomplete.tasks_done, incomplete.n_tasks, incomplete.seed) == (2, 3, 1)
    assert ("missing", "runs/derpp-seq-a-m500-s2") in problems
    assert ("unreadable", "runs/broken") in problems
    derpp = next(g for g in report.groups if g.key.method == "derpp")
    assert derpp.seeds == (0,)  # the incomplete run is not averaged
    assert derpp.missing_seeds == (1, 2)
    assert report_problems(report) == [p.message for p in report.problems]


def test_malformed_results_are_listed_not_raised() -> None:
    bad_matrix = record("er", 0, [[50.0], [1.0]])  # row 1 lacks task 1
    no_seed = record("er", 1, ER[1])
    del no_seed.results["seed"]  # type: ignore[attr-defined]
    del no_seed.config["run"]["seed"]  # type: ignore[index]
    report = build_report([bad_matrix, no_seed, record("er", 2, ER[2])])
    assert [p.kind for p in report.problems[:2]] == ["unreadable", "unreadable"]
    assert "no valid accuracy_matrix" in report.problems[0].message
    assert "seed unknown" in report.problems[1].message
    assert [g.seeds for g in report.groups] == [(2,)]


def test_a_seed_run_twice_counts_once() -> None:
    report = build_report([record("er", 0, ER[1], path="runs/b"), record("er", 0, ER[0], path="runs/a")])
    (problem,) = report.problems
    assert problem.kind == "duplicate_seed"
    assert (problem.seed, problem.seeds) == (0, (0,))
    assert problem.message == (
        "er [none] on seq-a m200: seed 0 run 2 times, counted once: runs/a counts, set aside runs/b "
        "(the first run directory by folder name counts)"
    )
    (group,) = report.groups
    assert (group.seeds, group.paths, group.n) == ((0,), ("runs/a",), 1)
    assert group.repeated == (RepeatedSeed(0, "runs/a", ("runs/b",)),)
    assert group.class_il.faa.values == (60.0,)  # ER[0]'s FAA alone: one seed, no std
    assert "| er | none | 60.00 (10.00) n=1 |" in report_markdown(report)
    (payload,) = report_dict(report)["groups"]
    assert payload["runs"] == ["runs/a"]
    assert payload["repeated_seeds"] == [{"seed": 0, "counted": "runs/a", "set_aside": ["runs/b"]}]


def _two_tasks(faa: float) -> list[list[float]]:
    """A two-task Class-IL matrix of final average accuracy ``faa`` (FF 1)."""
    return [[faa + 1.0], [faa, faa]]


# Seeds [0, 0, 1], FAA [95.0, 95.4, 93.0]: seed 0's runs are 20240101-...-s0 (95.0) and
# 20240102-...-s0 (95.4): the first by folder name, the earlier, counts. n = 2, the mean of 95.0 and
# 93.0 = 94.0, the sample std |95.0 - 93.0| / sqrt(2) = sqrt(2) = 1.414; never three values.
REPEATED = [
    ("runs/20240102-000000-er-s0", 0, 95.4),
    ("runs/20240101-000000-er-s0", 0, 95.0),
    ("runs/20240101-000000-er-s1", 1, 93.0),
]


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_the_mean_is_over_distinct_seeds_worked_out_by_hand(order: tuple[int, ...]) -> None:
    runs = [REPEATED[i] for i in order]
    report = build_report([record("er", seed, _two_tasks(faa), path=path) for path, seed, faa in runs])
    (group,) = report.groups
    assert group.seeds == (0, 1)
    assert group.n == 2
    assert group.class_il.faa.values == (95.0, 93.0)
    assert group.class_il.faa.mean == pytest.approx(94.0)
    assert group.class_il.faa.std == pytest.approx(math.sqrt(2))
    assert group.paths == ("runs/20240101-000000-er-s0", "runs/20240101-000000-er-s1")
    assert group.repeated == (RepeatedSeed(0, "runs/20240101-000000-er-s0", ("runs/20240102-000000-er-s0",)),)
    assert "| er | none | 94.00 ± 1.41 (1.00 ± 0.00) n=2 |" in report_markdown(report)


def test_count_each_seed_once_by_folder_name_then_path() -> None:
    runs = [
        ("z/er-s0", 0, 95.4),  # same folder name as a/er-s0: the path decides
        ("a/er-s0", 0, 95.0),
        ("c/er-s1", 1, 93.0),
        ("b/er-s0-again", 0, 90.0),  # another folder name, after er-s0
        ("c/er-s2", 2, 91.0),
        ("d/er-s2", 2, 92.0),
    ]
    kept, repeated = count_each_seed_once(runs, seed=lambda r: r[1], path=lambda r: r[0])
    assert kept == [("a/er-s0", 0, 95.0), ("c/er-s1", 1, 93.0), ("c/er-s2", 2, 91.0)]
    assert repeated == [
        RepeatedSeed(0, "a/er-s0", ("z/er-s0", "b/er-s0-again")),
        RepeatedSeed(2, "c/er-s2", ("d/er-s2",)),
    ]
    assert count_each_seed_once(list(reversed(runs)), seed=lambda r: r[1], path=lambda r: r[0]) == (
        kept,
        repeated,
    )
    assert count_each_seed_once([], seed=lambda r: r[1], path=lambda r: r[0]) == ([], [])


def test_nothing_complete_gives_an_empty_table() -> None:
    report = build_report([record("er", 0, None)])
    text = report_markdown(report)
    assert "No complete runs." in text
    assert "no results.json" in text
    assert report.groups == ()


def test_report_dict_is_strict_json_with_every_number() -> None:
    report = build_report(table_records())
    payload = report_dict(report, task_il=True)
    json.dumps(payload, allow_nan=False)
    assert payload["setting"] == "task-il"
    til = {"scenario": "class-il", "accuracy": "Task-IL"}
    assert payload["columns"] == [
        {"benchmark": "seq-a", "buffer_size": 200, "buffered": True} | til,
        {"benchmark": "seq-a", "buffer_size": 500, "buffered": True} | til,
    ]
    assert [t["accuracy"] for t in payload["tables"]] == ["Task-IL"]
    er = next(g for g in payload["groups"] if g["method"] == "er")
    assert er["seeds"] == [0, 1, 2]
    assert er["class_il"]["faa"] == {
        "mean": pytest.approx(70.0),
        "std": pytest.approx(10.0),
        "n": 3,
        "values": pytest.approx([60.0, 70.0, 80.0]),
    }
    assert er["task_il"]["faa"]["mean"] == pytest.approx(85.0)
    assert er["class_il"]["curve_mean"] == pytest.approx([80.0, (62.5 + 80 + 95) / 3, 70.0])
    derpp = next(g for g in payload["groups"] if g["method"] == "derpp")
    assert derpp["class_il"]["faa"]["std"] is None
    assert derpp["class_il"]["curve_std"] == [None, None, None]
    assert {p["kind"] for p in payload["problems"]} == {
        "incomplete",
        "missing",
        "unreadable",
        "missing_seeds",
    }


# ---------------------------------------------------------------------------------------------
# Plots


def test_plots_write_png(tmp_path: Path) -> None:
    report = build_report(table_records())
    paths = [
        plot_report_curves(report, column, tmp_path / f"curves_{column.buffer_size}.png")
        for column in report.columns
    ]
    paths.append(plot_report_curves(report, report.columns[0], tmp_path / "til.png", task_il=True))
    paths += [plot_report_matrix(report, g, tmp_path / f"matrix_{g.key.method}.png") for g in report.groups]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG)
        assert len(data) > 1000


def test_runs_without_defined_forgetting_show_no_ff() -> None:
    from xder_eval.report import GroupKey, summarize_group

    results = {
        "method": "joint",
        "benchmark": "b",
        "seed": 0,
        "buffer_size": 0,
        "complete": True,
        "n_tasks": 2,
        "tasks_done": 2,
        "accuracy_matrix": [[0.0], [90.0, 80.0]],
        "task_il_accuracy_matrix": [[10.0, 20.0], [95.0, 85.0]],
        "forgetting_defined": False,
    }
    record = RunRecord(path="r", config={"run": {"method": "joint", "benchmark": "b"}}, results=results)
    summary = summarize_group(GroupKey("b", 0, "joint", "none", ""), [record])
    assert summary.class_il.ff.mean is None
    assert summary.class_il.faa.mean == 85.0


# ---------------------------------------------------------------------------------------------
# Scenarios


def test_scenarios_the_caller_gives_shape_the_groups_and_tables() -> None:
    """A Domain-IL run (no Task-IL matrix) and a stream (one task) beside Class-IL runs, with the
    facts of their scenarios: each group holds only its scenario's accuracies, each scenario its
    own table, in the order of the facts; Task-IL cannot be asked of them. Without their facts, a
    report knows only class-il and lists them."""
    from xder_eval.report import CLASS_IL, ReportTable, ScenarioFacts

    facts = {
        "class-il": CLASS_IL,
        "domain-il": ScenarioFacts("Domain-IL", task_il=False),
        "general": ScenarioFacts("Accuracy", task_il=False, forgetting=False),
    }
    domain = record("er", 0, [[80.0], [60.0, 70.0]], benchmark="perm-a")
    domain.results.update(scenario="domain-il", task_il_accuracy_matrix=None)
    stream = record("er", 0, [[25.0]], benchmark="stream-a")
    stream.results.update(scenario="general", task_il_accuracy_matrix=None)
    records = [record("er", 0, ER[0]), domain, stream]

    report = build_report(records, scenarios=facts)
    assert not report.problems
    by_benchmark = {g.key.benchmark: g for g in report.groups}
    assert {b: g.key.scenario for b, g in by_benchmark.items()} == {
        "seq-a": "class-il",
        "perm-a": "domain-il",
        "stream-a": "general",
    }
    assert by_benchmark["perm-a"].task_il is None
    assert by_benchmark["perm-a"].setting(False).faa.mean == 65.0
    assert by_benchmark["perm-a"].setting(False).ff.mean == 20.0
    assert by_benchmark["stream-a"].setting(False).ff.mean is None  # one task: nothing to forget
    with pytest.raises(ValueError, match="no Task-IL accuracy"):
        by_benchmark["perm-a"].setting(True)
    er = report.rows[0]
    assert report.tables() == (
        ReportTable("Class-IL", True, (report.columns[1],), (er,)),
        ReportTable("Domain-IL", True, (report.columns[0],), (er,)),
        ReportTable("Accuracy", False, (report.columns[2],), (er,)),
    )
    assert [c.benchmark for c in report.without_task_il()] == ["perm-a", "stream-a"]
    with pytest.raises(ValueError, match=r"no Task-IL accuracy in domain-il, general \(perm-a, stream-a\)"):
        report_markdown(report, task_il=True)
    markdown = report_markdown(report)
    assert "Domain-IL final average accuracy FAA (final forgetting FF)" in markdown
    assert "| er | none | 25.00 n=1 |" in markdown

    unknown = build_report(records)  # class-il only
    assert [g.key.benchmark for g in unknown.groups] == ["seq-a"]
    assert [p.kind for p in unknown.problems] == ["unreadable", "unreadable"]
    assert (
        "names the scenario 'domain-il', which this report does not know (class-il)"
        in unknown.problems[0].message
    )
