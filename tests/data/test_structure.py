"""The shape of xder-data, read from its sources (``tests/structure.py``, through the ``structure``
fixture of ``tests/conftest.py``): its nox session, which installs xder-data alone, runs it.

* No import circle among its modules: imports inside functions count, those under ``if
  TYPE_CHECKING:`` do not (they never run).
* No module longer than 600 lines, the limit of every package (``structure.MODULE_LINES``).
* It never prints: what it has to say goes to its caller (return values, errors, the progress
  wrapper it is given).
* No string of it spells a command-line flag (``--data-root``): a message names the setting
  (``run.data_root``, ``ImportOptions.num_frames``) or the call that makes the files
  (``prepare_data('ntu60', 'ROOT', source='DIR')``: ``xder_data.errors.prepare_call``), and
  ``xder-run`` words them as its flags and commands (``xder_cli.arguments.spell_settings``).
  Docstrings are left out: they are for the reader of the code, and may say what ``xder-run``
  calls a setting.

Each rule's test first has its checker find a violation planted in a package of its own, so that
none passes for want of looking.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import xder_data


@pytest.fixture(scope="module")
def modules(structure) -> dict[str, Path]:
    found = structure.package_modules(xder_data)
    assert "xder_data.importers" in found
    return found


def test_no_import_circle(structure, modules, tmp_path: Path) -> None:
    structure.assert_no_import_circle(modules, tmp_path, ("xder_data.importers", "xder_data.ntu60"))


def test_modules_stay_short(structure, modules, tmp_path: Path) -> None:
    structure.assert_modules_stay_short(modules, tmp_path)


def test_the_package_never_prints(structure, modules) -> None:
    structure.assert_never_prints(modules)


def test_no_string_spells_a_command_line_flag(structure, modules) -> None:
    structure.assert_no_flag_spelled(modules, "name the setting (run.data_root; errors.prepare_call)")
