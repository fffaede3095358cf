"""The shape of xder-methods, read from its sources (``tests/structure.py``, through the ``structure``
fixture of ``tests/conftest.py``): its nox session, which installs xder-methods alone, runs it.

* No import circle among its modules: imports inside functions count, those under ``if
  TYPE_CHECKING:`` do not (they never run).
* No module longer than 600 lines, the limit of every package (``structure.MODULE_LINES``).
* It never prints: what it has to say goes to its caller (return values, errors, callbacks).
* No string of it spells a command-line flag (``--buffer-size``): a message names the setting
  (``method.buffer_size``), and ``xder-run`` words it as its flag
  (``xder_cli.arguments.spell_settings``).
  Docstrings are left out: they are for the reader of the code, and may say what ``xder-run``
  calls a setting.
* Three layers: ``core/`` (the contract and the engine) imports only ``core``; ``parts/`` (what
  methods share) only ``core`` and ``parts``; a module of ``methods/`` imports another method's
  module only for the names it subclasses (``class DER(ER):``), never the ``methods`` package,
  whose ``__init__`` imports every method module to register them (the one module that may).
  The package's own ``__init__`` belongs to no layer: it imports them all.
* Every method registered by xder-methods (:func:`xder_methods.list_methods`) lives in a module of
  its own under ``methods/``, and every module there registers one.

Each rule's test first has its checker find a violation planted in a package of its own, so that
none passes for want of looking.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import xder_methods
from xder_methods import list_methods, method_class


@pytest.fixture(scope="module")
def modules(structure) -> dict[str, Path]:
    found = structure.package_modules(xder_methods)
    assert "xder_methods.core.loop" in found
    return found


def test_no_import_circle(structure, modules, tmp_path: Path) -> None:
    structure.assert_no_import_circle(
        modules, tmp_path, ("xder_methods.methods.der", "xder_methods.methods.er")
    )


def test_modules_stay_short(structure, modules, tmp_path: Path) -> None:
    structure.assert_modules_stay_short(modules, tmp_path)


def test_the_package_never_prints(structure, modules) -> None:
    structure.assert_never_prints(modules)


def test_no_string_spells_a_command_line_flag(structure, modules) -> None:
    structure.assert_no_flag_spelled(modules, "name the setting (method.buffer_size)")


METHODS = "xder_methods.methods"
SUBPACKAGES = {"xder_methods.core", "xder_methods.parts", METHODS}
LAYERS = {"core": {"core"}, "parts": {"core", "parts"}}
"""The layers each lower layer may import (``methods`` may import all three)."""


def test_core_imports_only_core_and_parts_only_core_and_parts(structure, modules, tmp_path: Path) -> None:
    planted = structure.plant(
        tmp_path,
        {
            "core/a.py": "from pkg.parts.b import B\nA = 1\n",
            "core/c.py": "def f():\n    import pkg\n",  # the package: it imports every method
            "parts/b.py": "from pkg.core.a import A\nfrom pkg.methods.m import M\nB = A\n",
            "methods/m.py": "from pkg.core.a import A\nfrom pkg.parts.b import B\nM = A + B\n",
        },
    )
    assert structure.crossings(structure.package_imports(planted), LAYERS, {"pkg.core", "pkg.parts"}) == [
        "pkg.core.a:1 imports pkg.parts.b",
        "pkg.core.c:2 imports pkg",
        "pkg.parts.b:2 imports pkg.methods.m",
    ]
    imports = structure.package_imports(modules)
    assert any(i.module.startswith("xder_methods.parts.") for i in imports)  # parts import core
    assert structure.crossings(imports, LAYERS, SUBPACKAGES) == []


def test_a_method_imports_another_only_as_its_base_class(structure, modules, tmp_path: Path) -> None:
    planted = structure.plant(
        tmp_path,
        {
            "methods/__init__.py": "from pkg.methods import base, child, other\n",  # registers them
            "methods/base.py": "class Base:\n    pass\ndef helper():\n    pass\n",
            "methods/child.py": "from pkg.methods.base import Base\nclass Child(Base[int]):\n    pass\n",
            "methods/other.py": (
                "from pkg.methods.base import Base, helper\n"
                "import pkg.methods.child\n"
                "from pkg import methods\n"
                "class Other(Base):\n    pass\n"
            ),
        },
    )
    assert structure.imports_beyond_bases(structure.package_imports(planted), planted, "pkg.methods") == [
        "pkg.methods.other:1 imports pkg.methods.base.helper",
        "pkg.methods.other:2 imports pkg.methods.child",
        "pkg.methods.other:3 imports pkg.methods",
    ]
    imports = structure.package_imports(modules)
    assert any(i.module == "xder_methods.methods.der" and i.name == "ER" for i in imports)  # DER(ER)
    assert structure.imports_beyond_bases(imports, modules, METHODS) == []


def test_every_method_lives_in_a_module_of_its_own(structure, modules) -> None:
    planted = {"a": "pkg.methods.a", "b": "pkg.methods.ab", "c": "pkg.methods.ab", "d": "pkg.parts.d"}
    assert structure.shared_or_outside(planted, "pkg.methods") == [
        "b: pkg.methods.ab",
        "c: pkg.methods.ab",
        "d: pkg.parts.d",
    ]
    # The package's own methods (a plugin's, or one a test registers, live elsewhere).
    homes = {
        name: method_class(name).__module__
        for name in list_methods()
        if method_class(name).__module__.startswith("xder_methods.")
    }
    assert len(homes) > 20
    assert structure.shared_or_outside(homes, METHODS) == []
    assert set(homes.values()) == {m for m in modules if m.startswith(METHODS + ".")}
