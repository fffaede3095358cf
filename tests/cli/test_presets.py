"""Every shipped preset resolves into a valid configuration of the method it names."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from xder_cli.errors import UsageError
from xder_cli.presets import default_preset, list_presets, preset_values
from xder_cli.train import build_plan, resolve_config


def _entries() -> list[tuple[str, str, str]]:
    found = []
    for name in list_presets():
        if name == "none":
            continue
        data = tomllib.loads((resources.files("xder_cli") / "presets" / f"{name}.toml").read_text())
        found += [(name, benchmark, method) for benchmark, methods in data.items() for method in methods]
    return found


def test_presets_are_shipped() -> None:
    assert "none" in list_presets()
    assert _entries(), "no preset file found in xder_cli/presets"


@pytest.mark.parametrize(("preset", "benchmark", "method"), _entries())
def test_every_preset_entry_builds(preset: str, benchmark: str, method: str) -> None:
    config = resolve_config(
        method=method, benchmark=benchmark, preset=preset, run={}, train={}, method_values={}, sets=[]
    )
    plan = build_plan(config)
    for section, values in preset_values(preset, benchmark, method).items():
        for key, value in values.items():
            assert plan.config[section][key] == value


def test_tuned_is_the_default_on_seq_digits_and_none_keeps_the_paper_values() -> None:
    assert default_preset("seq-digits", "xder") == "tuned"
    assert default_preset("seq-digits", "derpp") == "tuned"
    assert default_preset("seq-digits", "er") == "none"
    paper = build_plan(
        resolve_config(
            method="xder", benchmark="seq-digits", preset="none", run={}, train={}, method_values={}, sets=[]
        )
    )
    assert (paper.method_config.alpha, paper.method_config.beta, paper.method_config.margin) == (
        0.3,
        0.8,
        0.7,
    )


def test_a_preset_without_the_method_is_an_error() -> None:
    with pytest.raises(UsageError, match="no values for method 'er'"):
        preset_values("tuned", "seq-digits", "er")
