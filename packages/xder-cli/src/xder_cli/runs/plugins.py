"""Plugins: methods, benchmarks and backbones registered by code outside the xder packages.

Two ways in, both loaded by :func:`load_plugins` (``xder-run`` calls it before it builds its parser,
so that its help lists what they register):

* **Entry points** of installed distributions, in the groups :data:`ENTRY_POINT_GROUPS`
  (``xder.methods``, ``xder.benchmarks``, ``xder.backbones``). An entry point's name is the name
  it registers (for messages); its value a module, or an object of one, whose import registers it
  with :func:`xder_methods.register_method`, :func:`xder_data.register_benchmark` or
  :func:`xder_models.register_backbone`::

      [project.entry-points."xder.methods"]
      er_balanced = "my_package.methods"

* :func:`load_plugin`: a module by its import name (installed, or on ``PYTHONPATH``), or a
  ``.py`` file by its path, imported once per process (``xder-run``'s ``--plugin MODULE_OR_FILE``,
  any command, repeatable).

A plugin that fails to import, or that registers a name already taken (by the xder packages or
another plugin), is a :class:`~xder_cli.runs.errors.PluginError`. Runs trained by Ray workers
(``sweep``, ``experiment``) load the same plugins in each worker (:func:`loaded_plugins`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType

from xder_cli.runs.errors import PluginError, option

__all__ = [
    "ENTRY_POINT_GROUPS",
    "PluginError",
    "load_entry_points",
    "load_plugin",
    "load_plugins",
    "loaded_plugins",
]

ENTRY_POINT_GROUPS = ("xder.methods", "xder.benchmarks", "xder.backbones")

_LOADED: list[str] = []  # the plugins loaded in this process by load_plugin, files as absolute paths


def _why(error: BaseException) -> str:
    text = " ".join(str(error).split())
    why = f"{type(error).__name__}: {text}" if text else type(error).__name__
    if isinstance(error, ValueError) and "already registered" in text:
        why += " (a name can be registered once: rename the plugin's)"
    return why


def _entry_point_name(entry: EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    source = f" of {dist.name}" if dist is not None and getattr(dist, "name", None) else ""
    return f"entry point {entry.group}:{entry.name} ({entry.value}{source})"


def load_entry_points() -> list[str]:
    """Import every entry point of :data:`ENTRY_POINT_GROUPS` (a second call imports nothing new).

    Returns:
        ``group:name`` of each entry point loaded.

    Raises:
        PluginError: one failed to import or registered a name twice.
    """
    loaded = []
    for group in ENTRY_POINT_GROUPS:
        for entry in sorted(entry_points(group=group), key=lambda e: e.name):
            try:
                entry.load()
            except Exception as error:
                where = _entry_point_name(entry)
                raise PluginError(f"plugin {where} failed to load: {_why(error)}") from error
            loaded.append(f"{group}:{entry.name}")
    return loaded


def _is_file(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def _file_module_name(path: Path) -> str:
    stem = re.sub(r"\W", "_", path.stem)
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    return f"xder_plugin_{stem}_{digest}"


def load_plugin(spec: str) -> ModuleType:
    """Import a plugin: a ``.py`` file by path (run once per process, as module
    ``xder_plugin_<stem>_<hash of its path>``) or a module by import name.

    Raises:
        PluginError: no such file or module, or its import raised (e.g. a name registered twice).
    """
    if _is_file(spec):
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise PluginError(
                f"{option('plugin')} {spec}: no such file; give a .py file or an importable module name"
            )
        name = _file_module_name(path)
        if name in sys.modules:
            return sys.modules[name]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise PluginError(f"{option('plugin')} {spec}: not a Python file Python can import")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException as error:
            del sys.modules[name]
            if not isinstance(error, Exception):
                raise
            raise PluginError(f"plugin {path} failed to import: {_why(error)}") from error
        if str(path) not in _LOADED:
            _LOADED.append(str(path))
        return module
    try:
        module = importlib.import_module(spec)
    except ModuleNotFoundError as error:
        if error.name is not None and (spec == error.name or spec.startswith(error.name + ".")):
            raise PluginError(
                f"{option('plugin')} {spec}: no module named {error.name!r}; install it, add its folder to "
                "PYTHONPATH, or give the path of a .py file"
            ) from error
        raise PluginError(f"plugin {spec} failed to import: {_why(error)}") from error
    except Exception as error:
        raise PluginError(f"plugin {spec} failed to import: {_why(error)}") from error
    if spec not in _LOADED:
        _LOADED.append(spec)
    return module


def load_plugins(specs: Sequence[str] = ()) -> None:
    """The entry points, then each plugin of ``specs`` in order (see :func:`load_plugin`)."""
    load_entry_points()
    for spec in specs:
        load_plugin(spec)


def load_recorded(specs: Sequence[str], where: Path) -> None:
    """Load the plugins a run recorded (``run.plugins`` of ``where``'s ``config.toml``), as it
    loaded them when it trained.

    Raises:
        PluginError: one that does not load now, named with the run that recorded it.
    """
    for spec in specs:
        try:
            load_plugin(spec)
        except PluginError as error:
            raise PluginError(
                f"{where} was trained with {option('plugin')} {spec}, which does not load now "
                f"({error.template}): install or restore it, or pass {option('plugin')} with where it is now"
            ) from error


def load_recorded_under(folder: Path) -> None:
    """Load the plugins recorded by every run folder directly under ``folder`` (an experiment's
    ``runs/``; none when it does not exist), so that a command run again on its own output
    knows the names its runs were trained with.

    Raises:
        PluginError: a recorded plugin that does not load now.
    """
    if not folder.is_dir():
        return
    from xder_cli.runs import rundir  # imports torch: only where there are runs to read
    from xder_cli.runs.errors import RunDirError

    for run_dir in sorted(folder.iterdir()):
        if (run_dir / rundir.CONFIG).is_file():
            try:
                config = rundir.read_config(run_dir / rundir.CONFIG)
            except RunDirError:
                continue  # the command that reads this run says what is wrong with it
            load_recorded(config.get("run", {}).get("plugins", []), run_dir)


def loaded_plugins() -> tuple[str, ...]:
    """The plugins :func:`load_plugin` loaded in this process (files as absolute paths), for workers."""
    return tuple(_LOADED)
