"""The shape of ``xder-cli``: commands over ``xder_cli.runs`` over the four library packages, with
no import circle, read from the sources (imports inside functions included); and its tests kept
to the same layers (tests/cli imports no private name of the package)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import xder_cli

SOURCE = Path(xder_cli.__file__).parent
LONGEST_MAIN = 150
# All of xder_cli.commands (a command parses, calls and prints; its vocabulary is xder_cli.arguments).
COMMANDS_LINES = 1250


def _modules() -> dict[str, Path]:
    modules = {}
    for path in SOURCE.rglob("*.py"):
        parts = ["xder_cli", *path.relative_to(SOURCE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imported(name: str) -> str | None:
    """The module of xder_cli that an import of dotted ``name`` loads last (its longest known prefix)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in MODULES:
            return ".".join(parts[:end])
    return None


def import_graph() -> dict[str, set[str]]:
    """module -> the xder_cli modules it imports anywhere in its source; ``from package import
    module`` is an edge to the module, ``importlib.import_module("...")`` with a literal counts."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names += [f"{base}.{alias.name}" for alias in node.names]
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.append(node.args[0].value)
        graph[module] = {found for name in names if (found := _imported(name)) not in (None, module)}
    return graph


def test_the_cycle_finder_finds_a_circle_and_accepts_a_tree(structure) -> None:
    assert structure.cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert structure.cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert structure.cycle({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == ["a", "b", "a"]


def test_the_graph_sees_imports_inside_functions() -> None:
    graph = import_graph()
    # commands/__init__ loads every command with importlib.import_module(f"...{name}"): not a
    # literal, so it is no edge; main imports it at the top.
    assert "xder_cli.commands" in graph["xder_cli.main"]
    assert "xder_cli.runs.rundir" in graph["xder_cli.runs.lifecycle"]


def test_no_module_of_xder_cli_imports_itself_back(structure) -> None:
    assert structure.cycle(import_graph()) is None


def test_the_library_never_imports_the_command_line() -> None:
    command_line = {"xder_cli.main", "xder_cli.errors", "xder_cli.progress", "xder_cli.arguments"}
    for module, imported in import_graph().items():
        if module.startswith("xder_cli.runs"):
            wrong = {m for m in imported if m in command_line or m.startswith("xder_cli.commands")}
            assert not wrong, f"{module} imports {sorted(wrong)}"


def test_importing_the_library_loads_no_command() -> None:
    library = sorted(m for m in MODULES if m.startswith("xder_cli.runs"))
    code = (
        f"import sys, {', '.join(library)}\n"
        "print(sorted(m for m in sys.modules if m.startswith('xder_cli') and not "
        "m.startswith('xder_cli.runs') and m != 'xder_cli'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_library_s_names_load_on_first_use() -> None:
    """``import xder_cli.runs.errors`` (the command line's, before it parses) loads no library
    package; each name xder_cli.runs exports is there once asked for."""
    code = (
        "import sys, xder_cli.runs.errors, xder_cli.runs.plugins\n"
        "library = ('torch', 'xder_data', 'xder_methods', 'xder_models', 'xder_eval')\n"
        "print([m for m in library if m in sys.modules])\n"
        "import xder_cli.runs\n"
        "print(all(getattr(xder_cli.runs, name).__module__.startswith('xder_cli.runs.') "
        "for name in xder_cli.runs.__all__))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "True"]


def test_modules_stay_short_and_main_only_assembles(structure, tmp_path: Path) -> None:
    """No module longer than the limit of every package (``structure.MODULE_LINES``)."""
    structure.assert_modules_stay_short(MODULES, tmp_path)
    assert len(MODULES["xder_cli.main"].read_text(encoding="utf-8").splitlines()) < LONGEST_MAIN


def test_the_library_never_prints(structure) -> None:
    """xder_cli.runs hands its lines to its caller (callbacks, return values, errors); the
    commands and xder_cli.progress print them."""
    structure.check_the_print_finder()
    found = [
        f"{module}:{call}"
        for module, path in MODULES.items()
        if module.startswith("xder_cli.runs")
        for call in structure.printing_calls(path.read_text(encoding="utf-8"))
    ]
    assert found == []


RUN_FILES = {
    "config.toml",
    "events.jsonl",
    "results.json",
    "checkpoint.pt",
    "analysis.json",
    "attempts.jsonl",
}
RUN_FILE_ACCESS = {
    "read_config",
    "write_config",
    "read_results",
    "read_events",
    "complete_results",
    "load_checkpoint",
    "save_checkpoint",
    "EventLog",
    "read_analysis",
    "write_analysis",
    "read_attempts",
    "read_text",
    "write_text",
    "read_bytes",
    "write_bytes",
    "open",
}


def test_no_command_reads_or_writes_a_run_folder_itself() -> None:
    """A command parses, calls the library and prints: no run folder's file named as a value, no
    file opened, no run file read or written (help texts may name the files)."""
    found = []
    for module, path in MODULES.items():
        if not module.startswith("xder_cli.commands"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in RUN_FILES:
                found.append(f"{module}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                if name in RUN_FILE_ACCESS:
                    found.append(f"{module}:{node.lineno}: {name}()")
    assert found == []


def test_the_commands_stay_thin() -> None:
    lengths = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}
    assert sum(n for m, n in lengths.items() if m.startswith("xder_cli.commands")) <= COMMANDS_LINES


COMMAND_TESTS = Path(__file__).resolve().parents[1] / "cli"
"""tests/cli: what a user types, through ``xder_cli.main.main``; the library's own tests are here."""


def private_imports(source: str) -> list[str]:
    """Each private name of xder_cli that ``source`` imports (``from xder_cli... import _name``, or
    any module of the path private; dunders such as ``__version__`` are not), as ``line: module.name``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            private = [part for part in parts[1:] if part.startswith("_") and not part.endswith("__")]
            if parts[0] == "xder_cli" and private:
                found.append(f"{node.lineno}: {name}")
    return found


def test_the_command_tests_import_no_private_name_of_xder_cli() -> None:
    """A test of what a user types has no business with the package's private names: one that
    needs them tests the library, and belongs in tests/runs."""
    planted = (
        "from xder_cli.main import main\n"
        "def test():\n"
        "    from xder_cli.runs.experiments.common import _check_existing, faa_metrics\n"
        "    import xder_cli.runs._stats\n"
        "from xder_cli import __version__\n"
    )
    assert private_imports(planted) == [
        "3: xder_cli.runs.experiments.common._check_existing",
        "4: xder_cli.runs._stats",
    ]
    files = sorted(COMMAND_TESTS.rglob("*.py"))
    assert files, f"no test files under {COMMAND_TESTS}"
    found = [
        f"{p.relative_to(COMMAND_TESTS)}:{line}" for p in files for line in private_imports(p.read_text())
    ]
    assert found == []
