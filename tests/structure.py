"""The shape of a package, read from its sources with ``ast`` (nothing of it is imported): its
modules, the imports between them (inside functions too), import circles, module lengths, the
command-line flags its strings spell, the calls that print, the base classes of its classes.

Shared by the structure tests of the library packages (``tests/<area>/test_structure.py``), which
reach it through the ``structure`` fixture of ``tests/conftest.py``: the test sessions import test
files by path (``--import-mode=importlib``), so this file is loaded by path too, and needs no
package installed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType


def package_modules(package: ModuleType) -> dict[str, Path]:
    """Every module of the imported ``package``, by dotted name (a package by its own name), read
    from the folder it was imported from."""
    return modules_in(Path(str(package.__file__)).parent, package.__name__)


def modules_in(folder: Path, name: str) -> dict[str, Path]:
    """Every module of the package ``name`` whose sources are ``folder``, by dotted name."""
    modules = {}
    for path in sorted(folder.rglob("*.py")):
        parts = [name, *path.relative_to(folder).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def plant(folder: Path, files: dict[str, str]) -> dict[str, Path]:
    """A package ``pkg`` written under ``folder`` (``files``: path -> source; every folder gets
    an empty ``__init__.py`` unless given), and its modules: where a self-test plants a violation."""
    root = folder / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text("")
        path.write_text(text)
    return modules_in(root, "pkg")


@dataclass(frozen=True)
class Import:
    """One import, by ``module``, of ``target`` (a module of the same package, the longest
    known prefix of what it names): of the name ``name`` from it, or of the module itself
    (``name`` None); at ``line``."""

    module: str
    target: str
    name: str | None
    line: int


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (its ``else`` is kept):
    imports there are for the type checker and never run."""
    found: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def source_imports(
    module: str, source: str, modules: dict[str, Path], *, is_package: bool = False
) -> list[Import]:
    """The imports of ``module`` (whose text is ``source``) that load one of ``modules``, anywhere
    in it (inside functions too; not under ``if TYPE_CHECKING:``). ``from package import module``
    imports that module; ``importlib.import_module("...")`` with a literal counts."""

    def known(name: str) -> str | None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in modules:
                return ".".join(parts[:end])
        return None

    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []

    def add(dotted: str, line: int, name: str | None = None) -> None:
        target = known(f"{dotted}.{name}" if name else dotted)
        if target is None or target == module:
            return
        imported = None if name is None or target == f"{dotted}.{name}" else name
        found.append(Import(module, target, imported, line))

    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                add(base, node.lineno, alias.name)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            add(node.args[0].value, node.lineno)
    return sorted(found, key=lambda i: (i.line, i.target, i.name or ""))


def package_imports(modules: dict[str, Path]) -> list[Import]:
    """Every import between ``modules`` (:func:`source_imports` of each)."""
    return [
        found
        for module, path in modules.items()
        for found in source_imports(
            module, path.read_text(encoding="utf-8"), modules, is_package=path.name == "__init__.py"
        )
    ]


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of ``modules`` it imports (:func:`package_imports`)."""
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for found in package_imports(modules):
        graph[found.module].add(found.target)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


MODULE_LINES = 600
"""The most lines a module of any package may have: one limit for every package, where a module
that outgrows it is split along its seams, never the limit raised to the package's longest."""


def too_long(modules: dict[str, Path], cap: int = MODULE_LINES) -> dict[str, int]:
    """The modules longer than ``cap`` lines, with their lengths."""
    lengths = {module: len(path.read_text(encoding="utf-8").splitlines()) for module, path in modules.items()}
    return {module: n for module, n in lengths.items() if n > cap}


FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
"""A command-line flag as ``xder-run`` spells its own (``--buffer-size``, ``--data-root``)."""


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants of ``tree`` that stand alone as statements: the docstrings
    of the module, its classes and functions, and those of attributes (a string after an
    assignment)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def flags_spelled(source: str) -> list[str]:
    """Each command-line flag that a string of ``source`` spells (docstrings left out: they are
    for the reader of the code, and may say what ``xder-run`` calls a setting), as
    ``line: --flag``; f-strings are read part by part."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found += [f"{node.lineno}: {flag}" for flag in FLAG.findall(node.value)]
    return sorted(set(found), key=lambda text: (int(text.split(":")[0]), text))


STREAMS = ("stdout", "stderr", "__stdout__", "__stderr__")


def printing_calls(source: str) -> list[str]:
    """Each call in ``source`` that prints: ``print(...)``, or ``write``/``writelines`` on
    ``sys.stdout`` or ``sys.stderr``, as ``line: call``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "print":
            found.append(f"{node.lineno}: print")
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in ("write", "writelines")
            and isinstance(func.value, ast.Attribute)
            and func.value.attr in STREAMS
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "sys"
        ):
            found.append(f"{node.lineno}: sys.{func.value.attr}.{func.attr}")
    return found


def base_class_names(source: str) -> set[str]:
    """The names that ``source`` uses as a base class in a ``class X(Base):`` statement (the
    first name of a dotted base: ``module`` of ``module.Base``; ``Base`` of a generic
    ``Base[Config]``)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                while isinstance(base, ast.Attribute | ast.Subscript):
                    base = base.value
                if isinstance(base, ast.Name):
                    names.add(base.id)
    return names


def crossings(imports: list[Import], allowed: dict[str, set[str]], subpackages: set[str]) -> list[str]:
    """Each import by a module of a layer named in ``allowed`` (a sub-package of its package:
    ``core`` for ``xder_methods.core.loop`` and ``xder_methods.core``) of a module outside the
    layers it may import (``allowed[layer]``; the package's own ``__init__`` is in none), as
    ``module:line imports target``. ``subpackages``: the dotted names of the sub-packages."""

    def layer(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 2 or module in subpackages else ""

    return [
        f"{i.module}:{i.line} imports {i.target}"
        for i in imports
        if layer(i.module) in allowed and layer(i.target) not in allowed[layer(i.module)]
    ]


def imports_beyond_bases(imports: list[Import], modules: dict[str, Path], package: str) -> list[str]:
    """Each import by a module of ``package`` (a folder of modules: ``xder_methods.methods``) of
    another of its modules, or of ``package`` itself, that is not of a name the importer uses as a
    base class (``class X(Base):``), as ``module:line imports target[.name]``. ``package``'s own
    ``__init__`` is not one of its modules here: it may import them all."""
    found = []
    for i in imports:
        ours = i.target == package or i.target.startswith(package + ".")
        if not i.module.startswith(package + ".") or not ours:
            continue
        bases = base_class_names(modules[i.module].read_text(encoding="utf-8"))
        if i.target == package or i.name is None or i.name not in bases:
            found.append(f"{i.module}:{i.line} imports {i.target}" + (f".{i.name}" if i.name else ""))
    return found


def shared_or_outside(homes: dict[str, str], package: str) -> list[str]:
    """``homes``: each registered name -> the module that defines it. Each name whose module is
    not a module of ``package``, or defines another registered name too, as ``name: module``."""
    count: dict[str, int] = {}
    for module in homes.values():
        count[module] = count.get(module, 0) + 1
    return [
        f"{name}: {module}"
        for name, module in sorted(homes.items())
        if not module.startswith(package + ".") or count[module] > 1
    ]


# ---------------------------------------------------------------------------------------------
# Self-tests: each checker finds what it is for in a planted package and passes what it should,
# so that no rule of a structure test passes for want of looking.


def check_the_cycle_finder(folder: Path) -> None:
    """A circle closed by an import inside a function is found; one closed only under ``if
    TYPE_CHECKING:`` is not; a tree passes."""
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    planted = plant(
        folder / "circle",
        {
            "a.py": "from pkg.b import f\n",
            "b.py": "def f():\n    from . import a\n",
            "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import D\n",
            "d.py": "import pkg.c\nD = 1\n",
        },
    )
    graph = import_graph(planted)
    assert (graph["pkg.b"], graph["pkg.c"], graph["pkg.d"]) == ({"pkg.a"}, set(), {"pkg.c"})
    assert cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]


def check_the_length_cap(folder: Path) -> None:
    planted = plant(folder / "long", {"short.py": "x = 1\n", "long.py": "x = 1\n" * 3})
    assert too_long(planted, 2) == {"pkg.long": 3}
    assert too_long(planted, 3) == {}


def check_the_flag_finder() -> None:
    """A flag in a message or any other string is found; in a docstring or a comment it is not,
    nor dashes that are no flag."""
    planted = (
        '"""Docstrings may say ``xder-run train --buffer-size 200``."""\n'
        "def f(n):\n"
        '    raise ValueError(f"pass --buffer-size {n}, or --data-root")  # not: --in-a-comment\n'
        'OK = ("a -- b", "x--y", "-1", "method.buffer_size", "---")\n'
        'BAD = {"flag": "--set"}\n'
    )
    assert flags_spelled(planted) == ["3: --buffer-size", "3: --data-root", "5: --set"]


def check_the_print_finder() -> None:
    planted = (
        "import sys\n"
        "def f(log):\n"
        "    print('x', file=sys.stderr)\n"
        "    sys.stdout.write('y')\n"
        "    sys.stderr.writelines(['z'])\n"
        "    log.write('kept in a file: fine')\n"
    )
    assert printing_calls(planted) == ["3: print", "4: sys.stdout.write", "5: sys.stderr.writelines"]


# ---------------------------------------------------------------------------------------------
# The rules every library package's structure test applies, each after its checker's self-test.


def assert_no_import_circle(modules: dict[str, Path], folder: Path, edge: tuple[str, str]) -> None:
    """No import circle among ``modules``; ``edge`` (importer, imported) is one the graph must see."""
    check_the_cycle_finder(folder)
    graph = import_graph(modules)
    assert edge[1] in graph[edge[0]]  # the graph sees the package's imports
    found = cycle(graph)
    assert found is None, "import circle: " + " -> ".join(found or [])


def assert_modules_stay_short(modules: dict[str, Path], folder: Path) -> None:
    """No module of ``modules`` longer than :data:`MODULE_LINES` lines."""
    check_the_length_cap(folder)
    long = too_long(modules)
    assert not long, f"longer than {MODULE_LINES} lines (module: lines): {long}"


def assert_never_prints(modules: dict[str, Path]) -> None:
    check_the_print_finder()
    found = [
        f"{module}:{call}"
        for module, path in modules.items()
        for call in printing_calls(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def assert_no_flag_spelled(modules: dict[str, Path], instead: str) -> None:
    """No string of ``modules`` (docstrings aside) spells a flag; ``instead`` says what to write."""
    check_the_flag_finder()
    found = [
        f"{module}:{flag}"
        for module, path in modules.items()
        for flag in flags_spelled(path.read_text(encoding="utf-8"))
    ]
    assert found == [], f"{instead}, not the flag: {found}"
