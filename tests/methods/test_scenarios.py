"""Which scenarios each method runs in: every registered method is built on a setting of each
scenario and either builds or refuses with one line naming the method, the scenario and why
(:attr:`MethodBase.refused_scenarios <xder_methods.MethodBase.refused_scenarios>`), as the table
below says; and HAL's anchors in Domain-IL, one per class of each task as the authors' code
learns them; JOINT on a general stream, as the authors' ``joint_gcl`` trains."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from tests.methods.conftest import make_stream

from xder_methods import (
    SCENARIOS,
    ContinualSetting,
    MethodConfigError,
    TaskData,
    TrainingSchedule,
    Transforms,
    create_method,
    fit,
    list_methods,
    method_config_class,
    registered_name,
)
from xder_methods.methods.hal import HAL, HALConfig

C, D, T, G = "class-il", "domain-il", "task-il", "general"
EVERY = (C, T, D, G)
INCREMENTAL = (C, T, D)  # needs task boundaries: refuses the general stream
CLASSES = (C, T)  # needs new classes per task (and boundaries)

RUNS = {
    "agem": INCREMENTAL,
    "agem_r": EVERY,
    "bic": CLASSES,
    "der": EVERY,
    "derpp": EVERY,
    "derpp_ace": CLASSES,
    "er": EVERY,
    "er_ace": CLASSES,
    "er_flat": INCREMENTAL,
    "ewc_on": INCREMENTAL,
    "fdr": INCREMENTAL,
    "gdumb": CLASSES,
    "gem": INCREMENTAL,
    "gss": EVERY,
    "hal": INCREMENTAL,
    "icarl": CLASSES,
    "joint": EVERY,
    "lucir": CLASSES,
    "lwf": CLASSES,
    "lwf_mc": CLASSES,
    "mer": EVERY,
    "rpc": CLASSES,
    "sgd": EVERY,
    "si": INCREMENTAL,
    "xder": CLASSES,
}
"""The scenarios each method runs in (the others it refuses), written out: the authors' lists
(mammoth's ``COMPATIBILITY``), less ``general`` where the method needs task boundaries, less
``domain-il`` where it needs each task's new classes."""

SETTINGS = {
    C: ContinualSetting((2, 2, 2), (1, 2, 2)),
    T: ContinualSetting((2, 2, 2), (1, 2, 2), scenario="task-il"),
    D: ContinualSetting((2, 2, 2), (1, 2, 2), scenario="domain-il"),
    G: ContinualSetting((6,), (1, 2, 2), scenario="general"),
}


def _float(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    return x.float() / 255


def build(name: str, setting: ContinualSetting, tiny_net):
    return create_method(
        name,
        net=tiny_net(setting.num_classes),
        setting=setting,
        transforms=Transforms(train=_float, test=_float, strong=_float),
        config=method_config_class(name)(),
        generator=torch.Generator().manual_seed(0),
    )


METHODS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "methods.md"


def test_the_methods_page_lists_the_table() -> None:
    """docs/methods.md's "The scenarios each method runs in" says what :data:`RUNS` says."""
    page = METHODS_PAGE.read_text().split("### The scenarios each method runs in", 1)[1]
    listed = {}
    for scenarios, names in re.findall(r"^\| ([a-z, -]+) \| (`.*`) \|$", page, flags=re.MULTILINE):
        for name in re.findall(r"`([a-z_]+)`", names):
            listed[name] = tuple(scenarios.split(", "))
    assert listed == {name: tuple(s for s in SCENARIOS if s in runs) for name, runs in RUNS.items()}


def test_the_table_covers_every_registered_method() -> None:
    assert set(RUNS) <= set(list_methods())
    assert set(list_methods()) - set(RUNS) <= {"pnn"}  # PNN's test holds its own (Task-IL only)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_task_il_exactly_where_class_il(name) -> None:
    """The same training, only the evaluation differs: a method runs Task-IL where it runs
    Class-IL."""
    assert (C in RUNS[name]) == (T in RUNS[name])


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_method_builds_or_refuses_with_one_line(name, scenario, tiny_net) -> None:
    setting = SETTINGS[scenario]
    if scenario in RUNS[name]:
        method = build(name, setting, tiny_net)
        assert method.setting is setting  # type: ignore[attr-defined]
        return
    with pytest.raises(MethodConfigError) as refused:
        build(name, setting, tiny_net)
    message = str(refused.value)
    runs = ", ".join(s for s in SCENARIOS if s in RUNS[name])
    assert "\n" not in message
    head, tail = f"{name} cannot run a {scenario} benchmark: ", f" (it runs {runs})"
    assert message.startswith(head)
    assert message.endswith(tail)
    why = message.removeprefix(head).removesuffix(tail)
    assert len(why.split()) >= 8  # a reason, not a bare refusal


def test_the_class_s_declaration_names_the_refused_scenarios() -> None:
    """What the docstrings state: each refusing class names its refusals in its own
    ``refused_scenarios`` (a subclass that runs more, A-GEM-R, lifts its parent's)."""
    from xder_methods import method_class

    for name, runs in RUNS.items():
        refused = method_class(name).refused_scenarios
        assert set(refused) == set(SCENARIOS) - set(runs), name
        assert (
            f"refuses {' and '.join(s for s in SCENARIOS if s in refused)}"
            in " ".join((method_class(name).__doc__ or "").split())
            or not refused
        ), name


def test_a_refusal_names_the_registered_method_of_an_unregistered_subclass() -> None:
    from xder_methods.methods.fdr import FDR

    class MyFDR(FDR):
        pass

    assert registered_name(MyFDR) == "fdr"
    assert registered_name(int) == "int"


# ------------------------------------------------------------------------ HAL in Domain-IL


def test_hal_learns_one_anchor_per_class_of_each_domain_il_task(tiny_net) -> None:
    """mammoth's HAL appends, at each task's end, one anchor per class of the task: in Domain-IL
    (2 classes in each of 3 tasks) 2 after task 0, 4 after task 1, 6 rows in all; task t
    replays the anchors of tasks 0..t-1. (Keyed by label, every task's anchors would overwrite
    rows 0-1 and none would ever be active.)"""
    setting = SETTINGS[D]
    method = create_method(
        "hal",
        net=tiny_net(setting.num_classes),
        setting=setting,
        transforms=Transforms(train=_float, test=_float),
        config=HALConfig(buffer_size=6, minibatch_size=2, steps_on_anchors=5),
        generator=torch.Generator().manual_seed(0),
    )
    assert isinstance(method, HAL)
    assert method.anchors.shape == (6, 1, 2, 2)
    assert [method.anchor_rows(t) for t in range(3)] == [(0, 2), (2, 4), (4, 6)]
    assert [method.active_anchors(t).shape[0] for t in range(3)] == [0, 2, 4]
    g = torch.Generator().manual_seed(1)
    for task in range(2):
        x = torch.randint(0, 256, (8, 1, 2, 2), generator=g, dtype=torch.uint8)
        method.begin_task(task)
        method.end_task(task, TaskData(x, torch.arange(8) % 2, task))
        filled = method.anchors.flatten(1).abs().sum(1).gt(0)
        assert filled.tolist() == [True] * (2 * task + 2) + [False] * (4 - 2 * task)
    assert not torch.equal(method.anchors[0], method.anchors[2])  # task 1's are new rows


# ------------------------------------------------------------------- JOINT on a general stream


def batches_observed(name: str, tiny_net, **config) -> list[list[int]]:
    """The rows (stream positions) of each batch ``name`` observes in one epoch, batch 8, last
    partial batch kept, of a general stream of 30 rows: classes 0..5, 5 rows each in class order,
    in 3 segments of two classes (10 rows)."""
    stream = make_stream(classes_per_task=(6,), per_class=5)
    stream = dataclasses.replace(stream, scenario="general", train_segment=stream.train_y // 2)
    stream.train_x[:, 0, 0, 0] = torch.arange(30)
    method = create_method(
        name,
        net=tiny_net(6),
        setting=ContinualSetting((6,), (1, 2, 2), scenario="general"),
        transforms=Transforms(train=_float, test=_float),
        config=method_config_class(name)(**config),
        generator=torch.Generator().manual_seed(0),
    )
    batches: list[list[int]] = []
    observe = method.observe

    def spy(batch):
        batches.append(batch.x_raw[:, 0, 0, 0].long().tolist())
        return observe(batch)

    method.observe = spy  # type: ignore[method-assign]
    schedule = TrainingSchedule(epochs=1, batch_size=8, lr=0.05, drop_last=False)
    fit(method, stream, schedule, generator=torch.Generator().manual_seed(0))
    return batches


@pytest.mark.parametrize("mode", ["final", "cumulative"])
def test_joint_trains_on_the_whole_general_stream_shuffled(mode, tiny_net) -> None:
    """The authors' ``joint_gcl``: after the stream, the network trains on everything it showed,
    shuffled, in batches of the run's size with the last partial one kept (30 rows: 8, 8, 8, 6),
    each row once per epoch; both modes alike (one task)."""
    batches = batches_observed("joint", tiny_net, mode=mode)
    assert [len(b) for b in batches] == [8, 8, 8, 6]
    rows = [r for b in batches for r in b]
    assert sorted(rows) == list(range(30))
    assert rows != list(range(30))  # shuffled across the segments
    assert {r // 10 for r in batches[0]} != {batches[0][0] // 10}  # a batch spans segments


def test_a_method_sees_the_general_stream_in_its_order(tiny_net) -> None:
    """The contrast: FT sees the stream's batches in order, each segment cut on its own (10 rows:
    8, then 2)."""
    expected = []
    for start in (0, 10, 20):
        expected += [list(range(start, start + 8)), list(range(start + 8, start + 10))]
    assert batches_observed("sgd", tiny_net) == expected
