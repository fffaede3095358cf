"""Training a planned run into its run directory, with resume (:func:`run_training`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from xder_cli.runs import errors, rundir
from xder_cli.runs.cpushare import ThreadPolicy
from xder_cli.runs.plan import Notify, RunPlan, ignore, place_data, resolve_device
from xder_cli.runs.recorder import RunRecorder, ThreadShare
from xder_cli.runs.trackers import start_loggers
from xder_data import (
    Progress,
    load_benchmark,
)
from xder_data.benchmark import no_progress
from xder_methods import (
    Callback,
    ContinualSetting,
    NonFiniteLossError,
    Transforms,
    create_method,
    fit,
)
from xder_models import create_backbone

__all__ = ["run_training", "start_run", "train_run"]


def run_training(
    plan: RunPlan,
    run_dir: Path,
    *,
    resume: bool = False,
    callbacks: Sequence[Callback] = (),
    notify: Notify = ignore,
    read_progress: Progress = no_progress,
) -> dict[str, Any]:
    """Train the planned run inside ``run_dir`` (continuing from its checkpoint if ``resume``).
    The caller holds the run directory's lock (:func:`rundir.lock_run_dir`).

    ``callbacks`` follow the training after the run's own (e.g. a progress bar); ``notify`` hears
    the lines the run has for its user (where a tracker logs, a test set split off from the data,
    a buffer larger than the training set); ``read_progress`` wraps the loop that reads a
    benchmark's images.

    The run's experiment trackers (``run.loggers``) start first, before any data is read, and
    log alongside ``events.jsonl``.

    Returns:
        The final ``results.json`` payload.

    Raises:
        rundir.RunDirWriteError: a file of the run directory could not be written.
        TrackerError: a tracker that cannot start.
        errors.NonFiniteLossError: the loss diverged; the message says where the last good state is, or
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
    with rundir.write_errors(events.path, then=rundir.resume_hint(run_dir)):
        events.truncate(int(state["run"]["events"]) if state is not None else 0)
    with ThreadPolicy(settings.threads) as threads:
        before = [] if state is None else list(state.get("run", {}).get("threads", []))
        recorder = RunRecorder(run_dir, plan, device, events, elapsed, threads, before)
        share = ThreadShare(threads, recorder.log)
        return _record_run(plan, run_dir, device, state, recorder, [share, *callbacks], notify, read_progress)


def _record_run(
    plan: RunPlan,
    run_dir: Path,
    device: torch.device,
    state: dict[str, Any] | None,
    recorder: RunRecorder,
    callbacks: list[Callback],
    notify: Notify,
    read_progress: Progress,
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
        notify(f"{tracker.name}: {tracker.where}")
    failed = True
    try:
        # The recorder checkpoints first (and writes the results the trackers read at the end);
        # the trackers log an epoch or task right after its checkpoint, before anything else.
        _train(plan, device, state, [recorder, *trackers, *callbacks], notify, read_progress)
        failed = False
    except NonFiniteLossError as error:
        if checkpoint.exists():
            where = f"last good state: {checkpoint}"
        else:
            where = (
                "no checkpoint exists yet (it diverged within the first epoch), so the run must be started "
                "again: lower the learning rate, e.g. "
                f"{errors.option('overrides')} train.lr={plan.schedule.lr / 10:g}"
            )
        raise errors.NonFiniteLossError(f"{error}; {where}") from error
    finally:
        for tracker in trackers:
            tracker.close(failed=failed)
    return recorder.results


def _train(
    plan: RunPlan,
    device: torch.device,
    state: dict[str, Any] | None,
    callbacks: list[Callback],
    notify: Notify = ignore,
    read_progress: Progress = no_progress,
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
            progress=read_progress,
            **plan.benchmark,
        ),
        device,
        settings.data_device,
        notify,
    )
    for note in bench.notes:
        notify(f"note: {note}")
    buffer_size = plan.buffer_size
    if buffer_size > bench.train_y.shape[0]:
        notify(
            f"warning: buffer size {buffer_size} exceeds the {bench.train_y.shape[0]} training examples: "
            "the buffer holds the whole training set, so the method replays everything it has seen"
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


def start_run(plan: RunPlan, out: str | Path = "runs") -> Path:
    """A new run directory for ``plan`` under ``out`` (``<date>-<method>-<benchmark>-m<buffer>-s<seed>``,
    as ``xder-run train`` names it), holding its ``config.toml``."""
    settings = plan.settings
    run_dir = rundir.new_run_dir(
        Path(out), settings.method, settings.benchmark, plan.buffer_size, settings.seed
    )
    rundir.write_config(run_dir / rundir.CONFIG, plan.config)
    return run_dir


def train_run(
    plan: RunPlan,
    run_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: Sequence[Callback] = (),
    notify: Notify = ignore,
) -> dict[str, Any]:
    """Train ``plan`` into ``run_dir`` (from :func:`start_run`), holding the run directory's lock
    (:func:`rundir.lock_run_dir`) throughout; ``resume`` continues from its last checkpoint, and a
    run that is complete already is not trained again. ``callbacks`` and ``notify`` as for
    :func:`run_training`.

    Returns:
        The run's ``results.json``.

    Raises:
        rundir.RunDirBusyError: another process is training it.
    """
    run_dir = Path(run_dir)
    with rundir.lock_run_dir(run_dir, then="train it again once that process ends"):
        done = rundir.complete_results(run_dir) if resume else None
        if done is not None:
            return done
        return run_training(plan, run_dir, resume=resume, callbacks=callbacks, notify=notify)
