"""Which scenarios each method runs in: every registered method is built on a setting of each
scenario and either builds or refuses with one line naming the method, the scenario and why
(:attr:`MethodBase.refused_scenarios <xder_methods.MethodBase.refused_scenarios>`), as the table
below says."""

from __future__ import annotations

import pytest
import torch

from xder_methods import (
    SCENARIOS,
    ContinualSetting,
    MethodConfigError,
    Transforms,
    create_method,
    list_methods,
    method_config_class,
    registered_name,
)

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
