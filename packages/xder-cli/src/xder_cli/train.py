"""``xder-run train``: resolve a run's configuration, build it, train it, record it."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from xder_cli import rundir
from xder_cli.analyze import task_end_analysis
from xder_cli.config import SECTIONS, RunSettings, benchmark_settings, validate_section
from xder_cli.cpushare import ThreadPolicy
from xder_cli.data import progress_bar
from xder_cli.errors import Interrupted, UsageError
from xder_cli.plugins import PluginError, load_plugin, loaded_plugins
from xder_cli.presets import default_preset, preset_values
from xder_cli.trackers import check_loggers, start_loggers
from xder_data import DEFAULT_PROTOCOL, Benchmark, DataError, benchmark_defaults, load_benchmark
from xder_eval import (
    average_accuracy_curve,
    backward_transfer,
    final_average_accuracy,
    final_forgetting,
    forward_transfer,
    plot_accuracy_curves,
    plot_accuracy_matrix,
)
from xder_methods import (
    Callback,
    ContinualSetting,
    EpochRecord,
    History,
    Loop,
    MethodError,
    NonFiniteLossError,
    TaskRecord,
    TrainingSchedule,
    Transforms,
    create_method,
    fit,
    list_methods,
    method_config_class,
)
from xder_models import UnknownBackboneError, backbone_factory, backbone_options, create_backbone

__all__ = ["RunPlan", "build_plan", "resolve_config", "run_training", "summarize"]

PROTOCOL_TRAIN_KEYS = (
    "epochs",
    "batch_size",
    "optimizer",
    "lr",
    "momentum",
    "weight_decay",
    "lr_schedule",
    "milestones",
    "lr_gamma",
    "warmup_epochs",
    "drop_last",
)


@dataclass(frozen=True)
class RunPlan:
    """A run's validated configuration, as typed objects and as the TOML sections.

    ``benchmark`` holds the benchmark's options (the ``[benchmark]`` section, its defaults
    included), passed to :func:`xder_data.load_benchmark`.
    """

    settings: RunSettings
    schedule: TrainingSchedule
    method_config: Any
    backbone: dict[str, Any]
    config: dict[str, dict[str, Any]]
    benchmark: dict[str, Any] = field(default_factory=dict)

    @property
    def buffer_size(self) -> int:
        return int(getattr(self.method_config, "buffer_size", 0))


def run_buffer_size(
    protocol_size: int,
    fields: set[str],
    method_values: dict[str, Any],
    sets: list[tuple[str, str, Any]],
) -> int | None:
    """The buffer size a run will use (None for a method without a buffer): the protocol's, then
    ``--buffer-size``, then ``--set method.buffer_size``; it picks the preset's entry."""
    if "buffer_size" not in fields:
        return None
    size: Any = method_values.get("buffer_size", protocol_size)
    for section, key, value in sets:
        if (section, key) == ("method", "buffer_size"):
            size = value
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def resolve_config(
    *,
    method: str,
    benchmark: str,
    preset: str | None,
    run: dict[str, Any],
    train: dict[str, Any],
    method_values: dict[str, Any],
    sets: list[tuple[str, str, Any]],
    protocol_name: str = DEFAULT_PROTOCOL,
) -> dict[str, dict[str, Any]]:
    """Layer the configuration: method defaults < benchmark protocol < preset < flags < --set.

    Args:
        run, train, method_values: values from explicit command-line flags.
        sets: ``(section, key, value)`` from ``--set``, applied last.
        protocol_name: the benchmark's protocol (``--protocol``): its settings, and the preset
            tables kept for it.

    Raises:
        UnknownProtocolError: the benchmark has no such protocol.
    """
    config_cls = method_config_class(method)
    protocol = benchmark_defaults(benchmark, protocol_name)
    fields = {f.name for f in dataclasses.fields(config_cls)}
    buffer_size = run_buffer_size(protocol.buffer_size, fields, method_values, sets)
    preset = preset or default_preset(benchmark, method, buffer_size, protocol_name)
    config: dict[str, dict[str, Any]] = {
        "run": {"method": method, "benchmark": benchmark, "preset": preset, "protocol": protocol_name},
        "train": {k: getattr(protocol, k) for k in PROTOCOL_TRAIN_KEYS},
        "backbone": {"name": protocol.backbone, **protocol.backbone_options},
        "method": {k: getattr(protocol, k) for k in ("buffer_size", "minibatch_size") if k in fields},
        "benchmark": {},
    }
    chosen_backbone: dict[str, Any] = {}
    layers: list[tuple[str, str, Any]] = [
        (section, key, value)
        for section, values in preset_values(preset, benchmark, method, buffer_size, protocol_name).items()
        for key, value in values.items()
        if section != "method" or key in fields  # the protocol's replay batch: replay methods only
    ]
    layers += [("run", k, v) for k, v in run.items()]
    layers += [("train", k, v) for k, v in train.items()]
    layers += [("method", k, v) for k, v in method_values.items()]
    layers += sets
    for section, key, value in layers:
        if section == "run" and key in ("method", "benchmark", "preset", "protocol"):
            raise UsageError(f"run.{key} cannot be set with --set: use --{key}")
        if section not in config:
            raise UsageError(f"unknown section {section!r}: use {', '.join(SECTIONS)}")
        config[section][key] = value
        if section == "backbone":
            chosen_backbone[key] = value
    if config["backbone"]["name"] != protocol.backbone:  # the protocol's options fit its own net
        config["backbone"] = {"name": protocol.backbone, **chosen_backbone}
    return config


_OVERRIDABLE_RUN_KEYS = ("class_order", "validation")
"""The [run] settings that change what a run trains (the others place it or watch it)."""


def _comparable(value: Any) -> Any:
    """A setting as TOML reads it back, numbers as floats: ``(35, 45)`` equals ``[35.0, 45.0]``."""
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def run_overrides(config: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The settings of a run's ``config.toml`` that its preset and protocol do not give, as they
    stand now (what ``--set``, ``--epochs`` or ``--class-order`` changed): dotted key -> the run's
    value. The buffer size is the run's own choice, not an override.

    Raises:
        UsageError, DataError, MethodError: the run's method, benchmark, preset or protocol is
            unknown here (e.g. a plugin not loaded).
    """
    run = config.get("run", {})
    method = config.get("method", {})
    values = {"buffer_size": method["buffer_size"]} if "buffer_size" in method else {}
    reference = build_plan(
        resolve_config(
            method=run["method"],
            benchmark=run["benchmark"],
            preset=run.get("preset"),
            run={},
            train={},
            method_values=values,
            sets=[],
            protocol_name=run.get("protocol", DEFAULT_PROTOCOL),
        )
    ).config
    keys = [("run", key) for key in _OVERRIDABLE_RUN_KEYS]
    for section in ("train", "backbone", "method", "benchmark"):
        keys += [(section, key) for key in {*config.get(section, {}), *reference.get(section, {})}]
    overrides = {}
    for section, key in sorted(keys, key=lambda k: (SECTIONS.index(k[0]), k[1])):
        if (section, key) == ("method", "buffer_size"):
            continue
        mine = config.get(section, {}).get(key)
        if _comparable(mine) != _comparable(reference.get(section, {}).get(key)):
            overrides[f"{section}.{key}"] = mine
    return overrides


def build_plan(config: dict[str, dict[str, Any]]) -> RunPlan:
    """Validate every section of a configuration and build the typed objects.

    Raises:
        UsageError: unknown section or key, ill-typed value.
        MethodConfigError, UnknownMethodError, UnknownBackboneError, DataError: from the packages.
    """
    unknown = sorted(set(config) - set(SECTIONS))
    if unknown:
        raise UsageError(f"unknown section {unknown[0]!r}: use {', '.join(SECTIONS)}")
    run = validate_section("run", config.get("run", {}), RunSettings, what="[run]")
    for required in ("method", "benchmark"):
        if required not in run:
            raise UsageError(f"the configuration has no run.{required}")
    settings = RunSettings(**run)
    benchmark_defaults(settings.benchmark, settings.protocol)  # an unknown one is the user's to fix
    benchmark = benchmark_settings(settings.benchmark, config.get("benchmark", {}))
    schedule = TrainingSchedule(
        **validate_section("train", config.get("train", {}), TrainingSchedule, what="[train]")
    )
    config_cls = method_config_class(settings.method)
    method_config = config_cls(
        **validate_section("method", config.get("method", {}), config_cls, what=f"method {settings.method!r}")
    )
    last_task_only = {"joint": ("mode", "final"), "gdumb": ("fit_after", "last_task")}.get(settings.method)
    if schedule.tasks is not None and last_task_only is not None:
        key, value = last_task_only
        if getattr(method_config, key) == value:
            raise UsageError(
                f"train.tasks cannot shorten {settings.method} with method.{key} = {value!r}: it trains "
                f"only at the benchmark's last task; pick another method.{key} or drop train.tasks"
            )
    backbone_values = dict(config.get("backbone", {}))
    name = backbone_values.pop("name", None)
    if not isinstance(name, str):
        raise UsageError("backbone.name must be the name of a registered backbone")
    options = validate_section("backbone", backbone_values, backbone_factory(name), what=f"backbone {name!r}")
    defaults = {k: v for k, v in backbone_options(name).items() if v is not inspect.Parameter.empty}
    backbone = {"name": name, **defaults, **options}
    resolved = {
        "run": dataclasses.asdict(settings),
        "train": dataclasses.asdict(schedule),
        "backbone": backbone,
        "method": dataclasses.asdict(method_config),
        "benchmark": benchmark,
    }
    return RunPlan(settings, schedule, method_config, backbone, resolved, benchmark)


def resolve_device(spec: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; anything else is checked."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as error:
        raise UsageError(f"run.device {spec!r} is not a device: use auto, cpu, cuda or cuda:N") from error
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"run.device {spec!r}: no CUDA device is available here; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"run.device {spec!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise UsageError(f"run.device {spec!r} is not supported: use auto, cpu, cuda or cuda:N")
    return device


def place_data(bench: Benchmark, device: torch.device, where: str) -> Benchmark:
    """Put the benchmark's tensors where ``run.data_device`` says (see :class:`RunSettings`)."""
    if device.type != "cuda" or where == "device":
        return bench.to(device)
    if where == "auto":
        free, _ = torch.cuda.mem_get_info(device)
        if bench.nbytes < free / 2:
            return bench.to(device)
        print(
            f"note: the data ({bench.nbytes / 2**30:.1f} GiB) stay in host memory: less than twice their "
            f"size is free on {device}",
            file=sys.stderr,
        )
    return bench.pin_memory()


# ---------------------------------------------------------------------------------------------
# Results


def _matrix_metrics(matrix: list[list[float]], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {f"{prefix}faa": None, f"{prefix}ff": None, f"{prefix}bwt": None}
    if matrix:
        out[f"{prefix}faa"] = final_average_accuracy(matrix)
        out[f"{prefix}average_accuracy"] = average_accuracy_curve(matrix)
    if len(matrix) >= 2:
        out[f"{prefix}ff"] = final_forgetting(matrix)
        out[f"{prefix}bwt"] = backward_transfer(matrix)
    return out


def summarize(history: History, *, forgetting_defined: bool = True) -> dict[str, Any]:
    """The metrics of ``results.json`` from the accuracy matrices (in %).

    Keys: ``accuracy_matrix``/``faa``/``ff``/``bwt``/``average_accuracy`` (Class-IL),
    ``task_il_accuracy_matrix`` (square: every task after each task) with ``task_il_faa``,
    ``task_il_ff``, ``task_il_bwt`` and ``fwt`` (Task-IL forward transfer against the untrained
    network), and the same with a ``val_`` prefix when there is a validation split. With
    ``forgetting_defined=False`` (a method whose rows before the last task are not trained models,
    as JT's default) FF and BWT are null and ``forgetting_defined`` says why.
    """
    out: dict[str, Any] = {
        "accuracy_matrix": history.class_il,
        "task_il_accuracy_matrix": history.task_il,
        "random_init_task_il_accuracy": history.random_init_task_il,
        "tasks_done": len(history.class_il),
    }
    out |= _matrix_metrics(history.class_il, "")
    out |= _matrix_metrics(history.task_il, "task_il_")
    out["fwt"] = None
    if len(history.task_il) >= 2 and history.random_init_task_il is not None:
        out["fwt"] = forward_transfer(history.task_il, history.random_init_task_il)
    if history.val_class_il:
        out["val_accuracy_matrix"] = history.val_class_il
        out["val_task_il_accuracy_matrix"] = history.val_task_il
        out |= _matrix_metrics(history.val_class_il, "val_")
        out |= _matrix_metrics(history.val_task_il, "val_task_il_")
    out["forgetting_defined"] = forgetting_defined
    if not forgetting_defined:
        out |= {k: None for k in out if k.endswith(("ff", "bwt"))}
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


# ---------------------------------------------------------------------------------------------
# Callbacks


class RunRecorder(Callback):
    """Keeps the run directory current: events, checkpoint, results, plots.

    A write that fails (a full disk...) ends the run with a one-line :class:`rundir.RunDirWriteError`;
    every file is replaced atomically and the event log cut back, so the previous checkpoint and
    results stay whole and ``xder-run train --resume`` continues from that checkpoint.
    ``results.json`` with ``complete: true`` is written last: a run that says it is complete is.
    """

    def __init__(
        self,
        run_dir: Path,
        plan: RunPlan,
        device: torch.device,
        events: rundir.EventLog,
        elapsed_before: float,
        threads: ThreadPolicy | None = None,
        threads_before: list[int] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.plan = plan
        self.device = device
        self.events = events
        self.elapsed_before = elapsed_before
        self.threads = threads
        self.threads_before = list(threads_before or [])
        self.started = time.perf_counter()
        self.results: dict[str, Any] = {}

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started

    def _writing(self, path: Path) -> Any:
        return rundir.write_errors(path, then=_resume_hint(self.run_dir))

    def log(self, event: dict[str, Any]) -> None:
        with self._writing(self.events.path):
            self.events.append(event)

    def threads_used(self) -> list[int]:
        """Every CPU thread count the run trained with, before a resume and since."""
        used = list(self.threads_before)
        for count in self.threads.used if self.threads is not None else []:
            if count not in used:
                used.append(count)
        return used

    def checkpoint(self, loop: Loop) -> None:
        state = loop.snapshot()
        state["run"] = {
            "events": self.events.count,
            "elapsed_s": self.elapsed(),
            "threads": self.threads_used(),
        }
        path = self.run_dir / rundir.CHECKPOINT
        with self._writing(path):
            rundir.save_checkpoint(path, state)

    def write_results(self, loop: Loop, *, complete: bool) -> None:
        settings = self.plan.settings
        self.results = {
            "method": settings.method,
            "benchmark": settings.benchmark,
            "seed": settings.seed,
            "buffer_size": self.plan.buffer_size,
            "n_tasks": loop.n_tasks,
            "complete": complete,
            **summarize(loop.history, forgetting_defined=getattr(loop.method, "forgetting_defined", True)),
            "wall_time_s": self.elapsed(),
            "environment": {
                "device": str(self.device),
                "threads": self.threads_used(),
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
        }
        path = self.run_dir / rundir.RESULTS
        with self._writing(path):
            rundir.write_json(path, self.results)

    def plot(self, name: str, draw: Callable[[Path], Any]) -> None:
        """``draw(path)`` renders a figure into a scratch folder; it is then written atomically
        into ``plots/`` like every other file of the run directory."""
        path = self.run_dir / rundir.PLOTS / name
        with self._writing(path), tempfile.TemporaryDirectory() as scratch:
            draw(Path(scratch) / name)
            rundir.atomic_write_bytes(path, (Path(scratch) / name).read_bytes())

    def on_fit_start(self, loop: Loop) -> None:
        kind = "resume" if self.elapsed_before else "start"
        self.log(
            {"event": kind, "task": loop.task, "epoch": loop.epoch, "time": datetime.now(UTC).isoformat()}
        )

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        self.log({"event": "epoch", **dataclasses.asdict(record)})
        self.checkpoint(loop)

    def on_task_end(self, loop: Loop, record: TaskRecord) -> None:
        self.log(task_end_analysis(loop, full=self.plan.settings.record_analyses))
        self.log({"event": "task", **dataclasses.asdict(record)})
        self.write_results(loop, complete=False)
        self.checkpoint(loop)

    def on_fit_end(self, loop: Loop) -> None:
        plots = self.run_dir / rundir.PLOTS
        with self._writing(plots):
            plots.mkdir(exist_ok=True)
        history = loop.history
        name = f"{self.plan.settings.method} on {self.plan.settings.benchmark}"
        run = self.run_dir.name  # each plot names its run in a suptitle
        if history.class_il:
            curves = {
                "Class-IL": average_accuracy_curve(history.class_il),
                "Task-IL": average_accuracy_curve(history.task_il),
            }
            self.plot(
                "accuracy.png",
                lambda path: plot_accuracy_curves(
                    curves, path, title=f"{name}: average accuracy on seen tasks", run=run
                ),
            )
            self.plot(
                "accuracy_matrix.png",
                lambda path: plot_accuracy_matrix(
                    history.class_il, path, title=f"{name}: Class-IL accuracy (%)", run=run
                ),
            )
            self.plot(
                "task_il_matrix.png",
                lambda path: plot_accuracy_matrix(
                    history.task_il, path, title=f"{name}: Task-IL accuracy (%)", run=run
                ),
            )
        self.log({"event": "end", "wall_time_s": self.elapsed()})
        self.write_results(loop, complete=True)


class ThreadShare(Callback):
    """Keeps a fair-share run's CPU thread count current (:class:`ThreadPolicy`), between steps,
    and logs each change to ``events.jsonl`` (``{"event": "threads", ...}``)."""

    def __init__(self, policy: ThreadPolicy, log: Callable[[dict[str, Any]], None]) -> None:
        self.policy = policy
        self.log = log

    def on_fit_start(self, loop: Loop) -> None:
        self.log(
            {
                "event": "threads",
                "task": loop.task,
                "epoch": loop.epoch,
                "threads": torch.get_num_threads(),
                "auto": self.policy.auto,
            }
        )

    def on_step(self, loop: Loop) -> None:
        changed = self.policy.poll()
        if changed is not None:
            self.log(
                {"event": "threads", "task": loop.task, "epoch": loop.epoch, "threads": changed, "auto": True}
            )


class Progress(Callback):
    """A tqdm bar per task (on a terminal) and one printed line per finished task."""

    def __init__(self) -> None:
        self.bar: tqdm | None = None

    def on_task_start(self, loop: Loop) -> None:
        total = (loop.schedule.epochs - loop.epoch) * loop.steps_per_epoch
        self.bar = tqdm(
            total=total,
            desc=f"task {loop.task + 1}/{loop.n_tasks}",
            unit="step",
            leave=False,
            disable=None,
        )

    def on_step(self, loop: Loop) -> None:
        if self.bar is not None:
            self.bar.update()

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        if self.bar is not None:
            self.bar.set_postfix(
                epoch=record.epoch + 1, loss=f"{record.losses.get('loss', float('nan')):.3f}"
            )

    def on_task_end(self, loop: Loop, record: TaskRecord) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        cil = " ".join(f"{a:5.1f}" for a in record.class_il)
        cil_mean = sum(record.class_il) / len(record.class_il)
        til_seen = record.task_il[: record.task + 1]
        print(
            f"task {record.task + 1}/{loop.n_tasks} | class-il [{cil}] avg {cil_mean:.2f}"
            f" | task-il avg {sum(til_seen) / len(til_seen):.2f} | {record.seconds:.1f} s",
            flush=True,
        )


# ---------------------------------------------------------------------------------------------
# The command


def _resume_hint(run_dir: Path) -> str:
    """How to continue ``run_dir``, for error messages."""
    return f"continue with xder-run train --resume {run_dir}"


def run_training(plan: RunPlan, run_dir: Path, *, resume: bool = False) -> dict[str, Any]:
    """Train the planned run inside ``run_dir`` (continuing from its checkpoint if ``resume``).
    The caller holds the run directory's lock (:func:`rundir.lock_run_dir`).

    The run's experiment trackers (``run.loggers``) start first, before any data is read, and
    log alongside ``events.jsonl``.

    Returns:
        The final ``results.json`` payload.

    Raises:
        rundir.RunDirWriteError: a file of the run directory could not be written.
        UsageError: a tracker that cannot start.
        NonFiniteLossError: the loss diverged; the message says where the last good state is, or
            that there is none yet.
    """
    settings = plan.settings
    device = resolve_device(settings.device)
    state: dict[str, Any] | None = None
    elapsed = 0.0
    checkpoint = run_dir / rundir.CHECKPOINT
    if resume and checkpoint.exists():
        state = rundir.load_checkpoint(checkpoint, device)
        elapsed = float(state.get("run", {}).get("elapsed_s", 0.0))
    events = rundir.EventLog(run_dir / rundir.EVENTS)
    with rundir.write_errors(events.path, then=_resume_hint(run_dir)):
        events.truncate(int(state["run"]["events"]) if state is not None else 0)
    with ThreadPolicy(settings.threads) as threads:
        before = [] if state is None else list(state.get("run", {}).get("threads", []))
        recorder = RunRecorder(run_dir, plan, device, events, elapsed, threads, before)
        return _record_run(plan, run_dir, device, state, recorder, ThreadShare(threads, recorder.log))


def _record_run(
    plan: RunPlan,
    run_dir: Path,
    device: torch.device,
    state: dict[str, Any] | None,
    recorder: RunRecorder,
    share: ThreadShare,
) -> dict[str, Any]:
    settings = plan.settings
    checkpoint = run_dir / rundir.CHECKPOINT
    trackers = start_loggers(
        settings.loggers,
        run_dir,
        plan.config,
        epochs=plan.schedule.epochs,
        resumed_at=None if state is None else (state["position"]["task"], state["position"]["epoch"]),
        results=lambda: recorder.results,
    )
    for tracker in trackers:
        print(f"{tracker.name}: {tracker.where}", flush=True)
    failed = True
    try:
        # The recorder checkpoints first (and writes the results the trackers read at the end);
        # the trackers log an epoch or task right after its checkpoint, before anything else.
        _train(plan, device, state, [recorder, *trackers, Progress(), share])
        failed = False
    except NonFiniteLossError as error:
        if checkpoint.exists():
            where = f"last good state: {checkpoint}"
        else:
            where = (
                "no checkpoint exists yet (it diverged within the first epoch), so the run must be started "
                f"again: lower the learning rate, e.g. --set train.lr={plan.schedule.lr / 10:g}"
            )
        raise NonFiniteLossError(f"{error}; {where}") from error
    finally:
        for tracker in trackers:
            tracker.close(failed=failed)
    return recorder.results


def _train(
    plan: RunPlan, device: torch.device, state: dict[str, Any] | None, callbacks: list[Callback]
) -> None:
    """Load the data, build the network and the method, and fit."""
    settings = plan.settings
    bench = place_data(
        load_benchmark(
            settings.benchmark,
            settings.data_root,
            class_order=settings.class_order,
            seed=settings.seed,
            validation=settings.validation,
            protocol=settings.protocol,
            progress=progress_bar("images"),
            **plan.benchmark,
        ),
        device,
        settings.data_device,
    )
    for note in bench.notes:
        print(f"note: {note}", flush=True)
    buffer_size = plan.buffer_size
    if buffer_size > bench.train_y.shape[0]:
        print(
            f"warning: buffer size {buffer_size} exceeds the {bench.train_y.shape[0]} training examples: "
            "the buffer holds the whole training set, so the method replays everything it has seen",
            file=sys.stderr,
            flush=True,
        )
    torch.manual_seed(settings.seed)
    options = {k: v for k, v in plan.backbone.items() if k != "name"}
    net = create_backbone(plan.backbone["name"], bench.num_classes, **options).to(device)
    if plan.schedule.channels_last:
        net = net.to(memory_format=torch.channels_last)
    if plan.schedule.compile:
        # The loop's sampled gradient-norm probes back-propagate with retain_graph=True, which a
        # compiled backward with donated buffers refuses; torch's own error names this switch.
        import torch._functorch.config as functorch_config

        functorch_config.donated_buffer = False
        net.compile()  # in place: parameter names (and checkpoints) stay those of the network
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    method = create_method(
        settings.method,
        net=net,
        setting=ContinualSetting(bench.classes_per_task, bench.input_shape, bench.train_x.dtype),
        transforms=Transforms(
            bench.train_transform, bench.test_transform, getattr(bench, "strong_transform", None)
        ),
        config=plan.method_config,
        generator=generator,
    )
    # The gradient-norm probes are analyses too: only when the run records them.
    schedule = (
        plan.schedule if settings.record_analyses else dataclasses.replace(plan.schedule, record_every=0)
    )
    fit(method, bench, schedule, generator=generator, callbacks=callbacks, resume=state)


def print_summary(results: dict[str, Any], run_dir: Path) -> None:
    print(
        f"FAA {_fmt(results['faa'])}  FF {_fmt(results['ff'])}  |  Task-IL FAA {_fmt(results['task_il_faa'])}"
        f"  |  wall time {results['wall_time_s']:.1f} s"
    )
    print(f"results: {run_dir / rundir.RESULTS}  plots: {run_dir / rundir.PLOTS}")


def command_train(args: Any) -> int:
    """Entry point of ``xder-run train`` (``args`` from the argument parser)."""
    if args.resume is not None:
        given = [flag for flag, value in _train_flags(args).items() if value is not None]
        if given:
            raise UsageError(
                f"--resume takes no other settings (got {given[0]}): "
                "the run continues with its own config.toml"
            )
        run_dir = rundir.check_run_dir(Path(args.resume))
        plan = _resumed_plan(run_dir)
        # A complete run is reported without taking the lock: nothing in the folder is touched.
        if _report_if_complete(run_dir):
            return 0
        with rundir.lock_run_dir(run_dir, then=f"run xder-run train --resume {run_dir} again"):
            if _report_if_complete(run_dir):  # another writer finished it meanwhile
                return 0
            check_loggers(plan.settings.loggers)
            if (run_dir / rundir.CHECKPOINT).exists():
                _announce(plan, run_dir, "resuming")
            else:
                print(f"{run_dir}: no checkpoint yet: starting from the beginning", flush=True)
                _announce(plan, run_dir, "training")
            with _interruptible(run_dir):
                results = run_training(plan, run_dir, resume=True)
            print_summary(results, run_dir)
        return 0

    method_values: dict[str, Any] = {}
    if args.buffer_size is not None:
        if args.buffer_size < 0:
            raise UsageError(f"--buffer-size must be >= 0, got {args.buffer_size}")
        fields = {f.name for f in dataclasses.fields(method_config_class(args.method))}
        if "buffer_size" in fields:
            method_values["buffer_size"] = args.buffer_size
        else:
            print(
                f"note: method {args.method!r} keeps no buffer; --buffer-size is ignored",
                file=sys.stderr,
            )
    run = {
        key: value
        for key, value in {
            "seed": args.seed,
            "device": args.device,
            "class_order": args.class_order,
            "data_root": args.data_root,
            "validation": args.validation,
            "loggers": args.logger,
            "record_analyses": args.record_analyses,
            "plugins": list(loaded_plugins()) or None,
        }.items()
        if value is not None
    }
    train = {} if args.epochs is None else {"epochs": args.epochs}
    config = resolve_config(
        method=args.method,
        benchmark=args.benchmark,
        preset=args.preset,
        run=run,
        train=train,
        method_values=method_values,
        sets=list(args.set or []),
        protocol_name=args.protocol or DEFAULT_PROTOCOL,
    )
    plan = build_plan(config)
    resolve_device(plan.settings.device)  # fail before creating anything
    check_loggers(plan.settings.loggers)
    run_dir = rundir.new_run_dir(
        Path(args.out),
        plan.settings.method,
        plan.settings.benchmark,
        plan.buffer_size,
        plan.settings.seed,
    )
    try:
        # Nobody else knows the fresh folder's name yet: the lock is free, and held from here on.
        with rundir.lock_run_dir(run_dir, then=f"run xder-run train --resume {run_dir}"):
            config = run_dir / rundir.CONFIG
            with rundir.write_errors(config, then=f"train again (and delete {run_dir})"):
                rundir.write_config(config, plan.config)
            _announce(plan, run_dir, "training")
            with _interruptible(run_dir):
                results = run_training(plan, run_dir)
            print_summary(results, run_dir)
    except (UsageError, DataError, MethodError, UnknownBackboneError):
        _remove_if_unstarted(run_dir)
        raise
    return 0


def _remove_if_unstarted(run_dir: Path) -> None:
    """Remove a run folder that a failed start left behind (a data error, a bad class order, a
    divergence in the first epoch): nothing in it can be resumed, and ``report`` would list it.
    Never one holding a checkpoint. Silent: the error that follows is the one line to read."""
    if not (run_dir / rundir.CHECKPOINT).exists():
        shutil.rmtree(run_dir, ignore_errors=True)


@contextlib.contextmanager
def _interruptible(run_dir: Path) -> Iterator[None]:
    """Turn Ctrl-C into the line that says how to continue this run (exit status 130)."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: continue with xder-run train --resume {run_dir}") from None


def _resumed_plan(run_dir: Path) -> RunPlan:
    """The plan of a run to resume, its plugins loaded first (those recorded in config.toml)."""
    config = rundir.read_config(run_dir / rundir.CONFIG)
    for spec in config.get("run", {}).get("plugins", []):
        try:
            load_plugin(spec)
        except PluginError as error:
            raise UsageError(
                f"{run_dir} was trained with --plugin {spec}, which does not load now ({error}): "
                "install or restore it, or pass --plugin with where it is now"
            ) from error
    method = config.get("run", {}).get("method")
    if method is not None and method not in list_methods():
        raise UsageError(
            f"{run_dir} trains method {method!r}, which nothing registers here: it comes from a plugin "
            "not recorded in its config.toml; resume with --plugin MODULE_OR_FILE naming it"
        )
    return build_plan(config)


def _report_if_complete(run_dir: Path) -> bool:
    """Print the summary of ``run_dir`` if its results.json says it is complete; read only."""
    results = rundir.complete_results(run_dir)
    if results is None:
        return False
    print(f"{run_dir} is already complete.")
    print_summary(results, run_dir)
    return True


def _announce(plan: RunPlan, run_dir: Path, verb: str) -> None:
    s = plan.settings
    protocol = "" if s.protocol == DEFAULT_PROTOCOL else f", protocol {s.protocol}"
    print(
        f"{verb} {s.method} on {s.benchmark} (buffer {plan.buffer_size}, seed {s.seed}, preset {s.preset}"
        f"{protocol}, {plural(plan.schedule.epochs, 'epoch')}/task) -> {run_dir}",
        flush=True,
    )


def plural(count: int, noun: str) -> str:
    """``1 epoch``, ``2 epochs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _train_flags(args: Any) -> dict[str, Any]:
    return {
        "--method": args.method_given,
        "--benchmark": args.benchmark_given,
        "--protocol": args.protocol,
        "--buffer-size": args.buffer_size,
        "--seed": args.seed,
        "--epochs": args.epochs,
        "--class-order": args.class_order,
        "--data-root": args.data_root,
        "--device": args.device,
        "--validation": args.validation,
        "--logger": args.logger,
        "--record-analyses": args.record_analyses,
        "--preset": args.preset,
        "--set": args.set or None,
        "--out": args.out_given,
    }
