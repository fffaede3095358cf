"""A method's own rules on the training schedule (``check_schedule`` on its config): JT in final
mode and GDumb fitting at the last task only cannot train a stream shortened by ``tasks``."""

from __future__ import annotations

import pytest

from xder_methods import MethodConfigError, TrainingSchedule, check_schedule, method_config_class


@pytest.mark.parametrize(
    ("method", "key", "refused", "allowed"),
    [("joint", "mode", "final", "cumulative"), ("gdumb", "fit_after", "last_task", "every_task")],
)
def test_methods_that_train_at_the_last_task_only_refuse_a_shortened_stream(
    method: str, key: str, refused: str, allowed: str
) -> None:
    config_cls = method_config_class(method)
    short, full = TrainingSchedule(tasks=2), TrainingSchedule()
    with pytest.raises(MethodConfigError, match=f"train.tasks cannot shorten {method} with method.{key}"):
        check_schedule(config_cls(**{key: refused}), short)
    check_schedule(config_cls(**{key: refused}), full)
    check_schedule(config_cls(**{key: allowed}), short)


def test_a_method_without_rules_takes_any_schedule() -> None:
    check_schedule(method_config_class("er")(), TrainingSchedule(tasks=1))
