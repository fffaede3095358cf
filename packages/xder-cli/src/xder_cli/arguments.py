"""The command line's vocabulary, shared by ``main`` and every command: the parser that words a
usage mistake in one line, the help formatter that keeps an ``examples:`` epilog as written, the
argument types (comma lists, numbers with a bound, class orders, ``--set``'s assignments), an old
flag spelling kept for a release, and the library's errors as the command line words them
(:func:`flag`, :func:`error_line`; the library packages' messages: :func:`spell_settings`). What a
command's flags mean for a run is :mod:`xder_cli.commands.common`'s."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from xder_cli.catalogue import PROTOCOL_ALIASES
from xder_cli.runs._dotted import SECTIONS, parse_assignment  # settings imports the library
from xder_cli.runs.errors import OPTIONS, RunError

__all__ = [
    "FLAGS",
    "SETTING_FLAGS",
    "SOURCE_FLAGS",
    "DeprecatedAlias",
    "ExamplesFormatter",
    "Parser",
    "assignment",
    "at_least",
    "class_order",
    "error_line",
    "flag",
    "fraction",
    "int_list",
    "name_list",
    "plugin_arguments",
    "protocol_name",
    "spell_settings",
]


_SPELT_OTHERWISE = {
    "overrides": "--set",
    "run.loggers": "--logger",
    "params": "--param",
    "train_run": "xder-run train",
    "analyze_run": "xder-run analyze",
}
FLAGS = {
    name: _SPELT_OTHERWISE.get(name, "--" + name.rsplit(".", 1)[-1].replace("_", "-")) for name in OPTIONS
}
"""The command line's spelling of each option the library's messages name
(:data:`xder_cli.runs.errors.OPTIONS`): its flag, ``--`` and its last part with dashes unless
spelt otherwise (``train_run``: the command)."""


def flag(option: str) -> str:
    """How the command line spells a library option: ``run.device`` -> ``--device``."""
    return FLAGS[option]


SETTING_FLAGS = {
    "run.data_root": "--data-root",
    "run.protocol": "--protocol",
    "method.buffer_size": "--buffer-size",
    "prepare_data.source": "--source",
    "ImportOptions.num_frames": "--frames",
    "ImportOptions.missing_list": "--missing",
    "ImportOptions.miniimagenet_format": "--format",
    "ImportOptions.test_per_class": "--test-per-class",
    "ImportOptions.seed": "--seed",
}
"""The command line's flag of each setting that a library package's message names: a run's
setting by its dotted key, an import's input by :func:`xder_data.prepare_data`'s argument or
:class:`xder_data.ImportOptions`' field (the packages spell no flag: :mod:`xder_data.errors`)."""
SOURCE_FLAGS = {"ntu60": "--raw"}
"""``xder-run data prepare``'s flag for the files a kind converts, where it is not ``--source``."""

_SETTING = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, SETTING_FLAGS)) + r")(?!\w|\.\w)")
# A ``section.key=`` the message names, with the quote that may open it: the flag goes before the
# quote (``--set 'benchmark.classes_per_task=[2, 1]'``), so that the words paste into a shell.
_ASSIGNED = re.compile(r"(?<![\w.-])('?(?:" + "|".join(s for s in SECTIONS if s != "run") + r")\.\w+=)")
_PREPARE = re.compile(r"prepare_data\('([^']+)', '([^']*)'(?:, source='([^']*)')?\)")
_DOWNLOAD = re.compile(r"download_data\('([^']+)', '([^']*)'\)")


def _prepare_command(match: re.Match[str]) -> str:
    kind, root, source = match.groups()
    given = "" if source is None else f" {SOURCE_FLAGS.get(kind, '--source')} {source}"
    return f"xder-run data prepare {kind}{given} --data-root {root}"


def spell_settings(text: str) -> str:
    """A library package's message as ``xder-run`` words it: each setting of
    :data:`SETTING_FLAGS` as its flag, another ``section.key=VALUE`` as ``--set
    section.key=VALUE``, and a call that makes a benchmark's files
    (:func:`xder_data.errors.prepare_call`, :func:`xder_data.errors.download_call`) as the
    ``xder-run data`` command that makes them.

    >>> spell_settings("pass run.data_root ROOT, after `download_data('cifar100', 'ROOT')`")
    'pass --data-root ROOT, after `xder-run data download cifar100 --data-root ROOT`'
    """
    text = _PREPARE.sub(_prepare_command, text)
    text = _DOWNLOAD.sub(lambda match: f"xder-run data download {match[1]} --data-root {match[2]}", text)
    text = _SETTING.sub(lambda match: SETTING_FLAGS[match[1]], text)
    return _ASSIGNED.sub(r"--set \1", text)


def error_line(error: BaseException) -> str:
    """An error as ``xder-run`` prints it: one line, the run library's options spelled as flags
    (:mod:`xder_cli.runs.errors`), the settings a library package's message names too
    (:func:`spell_settings`)."""
    text = error.render(flag) if isinstance(error, RunError) else spell_settings(str(error))
    return " ".join(text.split())


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr and exit status 2, and a subcommand
    refuses the flags it does not know itself (naming its own ``--help``, not ``xder-run``'s)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and " " in self.prog:  # a subcommand's parser: "xder-run experiment"
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def class_order(text: str) -> str | list[int]:
    if text in ("natural", "reversed", "random"):
        return text
    try:
        value = json.loads(text if text.lstrip().startswith("[") else f"[{text}]")
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not natural, reversed, random or a comma-separated permutation like 3,1,0,2"
        )
    return value


def assignment(text: str) -> tuple[str, object]:
    """``--set section.key=value`` -> ``("section.key", value)``."""
    try:
        return parse_assignment(text)
    except RunError as error:
        raise argparse.ArgumentTypeError(error_line(error)) from error


def int_list(text: str) -> tuple[int, ...]:
    """A flag's comma-separated integers (``0,1,2``): at least one, none repeated."""
    try:
        values = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated integers, e.g. 0,1,2") from error
    if not values:
        raise argparse.ArgumentTypeError("give at least one value, e.g. 0,1,2")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} repeats a value")
    return values


def name_list(text: str) -> tuple[str, ...]:
    """A flag's comma-separated names (``xder,derpp,er``): at least one, none repeated."""
    values = tuple(s.strip() for s in text.split(",") if s.strip())
    if not values:
        raise argparse.ArgumentTypeError("give at least one name, e.g. xder,derpp,er")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} repeats a name")
    return values


def at_least(low: float, kind: type = int) -> Any:
    """A flag's number of type ``kind``, at least ``low`` (an argparse type)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}"
            ) from error
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low:g}, got {text}")
        return value

    return parse


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from error
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1)")
    return value


def _values(argv: Sequence[str], name: str) -> list[str]:
    """The values of ``name X`` and ``name=X`` anywhere in ``argv`` (before ``--``)."""
    values = []
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == name and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(name + "="):
            values.append(arg[len(name) + 1 :])
    return values


def plugin_arguments(argv: Sequence[str]) -> list[str]:
    """The values of ``--plugin X`` and ``--plugin=X`` anywhere in ``argv`` (before ``--``): the
    plugins to load before the parser is built."""
    return _values(argv, flag("plugin"))


def command_word(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is neither an option nor a
    ``--plugin``'s value), read before the parser is built."""
    name = flag("plugin")
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return None
        if arg == name:
            i += 2
            continue
        if not arg.startswith("-"):
            return arg
        i += 1
    return None


def out_folder(argv: Sequence[str]) -> str | None:
    """The value of ``--out`` in ``argv`` (the last one, as argparse keeps), before parsing."""
    values = _values(argv, "--out")
    return values[-1] if values else None


class ExamplesFormatter(argparse.HelpFormatter):
    """Wraps the description as usual; keeps an ``examples:`` epilog's lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def protocol_name(text: str) -> str:
    """``--protocol NAME``; a former name (``paper``, now ``full``: :func:`xder_data.canonical_protocol`)
    still works, with a warning."""
    name = PROTOCOL_ALIASES.get(text, text)
    if name != text:
        print(
            f"warning: --protocol {text} is now called {name} (the same protocol); {text} goes in the next "
            "release",
            file=sys.stderr,
        )
    return name


class DeprecatedAlias(argparse.Action):
    """An old spelling of a flag, kept for one release: it sets the new flag's value and says, on
    stderr, to use the new one (``new``)."""

    def __init__(self, *args: Any, new: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.new = new

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        print(
            f"warning: {option_string} is deprecated and goes in the next release: use {self.new} "
            "(the same setting)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)
