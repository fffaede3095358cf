"""Experiment trackers: TensorBoard and Weights & Biases as loop callbacks (``run.loggers``).

A run's ``run.loggers`` names the trackers it logs to, beside ``events.jsonl`` (which stays the
record). Each one logs, under the run directory:

* the configuration (every section of ``config.toml``) as hyperparameters;
* per epoch: the mean of each loss term (``train/<term>``), the learning rate (``train/lr``) and
  the sampled gradient norms (``train/grad_norm/<group>``);
* per task, each accuracy the run's scenario reports under its name (:func:`accuracy_tag`): the
  accuracy of every seen task (``class_il/task_<j>``, ``domain_il/task_<j>`` in Domain-IL,
  ``accuracy/task_<j>`` in a general stream) and their mean (``class_il/average``...), Task-IL's
  beside Class-IL's (``task_il/...``; ``task_il/...`` alone in a Task-IL run), and the same
  with a ``val_`` prefix with a validation split: row t of the accuracy matrix is the values
  logged after task t; nothing of an accuracy the scenario does not report (Task-IL in
  Domain-IL or a general stream);
* at the end: the accuracy matrices whole (those ``results.json`` holds) and its final metrics
  under its keys (``final/faa``, ``final/ff``, ...: ``faa`` is the scenario's own accuracy,
  Class-IL, Domain-IL or a general stream's; a metric null in ``results.json`` is not logged).

TensorBoard (the ``tensorboard`` extra; torch's ``SummaryWriter``) writes event files to
``RUN_DIR/tensorboard/``. Its step is the number of epochs trained so far over the whole sequence
(task t ends at step ``(t + 1) * epochs``); the hyperparameters go to the HParams plugin and the
accuracy matrices are also Markdown tables (``accuracy_matrix``, ``task_il_accuracy_matrix``).
The HParams plugin's metrics are the final ones the scenario has (``final/faa``, ``final/ff``
where it has tasks to forget, ``final/task_il_faa`` where it reports Task-IL). A resumed run hides
(``purge_step``) what was logged after its checkpoint.

Weights & Biases (the ``wandb`` extra) writes ``RUN_DIR/wandb/``, offline unless ``WANDB_MODE``
says otherwise (``WANDB_MODE=online`` with a login uploads as it trains; ``wandb sync
RUN_DIR/wandb/offline-run-*`` uploads an offline run later). The project is ``WANDB_PROJECT``
(``xder`` by default), the run's name its directory's. Per-epoch values are plotted against
``epoch`` (epochs trained so far), per-task ones against ``task`` (tasks done); the accuracy
matrices are tables (``accuracy_matrix``, ``task_il_accuracy_matrix``) and the final metrics the
run's summary. A resumed run keeps its wandb id (``RUN_DIR/wandb/xder-run-id``): each session is
its own offline folder, synced into one run.

A tracker that cannot start (package missing, a folder it cannot write, a wandb setting it
rejects) is a :class:`~xder_cli.runs.errors.TrackerError` raised before any training.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xder_cli.runs.errors import SettingError, TrackerError, option
from xder_cli.runs.records import Settings
from xder_methods import SCENARIO_ACCURACY, Callback, ContinualSetting, EpochRecord, FitState, TaskRecord

__all__ = [
    "FINAL_METRICS",
    "TENSORBOARD_FOLDER",
    "WANDB_FOLDER",
    "TensorBoardTracker",
    "Tracker",
    "WandbTracker",
    "accuracy_tag",
    "check_loggers",
    "flatten_config",
    "start_loggers",
]

TENSORBOARD_FOLDER = "tensorboard"
WANDB_FOLDER = "wandb"
WANDB_ID_FILE = "xder-run-id"
FINAL_METRICS = (
    "faa",
    "ff",
    "bwt",
    "fwt",
    "task_il_faa",
    "task_il_ff",
    "task_il_bwt",
    "val_faa",
    "val_ff",
    "val_task_il_faa",
    "wall_time_s",
)
"""Keys of ``results.json`` logged as ``final/<key>`` (those that are numbers)."""

_PACKAGES = {
    "tensorboard": ("tensorboard", "torch.utils.tensorboard"),
    "wandb": ("wandb", "wandb"),
}


def check_loggers(names: Sequence[str]) -> None:
    """Check that every named tracker is one and that its package can be imported.

    Raises:
        SettingError: an unknown tracker.
        TrackerError: a tracker whose package is missing.
    """
    for name in names:
        if name not in _PACKAGES:
            raise SettingError(f"unknown logger {name!r}: choose {' or '.join(_PACKAGES)}")
        extra, module = _PACKAGES[name]
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise TrackerError(
                f"{option('run.loggers')} {name} needs the {extra} package ({type(error).__name__}: "
                f"{' '.join(str(error).split())}): pip install 'xder-cli[{extra}]'"
            ) from None


def flatten_config(config: Mapping[str, Mapping[str, Any]]) -> Settings:
    """``{"section.key": value}`` with values a tracker's hyperparameters take: numbers,
    strings and booleans as they are, lists as JSON text; None values left out."""
    flat: Settings = {}
    for section, values in config.items():
        for key, value in values.items():
            if value is None:
                continue
            flat[f"{section}.{key}"] = (
                value if isinstance(value, bool | int | float | str) else json.dumps(value, default=str)
            )
    return flat


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def accuracy_tag(setting: ContinualSetting, task_il: bool = False) -> str:
    """The tag prefix of an accuracy of a run in ``setting``: its scenario's own
    (:data:`xder_methods.SCENARIO_ACCURACY`, in lower case with underscores), or Task-IL's.

    >>> accuracy_tag(ContinualSetting((10, 10), (64,), scenario="domain-il"))
    'domain_il'
    >>> accuracy_tag(ContinualSetting((2, 2), (64,)), task_il=True)
    'task_il'
    """
    name = "Task-IL" if task_il else SCENARIO_ACCURACY[setting.scenario]
    return name.lower().replace("-", "_")


def _prefixes(setting: ContinualSetting) -> list[str]:
    """The tag prefixes of the accuracies a run in ``setting`` logs per task."""
    own = [accuracy_tag(setting)] if setting.reports_class_il else []
    til = [accuracy_tag(setting, task_il=True)] if setting.reports_task_il else []
    return [*own, *til, *(f"val_{p}" for p in own + til)]


def _final_metrics(setting: ContinualSetting) -> list[str]:
    """The keys of ``results.json`` a run in ``setting`` has numbers for at its end (the HParams
    plugin's metrics): its own accuracy's FAA, FF where it has tasks to forget (a general stream
    is one task), and Task-IL's FAA where it reports Task-IL (with its FF where that is its own)."""
    keys = []
    if setting.reports_class_il:
        keys += ["faa", *(["ff"] if setting.scenario != "general" else [])]
    if setting.reports_task_il:
        keys += ["task_il_faa", *([] if setting.reports_class_il else ["task_il_ff"])]
    return keys


def _task_values(record: TaskRecord, setting: ContinualSetting) -> dict[str, float]:
    """The accuracies of a finished task that ``setting``'s scenario reports, as
    ``<accuracy_tag>/task_<j>`` (row ``record.task`` of the matrices), with their means."""
    seen = record.task + 1
    own, til = accuracy_tag(setting), accuracy_tag(setting, task_il=True)
    rows = {}
    if setting.reports_class_il:
        rows[own] = record.class_il
    if setting.reports_task_il:
        rows[til] = record.task_il[:seen]
    if setting.reports_class_il and record.val_class_il is not None:
        rows[f"val_{own}"] = record.val_class_il
    if setting.reports_task_il and record.val_task_il is not None:
        rows[f"val_{til}"] = record.val_task_il[:seen]
    out: dict[str, float] = {}
    for prefix, row in rows.items():
        finite = [v for v in row if _number(v) is not None]
        out |= {f"{prefix}/task_{j}": float(v) for j, v in enumerate(row) if _number(v) is not None}
        if finite:
            out[f"{prefix}/average"] = sum(finite) / len(finite)
    return out


def _epoch_values(record: EpochRecord) -> dict[str, float]:
    out = {f"train/{name}": value for name, value in record.losses.items()}
    out |= {f"train/grad_norm/{name}": value for name, value in record.grad_norms.items()}
    out["train/lr"] = record.lr
    return out


def _matrix_markdown(matrix: Sequence[Sequence[float | None]]) -> str:
    """An accuracy matrix as a Markdown table: row t = after task t, column j = task j."""
    width = max((len(row) for row in matrix), default=0)
    lines = [
        "| after task | " + " | ".join(f"task {j}" for j in range(width)) + " |",
        "|---|" + "---:|" * width,
    ]
    for t, row in enumerate(matrix):
        cells = ["" if v is None else f"{v:.2f}" for v in row] + [""] * (width - len(row))
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


class Tracker(Callback):
    """A tracker of one run: a loop callback, started before training, closed after it."""

    name = "tracker"

    def __init__(
        self,
        run_dir: Path,
        config: Mapping[str, Mapping[str, Any]],
        *,
        epochs: int,
        resumed_at: tuple[int, int] | None,
        results: Callable[[], Mapping[str, Any]],
    ) -> None:
        self.run_dir = Path(run_dir)
        self.config = config
        self.epochs = epochs
        self.resumed_at = resumed_at
        self.results = results

    @property
    def where(self) -> str:
        """Where its logs go, for the run's first lines."""
        raise NotImplementedError

    def step(self, loop: FitState) -> int:
        """Epochs trained so far over the whole sequence."""
        return loop.task * loop.schedule.epochs + loop.epoch

    def close(self, *, failed: bool) -> None:
        """Flush and close (after the run, or when it stopped with an error)."""

    def final_values(self) -> dict[str, float]:
        results = self.results()
        return {
            f"final/{key}": value for key in FINAL_METRICS if (value := _number(results.get(key))) is not None
        }


class TensorBoardTracker(Tracker):
    """Event files for TensorBoard in ``RUN_DIR/tensorboard/`` (see the module docstring)."""

    name = "tensorboard"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        self.folder = self.run_dir / TENSORBOARD_FOLDER
        purge = None
        if self.resumed_at is not None:
            task, epoch = self.resumed_at
            purge = task * self.epochs + epoch + 1  # hide what was logged after the checkpoint
        self.writer = SummaryWriter(str(self.folder), purge_step=purge)
        self.hparams = hparams

    def on_fit_start(self, loop: FitState) -> None:
        # The configuration, and the final metrics of the run's scenario (known once its data is).
        metrics = {f"final/{key}": 0.0 for key in _final_metrics(loop.setting)}
        file_writer = self.writer.file_writer
        assert file_writer is not None  # SummaryWriter opens it in __init__
        for summary in self.hparams(flatten_config(self.config), metrics):
            file_writer.add_summary(summary)
        self.writer.flush()

    @property
    def where(self) -> str:
        return f"{self.folder} (tensorboard --logdir {self.folder})"

    def on_epoch_end(self, loop: FitState, record: EpochRecord) -> None:
        step = self.step(loop)
        for tag, value in _epoch_values(record).items():
            self.writer.add_scalar(tag, value, step)

    def on_task_end(self, loop: FitState, record: TaskRecord) -> None:
        step = self.step(loop)
        for tag, value in _task_values(record, loop.setting).items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def on_fit_end(self, loop: FitState) -> None:
        step = self.step(loop)
        for tag, value in self.final_values().items():
            self.writer.add_scalar(tag, value, step)
        results = self.results()
        for key in ("accuracy_matrix", "task_il_accuracy_matrix"):
            if results.get(key):  # null where the scenario does not report it
                self.writer.add_text(key, _matrix_markdown(results[key]), step)

    def close(self, *, failed: bool) -> None:
        self.writer.close()


class WandbTracker(Tracker):
    """A Weights & Biases run in ``RUN_DIR/wandb/``, offline by default (module docstring)."""

    name = "wandb"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        import wandb

        self.wandb = wandb
        folder = self.run_dir / WANDB_FOLDER
        folder.mkdir(exist_ok=True)
        id_file = folder / WANDB_ID_FILE
        if id_file.is_file():
            run_id = id_file.read_text().strip()
        else:
            run_id = secrets.token_hex(6)
            id_file.write_text(run_id + "\n")
        self.run = wandb.init(
            dir=str(self.run_dir),
            project=os.environ.get("WANDB_PROJECT") or "xder",
            name=self.run_dir.name,
            id=run_id,
            resume="allow",
            config={section: dict(values) for section, values in self.config.items()},
            mode=None if os.environ.get("WANDB_MODE") else "offline",
            settings=wandb.Settings(console="off", silent=True),
        )
        self.run.define_metric("epoch")
        self.run.define_metric("train/*", step_metric="epoch")
        self.run.define_metric("task")

    def on_fit_start(self, loop: FitState) -> None:
        for prefix in _prefixes(loop.setting):  # the accuracies of the run's scenario
            self.run.define_metric(f"{prefix}/*", step_metric="task")

    @property
    def where(self) -> str:
        folder = Path(self.run.dir).parent
        if self.run.settings.mode == "offline":
            return f"{folder} (offline; wandb sync {folder} uploads it)"
        return f"{folder} ({self.run.settings.mode}, project {self.run.project})"

    def on_epoch_end(self, loop: FitState, record: EpochRecord) -> None:
        self.run.log({"epoch": self.step(loop), **_epoch_values(record)})

    def on_task_end(self, loop: FitState, record: TaskRecord) -> None:
        self.run.log({"task": record.task + 1, **_task_values(record, loop.setting)})

    def on_fit_end(self, loop: FitState) -> None:
        results = self.results()
        tables = {}
        for key in ("accuracy_matrix", "task_il_accuracy_matrix"):
            matrix = results.get(key)
            if matrix is None:  # a matrix the scenario does not report
                continue
            width = max((len(row) for row in matrix), default=0)
            columns: list[str | int] = ["after_task", *(f"task_{j}" for j in range(width))]
            data = [[t, *row, *[None] * (width - len(row))] for t, row in enumerate(matrix)]
            tables[key] = self.wandb.Table(columns=columns, data=data)
        self.run.log(tables)
        self.run.summary.update(self.final_values())

    def close(self, *, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


_TRACKERS: dict[str, type[Tracker]] = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker}


def start_loggers(
    names: Sequence[str],
    run_dir: Path,
    config: Mapping[str, Mapping[str, Any]],
    *,
    epochs: int,
    resumed_at: tuple[int, int] | None = None,
    results: Callable[[], Mapping[str, Any]],
) -> list[Tracker]:
    """Start the named trackers of a run (in order); the ones started are closed again if a later
    one fails.

    Args:
        names: ``run.loggers``.
        run_dir: the run directory their logs go under.
        config: the run's resolved configuration (logged as hyperparameters).
        epochs: epochs per task (the step of a resumed TensorBoard log).
        resumed_at: the checkpoint's (task, epoch) when the run is resumed.
        results: returns the run's current ``results.json`` payload (read at the end).

    Raises:
        SettingError: an unknown tracker.
        TrackerError: a package is missing or a tracker fails to start.
    """
    check_loggers(names)
    started: list[Tracker] = []
    for name in names:
        try:
            started.append(
                _TRACKERS[name](run_dir, config, epochs=epochs, resumed_at=resumed_at, results=results)
            )
        except Exception as error:
            for tracker in started:
                tracker.close(failed=True)
            text = " ".join(str(error).split()) or type(error).__name__
            raise TrackerError(
                f"{option('run.loggers')} {name} failed to start: {type(error).__name__}: {text}"
            ) from error
    return started
