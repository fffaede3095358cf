"""Each scenario's runs through ``xder-run report`` and the summary of ``xder-run train``: the
accuracy named by the scenario (Class-IL, Task-IL, Domain-IL, a general stream's Accuracy), no
column, figure or line of a metric the scenario lacks (Task-IL in Domain-IL and a general stream,
forgetting in a general stream's one task), the usage errors (``--task-il`` where there is no
Task-IL, a benchmark whose runs name two scenarios), and one real Domain-IL run trained and
reported. The run directories are hand-made in the real format (config.toml as xder-run train
writes it, results.json as the recorder writes it for that scenario)."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import pytest

from xder_cli.main import main
from xder_cli.progress import print_summary
from xder_cli.runs import rundir
from xder_cli.runs.settings import build_plan, resolve_config

# Two seeds a scenario; FAA is the last row's mean, FF the mean drop of the earlier tasks.
DOMAIN = [[[80.0], [60.0, 70.0]], [[84.0], [62.0, 74.0]]]  # FAA 65, 68; FF 20, 22
STREAM = [[[24.0]], [[26.0]]]  # one task: accuracy 24, 26, no forgetting
CLASS = [[[90.0], [40.0, 95.0]], [[92.0], [44.0, 93.0]]]  # FAA 67.5, 68.5; FF 50, 48
CLASS_TIL = [[[90.0], [80.0, 97.0]], [[92.0], [84.0, 95.0]]]  # Task-IL FAA 88.5, 89.5


def run_dir(root: Path, name: str, method: str, benchmark: str, seed: int, **results) -> Path:
    """A complete run directory: the configuration xder-run train writes for ``method`` on
    ``benchmark`` (buffer 200), and ``results`` (the matrices, the scenario) in results.json."""
    settings = {"run.seed": seed, "method.buffer_size": 200}
    config = build_plan(resolve_config(method, benchmark, settings=settings)).config
    path = root / name
    path.mkdir(parents=True)
    rundir.write_config(path / "config.toml", config)
    n_tasks = len(results.get("accuracy_matrix") or results["task_il_accuracy_matrix"])
    head = {"method": method, "benchmark": benchmark, "seed": seed, "buffer_size": 200}
    rundir.write_json(path / "results.json", head | {"complete": True, "n_tasks": n_tasks} | results)
    return path


def domain_runs(root: Path) -> None:
    for seed, matrix in enumerate(DOMAIN):
        run_dir(
            root,
            f"derpp-perm-s{seed}",
            "derpp",
            "perm-digits",
            seed,
            scenario="domain-il",
            accuracy_matrix=matrix,
            task_il_accuracy_matrix=None,
        )


def stream_runs(root: Path) -> None:
    for seed, matrix in enumerate(STREAM):
        run_dir(
            root,
            f"derpp-360-s{seed}",
            "derpp",
            "digits-360",
            seed,
            scenario="general",
            accuracy_matrix=matrix,
            task_il_accuracy_matrix=None,
        )


def class_runs(root: Path, *, legacy: bool = False) -> None:
    """Class-IL runs on seq-digits; ``legacy``: results.json written before runs named their
    scenario (no ``scenario`` key), read as class-il."""
    for seed, (matrix, til) in enumerate(zip(CLASS, CLASS_TIL, strict=True)):
        named = {} if legacy else {"scenario": "class-il"}
        run_dir(
            root,
            f"derpp-seq-s{seed}",
            "derpp",
            "seq-digits",
            seed,
            accuracy_matrix=matrix,
            task_il_accuracy_matrix=til,
            **named,
        )


def cell(faa: list[float], ff: list[float] | None = None) -> str:
    """A table cell of two seeds: ``FAA ± std (FF ± std) n=2``, no FF where ``ff`` is None."""
    text = f"{statistics.mean(faa):.2f} ± {statistics.stdev(faa):.2f}"
    if ff is not None:
        text += f" ({statistics.mean(ff):.2f} ± {statistics.stdev(ff):.2f})"
    return text + " n=2"


def report(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["report", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---------------------------------------------------------------------------------------------
# One scenario a report


def test_a_domain_il_report_names_domain_il_and_has_no_task_il(tmp_path: Path, capsys, saved_figures) -> None:
    domain_runs(tmp_path / "runs")
    out = tmp_path / "report"
    code, printed, _ = report(capsys, str(tmp_path / "runs"), "--out", str(out))
    assert code == 0
    table = (out / "table.md").read_text()
    assert table in printed
    assert table.startswith(
        "Domain-IL final average accuracy FAA (final forgetting FF), %: mean ± sample standard deviation "
        "over n seeds.\n"
    )
    assert f"| derpp | none | {cell([65.0, 68.0], [20.0, 22.0])} |" in table
    assert "Task-IL" not in table
    assert "Class-IL" not in table

    (row,) = csv.DictReader(io.StringIO((out / "table.csv").read_text()))
    assert (row["benchmark"], row["scenario"]) == ("perm-digits", "domain-il")
    assert float(row["faa_mean"]) == pytest.approx(66.5)
    assert float(row["ff_mean"]) == pytest.approx(21.0)
    assert [row[f"task_il_{part}"] for part in ("faa_mean", "faa_std", "ff_mean", "ff_std")] == [""] * 4

    payload = json.loads((out / "report.json").read_text())
    assert payload["setting"] == "scenario"
    assert payload["tables"] == [
        {"accuracy": "Domain-IL", "forgetting": True, "columns": ["perm-digits m200"], "rows": ["derpp"]}
    ]
    (group,) = payload["groups"]
    assert (group["scenario"], group["accuracy"], group["task_il"]) == ("domain-il", "Domain-IL", None)
    assert group["class_il"]["faa"]["values"] == pytest.approx([65.0, 68.0])

    curves = saved_figures["curves_perm-digits_m200.png"].axes[0]
    assert curves.get_ylabel() == "Domain-IL accuracy on seen tasks (%)"
    assert curves.get_title() == "perm-digits m200, Domain-IL accuracy: mean ± std over seeds"
    matrix = saved_figures["matrix_perm-digits_m200_derpp.png"].axes[0]
    assert "mean Domain-IL accuracy (%), n=2" in matrix.get_title()
    assert {p.name for p in out.glob("*.png")} == {
        "curves_perm-digits_m200.png",
        "matrix_perm-digits_m200_derpp.png",
    }


def test_a_general_stream_report_gives_its_accuracy_and_no_forgetting(
    tmp_path: Path, capsys, saved_figures
) -> None:
    stream_runs(tmp_path / "runs")
    out = tmp_path / "report"
    assert report(capsys, str(tmp_path / "runs"), "--out", str(out))[0] == 0
    table = (out / "table.md").read_text()
    assert table.startswith(
        "Accuracy at the end of the stream (one task: no forgetting), %: mean ± sample standard deviation "
        "over n seeds.\n"
    )
    assert f"| derpp | none | {cell([24.0, 26.0])} |" in table
    assert "FF" not in table
    assert "Task-IL" not in table
    (row,) = csv.DictReader(io.StringIO((out / "table.csv").read_text()))
    assert (row["scenario"], row["faa_mean"], row["ff_mean"], row["task_il_faa_mean"]) == (
        "general",
        "25.0000",
        "",
        "",
    )
    (group,) = json.loads((out / "report.json").read_text())["groups"]
    assert (group["accuracy"], group["class_il"]["ff"]["mean"], group["task_il"]) == ("Accuracy", None, None)
    assert saved_figures["curves_digits-360_m200.png"].axes[0].get_ylabel() == "Accuracy on seen tasks (%)"
    assert "mean accuracy (%), n=2" in saved_figures["matrix_digits-360_m200_derpp.png"].axes[0].get_title()


def test_a_task_il_report_shows_task_il_as_its_own_accuracy(tmp_path: Path, capsys) -> None:
    """A scenario of Task-IL alone (results.json's accuracy_matrix null): its table is Task-IL's."""
    runs = tmp_path / "runs"
    for seed, til in enumerate(CLASS_TIL):
        run_dir(
            runs,
            f"s{seed}",
            "derpp",
            "seq-digits",
            seed,
            scenario="task-il",
            accuracy_matrix=None,
            task_il_accuracy_matrix=til,
        )
    out = tmp_path / "report"
    for flags in ([], ["--task-il"]):  # the same table: Task-IL is the scenario's own accuracy
        code, printed, _ = report(capsys, str(runs), "--out", str(out), *flags)
        assert code == 0
        assert printed.startswith("Task-IL final average accuracy FAA (final forgetting FF), %")
        assert f"| derpp | tuned | {cell([88.5, 89.5], [10.0, 8.0])} |" in printed
        assert "Class-IL" not in printed
    (row,) = csv.DictReader(io.StringIO((out / "table.csv").read_text()))
    assert (row["scenario"], row["faa_mean"], row["task_il_faa_mean"]) == ("task-il", "", "89.0000")


# ---------------------------------------------------------------------------------------------
# Several scenarios, and the usage errors


def test_runs_of_several_scenarios_make_one_table_each(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    domain_runs(runs)
    stream_runs(runs)
    class_runs(runs, legacy=True)  # no "scenario" in results.json: class-il
    out = tmp_path / "report"
    assert report(capsys, str(runs), "--out", str(out))[0] == 0
    table = (out / "table.md").read_text()
    blocks = table.strip().split("\n\n")
    captions = [b.splitlines()[0] for b in blocks if not b.startswith("|")]
    assert [c.split(" final")[0].split(" at the end")[0] for c in captions] == [
        "Class-IL",
        "Domain-IL",
        "Accuracy",
    ]
    tables = [b for b in blocks if b.startswith("|")]
    assert [t.splitlines()[0] for t in tables] == [
        "| method | preset | seq-digits m200 |",
        "| method | preset | perm-digits m200 |",
        "| method | preset | digits-360 m200 |",
    ]
    # seq-digits' derpp has its tuned preset, so derpp has two rows: each only in its tables.
    assert [len(t.splitlines()) - 2 for t in tables] == [1, 1, 1]
    assert f"| derpp | tuned | {cell([67.5, 68.5], [50.0, 48.0])} |" in tables[0]
    assert f"| derpp | none | {cell([65.0, 68.0], [20.0, 22.0])} |" in tables[1]
    assert f"| derpp | none | {cell([24.0, 26.0])} |" in tables[2]
    payload = json.loads((out / "report.json").read_text())
    assert [t["accuracy"] for t in payload["tables"]] == ["Class-IL", "Domain-IL", "Accuracy"]
    rows = {r["benchmark"]: r for r in csv.DictReader(io.StringIO((out / "table.csv").read_text()))}
    assert {b: r["scenario"] for b, r in rows.items()} == {
        "seq-digits": "class-il",
        "perm-digits": "domain-il",
        "digits-360": "general",
    }
    assert float(rows["seq-digits"]["task_il_faa_mean"]) == pytest.approx(89.0)


@pytest.mark.parametrize("others", [domain_runs, stream_runs])
def test_task_il_of_a_scenario_without_it_is_one_line(others, tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    class_runs(runs)
    others(runs)
    out = tmp_path / "report"
    code, printed, err = report(capsys, str(runs), "--out", str(out), "--task-il")
    benchmark, scenario = ("perm-digits", "domain-il") if others is domain_runs else ("digits-360", "general")
    assert (code, printed) == (2, "")
    assert err == (
        f"xder-run report: error: --task-il: no Task-IL accuracy in {benchmark} ({scenario}), where a "
        "task's classes are all the classes; report without --task-il, or without those runs\n"
    )
    assert not out.exists()
    # Without --task-il, the same runs report; the Class-IL runs alone report Task-IL.
    assert report(capsys, str(runs), "--out", str(out))[0] == 0
    code, printed, _ = report(
        capsys, *(str(p) for p in runs.glob("derpp-seq-*")), "--out", str(out), "--task-il"
    )
    assert code == 0
    assert printed.startswith("Task-IL final average accuracy")
    assert f"| derpp | tuned | {cell([88.5, 89.5], [10.0, 8.0])} |" in printed


def test_one_benchmark_in_two_scenarios_is_one_line(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    class_runs(runs)
    run_dir(
        runs,
        "other",
        "er",
        "seq-digits",
        0,
        scenario="domain-il",
        accuracy_matrix=DOMAIN[0],
        task_il_accuracy_matrix=None,
    )
    out = tmp_path / "report"
    code, printed, err = report(capsys, str(runs), "--out", str(out))
    assert (code, printed) == (2, "")
    assert err == (
        "xder-run report: error: the runs on seq-digits name 2 scenarios (class-il, domain-il): one "
        "benchmark, two problems; report each scenario's runs apart\n"
    )
    assert not out.exists()


def test_a_run_missing_its_scenarios_matrix_is_listed(tmp_path: Path, capsys) -> None:
    """A class-il results.json whose Task-IL matrix is null is unreadable for a report, not a
    Domain-IL run in disguise; a scenario no report knows is listed too."""
    runs = tmp_path / "runs"
    domain_runs(runs)
    broken = run_dir(
        runs,
        "broken",
        "er",
        "seq-digits",
        0,
        scenario="class-il",
        accuracy_matrix=CLASS[0],
        task_il_accuracy_matrix=None,
    )
    alien = run_dir(runs, "alien", "er", "seq-digits", 1, scenario="open-world", accuracy_matrix=CLASS[1])
    code, printed, _ = report(capsys, str(runs), "--out", str(tmp_path / "report"))
    assert code == 0
    assert (
        f"- {broken}: results.json has no valid accuracy_matrix/task_il_accuracy_matrix (er on seq-digits "
        "m200 seed 0)" in printed
    )
    assert (
        f"- {alien}: results.json names the scenario 'open-world', which this report does not know "
        "(class-il, task-il, domain-il, general) (er on seq-digits m200 seed 1)" in printed
    )


# ---------------------------------------------------------------------------------------------
# xder-run train's summary


@pytest.mark.parametrize(
    ("results", "line"),
    [
        (
            {"scenario": "class-il", "faa": 67.5, "ff": 50.0, "task_il_faa": 88.5, "task_il_ff": 10.0},
            "Class-IL FAA 67.50  FF 50.00  |  Task-IL FAA 88.50  |  wall time 3.0 s",
        ),
        (  # results.json of before the scenarios: class-il
            {"faa": 67.5, "ff": 50.0, "task_il_faa": 88.5, "task_il_ff": 10.0},
            "Class-IL FAA 67.50  FF 50.00  |  Task-IL FAA 88.50  |  wall time 3.0 s",
        ),
        (
            {"scenario": "domain-il", "faa": 53.49, "ff": 26.58, "task_il_faa": None, "task_il_ff": None},
            "Domain-IL FAA 53.49  FF 26.58  |  wall time 3.0 s",
        ),
        (
            {"scenario": "general", "faa": 25.08, "ff": None, "task_il_faa": None, "task_il_ff": None},
            "Accuracy 25.08  |  wall time 3.0 s",
        ),
        (
            {"scenario": "task-il", "faa": None, "ff": None, "task_il_faa": 88.5, "task_il_ff": 10.0},
            "Task-IL FAA 88.50  FF 10.00  |  wall time 3.0 s",
        ),
    ],
)
def test_the_summary_names_the_scenarios_accuracy(results: dict, line: str, tmp_path: Path, capsys) -> None:
    print_summary(results | {"wall_time_s": 3.0, "environment": {"device": "cpu", "threads": [1]}}, tmp_path)
    assert capsys.readouterr().out.splitlines()[0] == line


# ---------------------------------------------------------------------------------------------
# End to end


def test_a_domain_il_run_trained_then_reported(tmp_path: Path, capsys) -> None:
    runs, out = tmp_path / "runs", tmp_path / "report"
    argv = ["train", "--benchmark", "perm-digits", "--method", "derpp", "--set", "train.tasks=2"]
    assert main([*argv, "--device", "cpu", "--out", str(runs)]) == 0
    trained = capsys.readouterr().out
    (run,) = runs.iterdir()
    results = json.loads((run / "results.json").read_text())
    assert (results["scenario"], results["task_il_accuracy_matrix"]) == ("domain-il", None)
    assert f"Domain-IL FAA {results['faa']:.2f}  FF {results['ff']:.2f}  |  wall time" in trained
    assert "Task-IL" not in trained
    assert main(["report", str(runs), "--out", str(out)]) == 0
    table = (out / "table.md").read_text()
    assert "\nDomain-IL final average accuracy FAA (final forgetting FF), %" in table
    assert f"| derpp | none | {results['faa']:.2f} ({results['ff']:.2f}) n=1 |" in table
    assert "Task-IL" not in table
    assert {p.name for p in out.glob("*.png")} == {
        "curves_perm-digits_m200.png",
        "matrix_perm-digits_m200_derpp.png",
    }
