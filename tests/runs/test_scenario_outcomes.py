"""A finished run's figures in a sweep's or an experiment's outcome and progress line follow its
scenario: the scenario's own FAA and FF (Task-IL's in a run of Task-IL alone, whose Class-IL
metrics are null), named after it (Domain-IL FAA; a general stream's Accuracy, no FF)."""

from __future__ import annotations

import pytest

from xder_cli.runs import rundir
from xder_cli.runs.experiments.common import describe_faa
from xder_cli.runs.scheduler import run_outcome

NULL_TASK_IL = {"task_il_faa": None, "task_il_ff": None, "val_task_il_faa": None}


@pytest.mark.parametrize(
    ("results", "outcome", "line"),
    [
        (  # written before runs named their scenario: class-il
            {"faa": 60.0, "ff": 20.0, "val_faa": 62.0, "task_il_faa": 90.0, "task_il_ff": 5.0},
            (62.0, 60.0, 20.0),
            "Class-IL FAA 60.00, FF 20.00",
        ),
        (
            {"scenario": "domain-il", "faa": 53.5, "ff": 26.5, "val_faa": 55.0} | NULL_TASK_IL,
            (55.0, 53.5, 26.5),
            "Domain-IL FAA 53.50, FF 26.50",
        ),
        (
            {"scenario": "general", "faa": 25.0, "ff": None, "val_faa": 24.0} | NULL_TASK_IL,
            (24.0, 25.0, None),
            "Accuracy 25.00",
        ),
        (
            {"scenario": "task-il", "faa": None, "ff": None, "val_faa": None}
            | {"task_il_faa": 88.0, "task_il_ff": 9.0, "val_task_il_faa": 87.0},
            (87.0, 88.0, 9.0),
            "Task-IL FAA 88.00, FF 9.00",
        ),
    ],
)
def test_the_outcome_and_line_take_the_scenarios_own_figures(results, outcome, line, tmp_path) -> None:
    rundir.write_json(tmp_path / rundir.RESULTS, results | {"complete": True, "wall_time_s": 1.0})
    found = run_outcome(tmp_path, "finished")
    assert (found["val_faa"], found["faa"], found["ff"]) == outcome
    assert describe_faa(results) == line
    assert describe_faa(results, "test FAA").startswith(f"test FAA {outcome[1]:.2f}, FF ")


def test_a_task_il_run_on_a_class_il_table_fills_only_the_task_il_column() -> None:
    """PNN's run (task-il) in a Class-IL table: no Class-IL FAA or FF of its own (its own accuracy,
    Task-IL, is not the columns'), its Task-IL FAA in the Task-IL column."""
    from xder_cli.runs.experiments.table import table_metrics

    results = {"scenario": "task-il", "faa": None, "ff": None, "task_il_faa": 91.5, "task_il_ff": 2.0,
               "wall_time_s": 3.0}  # fmt: skip
    assert table_metrics(results) == {"faa": None, "ff": None, "task_il": 91.5, "wall_time_s": 3.0}  # type: ignore[arg-type]
