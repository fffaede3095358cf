"""The records that cross the run library's modules, typed: what a run folder holds
(:data:`Config`, :class:`Results`, :data:`Event`, :data:`Checkpoint`, :class:`Attempt`) and a
run's outcome in a sweep or an experiment (:class:`Outcome`).

Where a document is open (a configuration's sections hold each target's own fields, a plugin's
method or backbone brings its own; an event's fields are its kind's; a checkpoint holds each
method's state) it is a named mapping of ``Any``; where its keys are fixed it is a
:class:`~typing.TypedDict`, read back from JSON unchecked (the library wrote it).
"""

# No `from __future__ import annotations`: the TypedDicts read NotRequired at runtime.
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast

if TYPE_CHECKING:  # the records import no library package (torch): the command line reads them
    from xder_methods import Scenario

__all__ = [
    "Attempt",
    "Checkpoint",
    "Config",
    "Environment",
    "Event",
    "Metrics",
    "Node",
    "Outcome",
    "Results",
    "Section",
    "Settings",
    "Status",
    "own_metric",
    "results_scenario",
]

Section = dict[str, Any]
"""One section of a configuration (``[train]``, ``[method]``...): its target's fields, by name
(open: a method's, a backbone's or a benchmark's own)."""

Config = dict[str, Section]
"""A run's configuration by section (``run``, ``train``, ``backbone``, ``method``,
``benchmark``), as its ``config.toml`` holds it."""

Settings = dict[str, Any]
"""Settings as dotted keys (``{"train.lr": 0.1}``), the one shape a setting travels in until
the layers meet (:func:`xder_cli.runs.settings.resolve_config`)."""

Event = dict[str, Any]
"""One line of ``events.jsonl``: ``event`` (its kind: ``start``, ``resume``, ``epoch``,
``task``, ``analysis``, ``threads``, ``end``) and that kind's fields."""

Checkpoint = dict[str, Any]
"""``checkpoint.pt``: the loop's snapshot (:meth:`xder_methods.FitState.snapshot`: its position,
the method's and the optimiser's state...) and the run's own ``run`` record (``events``,
``elapsed_s``, ``threads``)."""


class Metrics(TypedDict):
    """The metrics of ``results.json`` (:func:`xder_cli.runs.recorder.summarize`), in % of the
    accuracy matrices; ``val_*`` only where a validation split is held out, ``*average_accuracy``
    only once a task has ended; FF and BWT null where ``forgetting_defined`` is false; a matrix
    the ``scenario`` does not report (Task-IL in ``domain-il`` and ``general``, Class-IL in
    ``task-il``) null with its metrics."""

    scenario: NotRequired[str]
    accuracy_matrix: list[list[float]] | None
    task_il_accuracy_matrix: list[list[float]] | None
    random_init_task_il_accuracy: list[float] | None
    tasks_done: int
    faa: float | None
    ff: float | None
    bwt: float | None
    average_accuracy: NotRequired[list[float]]
    task_il_faa: float | None
    task_il_ff: float | None
    task_il_bwt: float | None
    task_il_average_accuracy: NotRequired[list[float]]
    fwt: float | None
    val_accuracy_matrix: NotRequired[list[list[float]] | None]
    val_task_il_accuracy_matrix: NotRequired[list[list[float]] | None]
    val_faa: NotRequired[float | None]
    val_ff: NotRequired[float | None]
    val_bwt: NotRequired[float | None]
    val_average_accuracy: NotRequired[list[float]]
    val_task_il_faa: NotRequired[float | None]
    val_task_il_ff: NotRequired[float | None]
    val_task_il_bwt: NotRequired[float | None]
    val_task_il_average_accuracy: NotRequired[list[float]]
    forgetting_defined: bool


def results_scenario(results: Mapping[str, Any]) -> "Scenario":
    """The scenario of a ``results.json`` (:data:`xder_methods.Scenario`): its ``scenario``, and
    ``class-il`` for one written before results named their scenario.

    >>> results_scenario({"scenario": "domain-il"}), results_scenario({"faa": 50.0})
    ('domain-il', 'class-il')
    """
    return cast("Scenario", results.get("scenario") or "class-il")


def own_metric(results: Mapping[str, Any], key: str) -> Any:
    """A ``results.json``'s ``key`` (``faa``, ``ff``, ``val_faa``...) of the run's own accuracy:
    in a ``task-il`` run, whose Class-IL metrics are null, Task-IL's (``task_il_faa``,
    ``val_task_il_faa``...); elsewhere ``key``'s (Class-IL, Domain-IL, a general stream's).
    None where the results have none.

    >>> own_metric({"scenario": "task-il", "faa": None, "val_task_il_faa": 91.0}, "val_faa")
    91.0
    >>> own_metric({"scenario": "domain-il", "faa": 53.5}, "faa")
    53.5
    """
    if results_scenario(results) == "task-il":
        val = "val_" if key.startswith("val_") else ""
        key = f"{val}task_il_{key.removeprefix('val_')}"
    return results.get(key)


class Environment(TypedDict):
    """Where a run trained: ``results.json``'s ``environment``."""

    device: str
    threads: list[int]
    torch: str
    python: str


class Results(Metrics):
    """``results.json``: the run, its :class:`Metrics`, its time and where it trained; rewritten
    after every task, and last with ``complete`` true."""

    method: str
    benchmark: str
    seed: int
    buffer_size: int
    n_tasks: int
    complete: bool
    wall_time_s: float
    environment: Environment


class Node(TypedDict):
    """Where a process runs (:func:`xder_cli.runs.scheduler.this_node`): the Ray node's id and IP
    address (None outside Ray) and the machine's host name."""

    id: str | None
    ip: str | None
    host: str


class Attempt(TypedDict):
    """One line of a run's ``attempts.jsonl`` (:data:`xder_cli.runs.scheduler.ATTEMPTS`)."""

    submission: str
    node: Node
    pid: int
    time: str
    resume: bool


Status = Literal["finished", "failed", "running elsewhere", "not run"]
"""A run's status in a sweep or an experiment."""


class Outcome(TypedDict):
    """A run's outcome as the sweep and the experiments record it
    (:func:`xder_cli.runs.scheduler.run_outcome`): its status, its error, the metrics of its
    ``results.json`` (None where it has none), the node of its last start; ``attempts`` how many
    times this invocation started it, ``held_by`` the process holding a run running elsewhere,
    ``skipped`` a run found finished."""

    status: Status
    val_faa: float | None
    faa: float | None
    ff: float | None
    wall_time_s: float | None
    error: str | None
    node: Node | None
    attempts: NotRequired[int]
    held_by: NotRequired[str]
    skipped: NotRequired[bool]
