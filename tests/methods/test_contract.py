"""The method contract, pinned: the members of :class:`xder_methods.ContinualMethod`, each with its
kind, are the list below, :class:`xder_methods.MethodBase` gives every one of them the same kind,
and the documentation's Plugins page lists exactly them. Adding a member to the contract (a new
hook) is a change to :data:`CONTRACT`, so a reviewed one.

Also: every public name of xder-methods' modules (``__all__`` of ``core``, ``parts`` and
``methods``) is importable from ``xder_methods``, as the Plugins page says.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import xder_methods
from xder_methods import (
    ContinualMethod,
    ContinualSetting,
    MethodBase,
    MethodConfig,
    StepPolicy,
    TrainingSchedule,
    check_schedule,
    create_method,
    list_methods,
)

PLUGINS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"

CONTRACT = {
    # What the loop and bench call, in the order the loop calls them.
    "begin_task": "method",
    "prepare_task": "method",
    "observe": "method",
    "after_backward": "method",
    "after_step": "method",
    "end_task": "method",
    "prefill": "method",
    "predict": "method",
    "optimizer_parameters": "method",
    # The step graphs, the analyses.
    "graph_key": "method",
    "replay_memory": "method",
    # nn.Module's.
    "train": "method",
    "state_dict": "method",
    "load_state_dict": "method",
    "training": "attribute",
    # What the loop reads, and the two it writes (optimizer, step_policy).
    "training_data": "attribute",
    "manual_optimization": "attribute",
    "optimizer": "attribute",
    "step_policy": "attribute",
    "transforms": "attribute",
    "net": "attribute",
    "device": "property",
    "forgetting_defined": "property",
}
"""Every member of the contract and its kind: ``method``, ``attribute`` or ``property``."""


def members(protocol: type) -> dict[str, str]:
    """The members a Protocol class declares itself, with their kinds: annotated names are
    attributes, properties properties, functions methods."""
    found = {name: "attribute" for name in inspect.get_annotations(protocol)}
    for name, value in vars(protocol).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            found[name] = "property"
        elif inspect.isfunction(value):
            found[name] = "method"
    return found


def kind_on(cls: type, instance: object, name: str) -> str | None:
    """The kind of ``name`` on ``instance`` of ``cls``: a property of the class, a method (a
    function of the class), an attribute (any other value the instance has), or None (none)."""
    static = inspect.getattr_static(cls, name, None)
    if isinstance(static, property):
        return "property"
    if inspect.isfunction(static):
        return "method"
    return "attribute" if hasattr(instance, name) else None


class Planted:
    """A protocol class of its own, for the member finder to find each kind in."""

    flag: bool

    @property
    def size(self) -> int: ...

    def hook(self) -> None: ...

    def _private(self) -> None: ...


def test_the_member_finder_tells_the_kinds_apart() -> None:
    assert members(Planted) == {"flag": "attribute", "size": "property", "hook": "method"}


def test_the_contract_is_the_pinned_list() -> None:
    assert members(ContinualMethod) == CONTRACT


def base_method() -> MethodBase:
    net = nn.Linear(4, 2)
    return MethodBase(net, ContinualSetting((2,), (4,)), None, None)  # type: ignore[arg-type]


def test_method_base_gives_every_member_its_kind() -> None:
    method = base_method()
    assert {name: kind_on(MethodBase, method, name) for name in CONTRACT} == CONTRACT
    assert isinstance(method, ContinualMethod)


def test_method_base_defaults_are_the_documented_ones() -> None:
    """What a method that writes only observe gets: no withheld rows, no memory, forgetting
    defined, no step graphs, the loop stepping it, fp32 until the loop sets the run's policy."""
    method = base_method()
    assert method.prepare_task(0, None, None) is None  # type: ignore[arg-type]
    assert method.replay_memory() is None
    assert method.forgetting_defined is True
    assert method.graph_key() is None
    assert method.manual_optimization is False
    assert method.optimizer is None
    assert method.step_policy == StepPolicy("fp32", False)
    assert method.training_data == "task"
    assert method.device == torch.device("cpu")


def test_the_loop_sets_the_runs_step_policy() -> None:
    assert TrainingSchedule(precision="bf16").step_policy == StepPolicy("bf16", False)
    assert TrainingSchedule(compile=True, compile_mode="reduce-overhead").step_policy == StepPolicy(
        "fp32", True
    )


@pytest.mark.parametrize("name", list_methods())
def test_every_registered_method_keeps_the_contract(
    name, stream, setting_of, tiny_net, transforms, stream_for
) -> None:
    """Each, built on the test stream (in its scenario): a ContinualMethod, whose replay memory is
    a buffer or None."""
    setting = setting_of(stream_for(name, stream))
    method = create_method(name, net=tiny_net(setting.num_classes), setting=setting, transforms=transforms)
    assert isinstance(method, ContinualMethod)
    memory = method.replay_memory()
    assert memory is None or isinstance(memory, xder_methods.Buffer)
    assert isinstance(method.forgetting_defined, bool)


def test_the_plugins_page_lists_exactly_the_contract() -> None:
    """The table of docs/plugins.md's "The contract, whole": one row per member, its name first
    (a call's arguments aside), then its kind."""
    text = PLUGINS_PAGE.read_text()
    section = text[text.index("### The contract, whole") :]
    section = section[: section.index("\n#", 1)]
    rows = re.findall(r"^\| `([a-z_]+)[^`]*` \| (\w+) \|", section, flags=re.MULTILINE)
    assert len(rows) == len({name for name, _ in rows})  # each once
    assert dict(rows) == CONTRACT


def test_a_config_declares_its_schedule_rules_on_method_config() -> None:
    """A MethodConfig accepts every schedule unless it overrides check_schedule, and
    check_schedule calls an override; a config that is no MethodConfig has no rules."""
    calls = []

    class Picky(MethodConfig):
        def check_schedule(self, schedule: TrainingSchedule) -> None:
            calls.append(schedule.tasks)

    MethodConfig().check_schedule(TrainingSchedule(tasks=1))
    check_schedule(Picky(), TrainingSchedule(tasks=1))
    check_schedule(object(), TrainingSchedule(tasks=2))
    assert calls == [1]


def public_names() -> dict[str, str]:
    """Every name in the ``__all__`` of a module of core, parts and methods, with its module."""
    found = {}
    for sub in ("core", "parts", "methods"):
        package = importlib.import_module(f"xder_methods.{sub}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            found |= dict.fromkeys(getattr(module, "__all__", ()), module.__name__)
    return found


def test_every_public_name_is_exported_from_the_package() -> None:
    names = public_names()
    assert {"TaskBudget", "Buffer", "TaskMemory", "train_passes", "BiC"} <= set(names)
    missing = sorted(f"{module}.{name}" for name, module in names.items() if name not in xder_methods.__all__)
    assert missing == []
    for name, module in names.items():
        assert getattr(xder_methods, name) is getattr(importlib.import_module(module), name)
