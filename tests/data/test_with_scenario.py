"""A class-il benchmark runs as task-il (the same tasks and rows, the task given at test time);
no other change of scenario is one."""

from __future__ import annotations

import pytest

from xder_data import BenchmarkOptionError, benchmark_scenario, check_scenario, load_benchmark, with_scenario


def test_a_class_il_benchmark_runs_as_task_il_on_the_same_rows() -> None:
    bench = load_benchmark("seq-digits")
    task_il = with_scenario(bench, "task-il")
    assert (bench.scenario, task_il.scenario) == ("class-il", "task-il")
    assert task_il.classes_per_task == bench.classes_per_task
    for name in ("train_x", "train_y", "test_x", "test_y"):
        assert getattr(task_il, name) is getattr(bench, name)
    assert [task_il.task(t).class_start for t in range(5)] == [bench.task(t).class_start for t in range(5)]
    assert with_scenario(bench, "class-il") is bench
    assert with_scenario(task_il, "task-il") is task_il


@pytest.mark.parametrize(
    ("name", "scenario"),
    [
        ("seq-digits", "domain-il"),
        ("seq-digits", "general"),
        ("perm-digits", "task-il"),
        ("digits-360", "task-il"),
    ],
)
def test_every_other_change_is_one_line(name, scenario) -> None:
    own = benchmark_scenario(name)
    line = (
        f"benchmark {name!r} is {own}: it cannot run as {scenario} "
        "(only a class-il benchmark runs as task-il)"
    )
    with pytest.raises(BenchmarkOptionError) as error:
        check_scenario(name, own, scenario)
    assert str(error.value) == line
    with pytest.raises(BenchmarkOptionError):
        with_scenario(load_benchmark(name), scenario)
