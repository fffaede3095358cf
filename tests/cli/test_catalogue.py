"""The catalogue (xder_cli.catalogue): what the parsers name of the library without importing it
equals what the library says, read in a fresh interpreter (no plugin loaded): each registry's
built-in names, each constant its owner's. A name registered or a default changed without its
copy in the catalogue fails here."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from xder_cli import catalogue

REGISTRIES = {name: value for name, value in vars(catalogue).items() if isinstance(value, catalogue.Registry)}


def owners_now() -> dict[str, object]:
    """Each registry's lister called, and each copied constant's owner read, in a fresh
    interpreter that imports the library and loads no plugin (as JSON)."""
    wanted = {name: (registry.lister, True) for name, registry in REGISTRIES.items()}
    wanted |= {name: (owner, False) for name, owner in catalogue.COPIES.items()}
    code = (
        "import importlib, json, sys\n"
        "found = {}\n"
        "for name, (dotted, call) in json.loads(sys.argv[1]).items():\n"
        "    module, _, attribute = dotted.rpartition('.')\n"
        "    value = getattr(importlib.import_module(module), attribute)\n"
        "    found[name] = value() if call else value\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(wanted)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def as_json(value: object) -> object:
    return json.loads(json.dumps(value))


def test_the_catalogue_equals_the_library() -> None:
    found = owners_now()
    copies = {name: registry.builtin for name, registry in REGISTRIES.items()}
    copies |= {name: getattr(catalogue, name) for name in catalogue.COPIES}
    differ = {
        name: (as_json(copy), found[name]) for name, copy in copies.items() if as_json(copy) != found[name]
    }
    assert differ == {}, f"xder_cli/catalogue.py differs from its owners (catalogue, owner): {differ}"


def test_every_name_of_the_catalogue_names_its_owner() -> None:
    constants = {name for name in catalogue.__all__ if name.isupper() and name not in ("COPIES", "OWNED")}
    assert set(REGISTRIES) | set(catalogue.COPIES) | set(catalogue.OWNED) == constants
    assert {"METHODS", "BENCHMARKS", "BACKBONES", "IMPORTERS", "DOWNLOADS", "EXPERIMENTS"} <= set(REGISTRIES)


def test_a_registry_is_read_from_its_module_once_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin that registers a name has imported the registry's module: its names then come
    from there, the plugin's among them."""
    registry = catalogue.Registry("xder_test_registry.list_things", ("built-in",))
    monkeypatch.delitem(sys.modules, "xder_test_registry", raising=False)
    assert registry.names() == ["built-in"]
    module = types.ModuleType("xder_test_registry")
    module.list_things = lambda: ["built-in", "a plugin's"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "xder_test_registry", module)
    assert registry.names() == ["built-in", "a plugin's"]
