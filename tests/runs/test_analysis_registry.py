"""The analysis registry (xder_cli.runs.analyses.registry): the built-in analyses, one module
each, in the order ``xder-run analyze`` runs them; a name registered once; what the analyses record
after each task (task_end_analysis), in what order and in which mode."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch import nn

from xder_cli.runs.analyses import (
    TaskEndRecord,
    analyse,
    get_analysis,
    list_analyses,
    recorded_analyses,
    recorded_keys,
    register_analysis,
    task_end_analysis,
)
from xder_cli.runs.errors import SettingError

BUILT_IN = [
    "ece",
    "ss",
    "head_bias",
    "grad_norms",
    "buffer_logits",
    "future_fewshot_auc",
    "resources",
    "flatness",
    "fisher_trace",
    "buffer_informativeness",
    "pointing",
    "secondary_targets",
]

pytestmark = pytest.mark.usefixtures("fresh_registries")


def test_the_registry_lists_exactly_the_built_in_analyses_one_module_each() -> None:
    assert list_analyses() == BUILT_IN
    assert recorded_analyses() == ["grad_norms", "future_fewshot_auc"]
    assert recorded_keys() == ["grad_norms", "buffer_class_logits", "fewshot"]
    modules = [get_analysis(name).run.__module__ for name in BUILT_IN]
    assert all(m.startswith("xder_cli.runs.analyses.") for m in modules)
    assert len(set(modules)) == len(BUILT_IN)  # one module per analysis
    assert get_analysis("ss").filed_as == ("ss_err", "ss_nll")
    assert [n for n in BUILT_IN if get_analysis(n).filed_as] == ["ss"]


def test_a_name_is_registered_once_and_an_unknown_one_is_a_setting_error() -> None:
    with pytest.raises(ValueError, match="analysis 'ece' is already registered"):
        register_analysis("ece", summary=str)(lambda run, out, options: {})
    with pytest.raises(SettingError, match="unknown analysis 'vibes': choose from ece, ss, "):
        get_analysis("vibes")


def test_a_registered_analysis_runs_through_analyse_with_its_options(tmp_path) -> None:
    @register_analysis("toy", summary=lambda value: f"items {value['items']}")
    def toy(run, out, options):
        (out / "toy.png").write_bytes(b"png")
        return {"items": options.max_items, "where": out}

    assert list_analyses() == [*BUILT_IN, "toy"]
    run = SimpleNamespace(run_dir=tmp_path)
    value = analyse(run, "toy", max_items=7)  # type: ignore[arg-type]
    assert value == {"items": 7, "where": tmp_path / "analysis"}
    assert (tmp_path / "analysis" / "toy.png").exists()
    assert get_analysis("toy").summary(value) == "items 7"
    with pytest.raises(TypeError):
        analyse(run, "toy", epochs=3)  # type: ignore[arg-type]


class _NoMemory(nn.Linear):
    """A method with no replay memory (``replay_memory()`` is None), as the contract declares it."""

    def replay_memory(self) -> None:
        return None


def _loop(method: nn.Module) -> SimpleNamespace:
    """After the last of two tasks: no future head for the few-shot record; no buffer."""
    return SimpleNamespace(task=2, n_tasks=2, method=method)


def test_task_end_records_in_order_the_cheap_ones_always_the_others_in_evaluation_mode() -> None:
    seen = []

    def late(loop):
        seen.append(("late", loop.method.training))
        return {"late": 1}

    def needed(loop):
        seen.append(("needed", loop.method.training))
        return {"needed": 2}

    def cheap(loop):
        seen.append(("cheap", loop.method.training))
        return {"cheap": 3}

    register_analysis("late", summary=str, at_task_end=TaskEndRecord(late))(lambda *a: {})
    register_analysis("needed", summary=str, needs_records=True, at_task_end=TaskEndRecord(needed))(
        lambda *a: {}
    )
    register_analysis("cheap", summary=str, at_task_end=TaskEndRecord(cheap, always=True))(lambda *a: {})
    method = _NoMemory(2, 2)
    plain = task_end_analysis(_loop(method), full=False)
    assert list(plain) == ["event", "task", "peak_memory_mb", "cheap"]
    assert (plain["event"], plain["task"], plain["cheap"]) == ("analysis", 1, 3)
    assert seen == [("cheap", True)]
    seen.clear()
    full = task_end_analysis(_loop(method), full=True)
    # those that need the records first, then the others, those recorded always last; then the time
    assert list(full) == ["event", "task", "needed", "late", "peak_memory_mb", "cheap", "seconds"]
    assert seen == [("needed", False), ("late", False), ("cheap", False)]
    assert method.training  # put back as it was
    assert isinstance(full["seconds"], float)
