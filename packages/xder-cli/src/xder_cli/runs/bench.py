"""Step time against the hardware floor, host syncs and ops per step (``xder-run bench``,
:func:`run_bench` with its :class:`BenchOptions`; the command, :mod:`xder_cli.commands.bench`,
turns its arguments into those options and prints the figures).

docs/development.md, "How it is fast": in one process, methods interleaved round by round so that
machine drift hits all of them alike (for CUDA graphs one network after the other:
:func:`timing_order`), each method is brought to task T on synthetic data shaped
like the benchmark (its buffer full), then:

* ``seconds_per_step``: median wall time of one training step (augmentation, ``observe``,
  backward, optimizer step) after warm-up;
* ``images_per_step``: images the backbone forwards in one step (counted by a forward hook);
* ``floor_seconds``: median time of ONE forward+backward+step of the same backbone over that many
  images (the step's arithmetic in one batch, the step by the loop's optimiser), timed in the same
  rounds (with ``train.step_graph`` replayed as a CUDA graph too, so that the ratio compares like
  with like);
* ``host_syncs_per_step``, ``ops_per_step`` and ``launches_per_step``: dispatched ATen ops of one
  step, those that make the host wait, and those that are not views (about one kernel launch
  each on a GPU) (:class:`xder_methods.OpCounter`; exact on any hardware); with a compiled
  backbone, of the same step on an eager twin (the images too), so that the compiled network
  runs under no hook and no op counter;
* ``peak_memory_bytes`` (CUDA, with the epoch): the peak of allocated device memory during the
  method's synthetic epoch (every method's network, buffer and data stay resident throughout, so
  it counts them all), and ``step_memory_bytes`` that peak above what was allocated before it;
* ``timed_seconds``: the wall time of all the timed rounds (every method's steps and floors);
* ``epoch_seconds``: one synthetic epoch of task T end to end, by the training loop's own epoch
  (:func:`xder_methods.run_epoch`: batch gathering from device-resident data, augmentation, steps,
  the epoch's read-back of its losses), and ``projected_protocol_seconds``: that epoch time times the
  benchmark's epochs and tasks (the step time of task T taken for every task; evaluation and
  end-of-task work left out);
* ``cudagraph_counters`` (backbones compiled into CUDA graphs): torch's counters of the graphs it
  did not run as CUDA graphs (``cudagraph_skips``; the reason goes to its ``cudagraphs`` log);
* ``replayed_steps`` (``train.step_graph``: whole steps recorded as CUDA graphs,
  :func:`xder_methods.run_step`): the method's steps replayed, timed rounds and epoch together
  (none for a method that does not declare its step replayable). The counts above are then of the
  first steps, which run eagerly (a recorded step's warm-up); on a CPU every replay is checked op
  by op instead, so the times there are the check's.

Each method trains as its plan says (:func:`bench_plan`: the protocol, the method's own defaults,
the options' ``train.*`` settings such as ``train.precision`` and ``train.step_graph``), its steps
taken by the loop's own optimiser (:func:`xder_methods.make_optimizer`) at the plan's lr.

The process takes its CPU threads as a training run does (:mod:`xder_methods.core.threads`: the
cores other programs leave free, shared with other runs, or a fixed ``OMP_NUM_THREADS``);
``threads`` lists the counts it used. ``--concurrent N,...`` measures several such processes at once instead
(:func:`xder_cli.runs.bench_share.run_share_bench`, with the same options).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from xder_cli.runs.bench_shapes import BENCH_SHAPES
from xder_cli.runs.build import build_method, build_network, resolve_device, run_generator
from xder_cli.runs.errors import BenchError, SettingError, option
from xder_cli.runs.settings import RunPlan, resolve_run
from xder_data import (
    DEFAULT_PROTOCOL,
    BenchmarkDefaults,
    Compose,
    CropFlip,
    Normalize,
    StrongAugment,
    benchmark_defaults,
)
from xder_methods import (
    ContinualSetting,
    FitState,
    MethodBase,
    NonFiniteLossError,
    OpCounter,
    StepGraphs,
    StepResult,
    TaskData,
    TaskStream,
    ThreadPolicy,
    TrainingSchedule,
    Transforms,
    autocast,
    batch_bounds,
    make_optimizer,
    method_class,
    method_config_class,
    protocol_fields,
    run_epoch,
    run_step,
)

__all__ = [
    "BENCH_SHAPES", "BenchOptions", "MethodAtTask", "bench_plan", "method_at_task", "run_bench",
    "wait_for_start", "with_protocol",
]  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """What ``xder-run bench`` measures and how (defaults: the command's). ``backbone``,
    ``width``, ``batch_size`` and ``buffer_size`` left None take the protocol's values
    (:func:`with_protocol`).

    Attributes:
        methods: the methods measured, by registry name, interleaved in this order.
        benchmark: the benchmark whose data shape the synthetic data takes (a key of
            :data:`BENCH_SHAPES`).
        protocol: the benchmark's training protocol (None: the default, the paper's).
        backbone: the backbone (None: the protocol's; EfficientNet-B2 on ``seq-miniimg``, the
            CIFAR ResNet18 on the others, the MNIST MLP on ``seq-mnist``).
        width: the ``resnet18-cifar`` width (None: the protocol's).
        batch_size: the stream and replay batch (None: the protocol's).
        buffer_size: the buffer size (None: the protocol's).
        task: the task index the measured steps belong to; the buffer holds tasks ``0..task-1``.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        steps: the timed rounds (each method's step and floor once a round).
        warmup: the untimed rounds before them.
        epoch: also time one synthetic epoch of task ``task`` per method.
        rounds: the fair-share benchmark (:func:`~xder_cli.runs.bench_share.run_share_bench`):
            its rounds, medians taken.
        start_after: in a fair-share child process: the folder of its start signal (after the
            warm-up, wait there for the other processes); None alone.
        plugins: modules or ``.py`` files a fair-share child process loads first (for the methods,
            benchmarks and backbones they register).
        settings: ``("section.KEY", value)`` pairs (``--set``), in their order, above the
            protocol and the options above: ``train.KEY`` for every measured method, as
            ``xder-run train --set`` takes it (``train.precision`` = ``bf16``,
            ``train.channels_last``, ``train.compile`` and ``train.compile_mode``,
            ``train.step_graph``: whole steps recorded as CUDA graphs and replayed);
            ``method.KEY`` for every measured method whose config has ``KEY`` (e.g.
            ``method.replay_forward`` = ``joint``: DER's, DER++'s and X-DER's one forward pass of
            the stream and buffer batches), a key no measured method has being an error.
    """

    methods: tuple[str, ...] = ("er", "derpp", "xder")
    benchmark: str = "seq-cifar100"
    protocol: str | None = None
    backbone: str | None = None
    width: int | None = None
    batch_size: int | None = None
    buffer_size: int | None = None
    task: int = 1
    device: str = "auto"
    steps: int = 20
    warmup: int = 5
    epoch: bool = True
    rounds: int = 3
    start_after: Path | None = None
    plugins: tuple[str, ...] = ()
    settings: tuple[tuple[str, Any], ...] = ()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class _Subject:
    """One method brought to task T, with its step and floor functions."""

    name: str
    step: Any
    floor: Any
    images: int
    ops: int
    launches: int
    syncs: int
    sync_names: dict[str, int]
    epoch: Any
    loop: FitState


class _Floor(nn.Module):
    """The floor's network as :class:`xder_methods.StepGraphs` sees a method: its step (one
    forward, backward and SGD step of fixed images) is always replayable."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def graph_key(self) -> tuple[()]:
        return ()


def bench_plan(name: str, options: BenchOptions) -> RunPlan[Any]:
    """The plan of method ``name`` as the bench measures it: the benchmark's protocol, the method's
    own defaults (no preset), ``options``' backbone, width, batch size (the replay batch too) and
    buffer size where the protocol fills them in the method's config
    (:func:`xder_methods.protocol_fields`), then ``options.settings``: every ``train.*`` one, the
    ``method.*`` ones the method has (``options`` with the protocol's values filled in:
    :func:`with_protocol`).

    Raises:
        SettingError, MethodConfigError: a setting that is not one, or a value out of its range.
    """
    overrides: dict[str, Any] = {
        "run.device": options.device,
        "backbone.name": options.backbone or "",
        "train.batch_size": options.batch_size,
    }
    if options.backbone == "resnet18-cifar":
        overrides["backbone.width"] = options.width
    filled = {"buffer_size": options.buffer_size, "minibatch_size": options.batch_size}
    config_cls = method_config_class(name)
    overrides |= {f"method.{key}": filled[key] for key in protocol_fields(config_cls) if key in filled}
    fields = {f.name for f in dataclasses.fields(config_cls)}
    for key, value in options.settings:
        if key.startswith("train.") or key.removeprefix("method.") in fields:
            overrides[key] = value
    method_cls = method_class(name)  # a method that refuses class-il (PNN) is measured as task-il
    if issubclass(method_cls, MethodBase) and "class-il" in method_cls.refused_scenarios:
        overrides["run.scenario"] = "task-il"
    protocol = options.protocol or DEFAULT_PROTOCOL
    return resolve_run(name, options.benchmark, preset="none", protocol=protocol, overrides=overrides)


@dataclass(frozen=True)
class _SyntheticTask:
    """The bench's one task as the loop's epoch reads a stream (``train_x``, ``train_y``; the
    shape and ``scenario`` for :class:`xder_methods.FitState`'s setting)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    classes_per_task: tuple[int, ...]
    scenario: str = "class-il"


@dataclass
class MethodAtTask:
    """A method brought to task ``task`` of a benchmark's shapes with a full memory
    (:func:`method_at_task`): the bench's subject, and the GPU checks' (``tests/gpu``)."""

    plan: RunPlan[Any]
    net: nn.Module
    method: Any
    loop: FitState
    x: torch.Tensor  # the task's stream (uint8 images) and labels, on the device
    y: torch.Tensor
    task: int
    n_tasks: int

    def step(self, rows: torch.Tensor | None = None) -> StepResult:
        """One training step on stream ``rows`` (the first batch by default), as the training loop
        runs it: :func:`xder_methods.run_step` (the augmentation, ``observe``, and
        :func:`xder_methods.apply_step`'s backward, hooks and optimiser step; replayed with
        ``train.step_graph``). The gradients stay on the parameters."""
        if rows is None:
            rows = torch.arange(self.plan.schedule.batch_size, device=self.x.device)
        return run_step(self.loop, self.x[rows], self.y[rows], task=self.task)


def method_at_task(name: str, options: BenchOptions, device: torch.device) -> MethodAtTask:
    """Method ``name`` at task ``options.task`` of ``options.benchmark``'s shapes
    (:data:`BENCH_SHAPES`), built from its plan (:func:`bench_plan`; ``options`` with the
    protocol's values filled in: :func:`with_protocol`) as training builds it; every earlier task
    seen through ``prefill`` (its memory full), the loop's optimiser (:func:`xder_methods.make_optimizer`:
    the plan's optimiser and lr, as task ``options.task`` of a run begins). The network's weights
    come from the plan's seed and the data from a CPU generator of seed 1, then move to
    ``device``: the same on every device (the method's own draws come from the run's generator on
    ``device``)."""
    shape, per_task, n_tasks, per_class = BENCH_SHAPES[options.benchmark]
    num_classes = per_task * n_tasks
    mean, std = (0.5,) * shape[0], (0.25,) * shape[0]
    image = shape[1] if len(shape) == 3 else None
    if image is None:
        raise SettingError(f"bench needs an image benchmark, not {options.benchmark}")
    transforms = Transforms(
        Compose(CropFlip(image, padding=max(1, image // 8), flip=shape[0] == 3), Normalize(mean, std)),
        Normalize(mean, std),
        StrongAugment(image, mean, std),
    )
    plan = bench_plan(name, options)
    task_il = plan.settings.scenario == "task-il"
    setting = ContinualSetting((per_task,) * n_tasks, shape, scenario="task-il" if task_il else "class-il")
    net = build_network(plan, num_classes, device)
    generator = run_generator(plan, device)
    method: Any = build_method(plan, net, setting, transforms, generator)
    data_gen = torch.Generator().manual_seed(1)
    n_items = per_class * per_task
    task_x = torch.randint(0, 256, (n_items, *shape), generator=data_gen, dtype=torch.uint8).to(device)
    for t in range(options.task):  # bring the method to task T with a full memory
        method.begin_task(t)
        labels = torch.arange(t * per_task, (t + 1) * per_task, device=device).repeat_interleave(per_class)
        method.prefill(t, TaskData(task_x, labels, t))
    method.begin_task(options.task)
    task_y = torch.arange(
        options.task * per_task, (options.task + 1) * per_task, device=device
    ).repeat_interleave(per_class)
    # The steps and the epoch are the training loop's own (xder_methods.run_step, run_epoch).
    stream = _SyntheticTask(task_x, task_y, (per_task,) * n_tasks, setting.scenario)
    loop = FitState(method, cast(TaskStream, stream), plan.fit_schedule, generator)
    loop.optimizer = make_optimizer(method.optimizer_parameters(), plan.fit_schedule)
    return MethodAtTask(plan, net, method, loop, task_x, task_y, options.task, n_tasks)


def _subject(name: str, options: BenchOptions, device: torch.device, defaults: BenchmarkDefaults) -> _Subject:
    """``name`` brought to task ``options.task`` (:func:`method_at_task`), with its step, its floor
    and its epoch; ``options`` with the protocol's values filled in."""
    at = method_at_task(name, options, device)
    plan, net, loop, task_x = at.plan, at.net, at.loop, at.x
    shape, per_task, _, _ = BENCH_SHAPES[options.benchmark]
    num_classes = per_task * at.n_tasks
    n_items = len(task_x)
    batch_rows = torch.arange(plan.schedule.batch_size, device=device)

    def step(rows: torch.Tensor = batch_rows) -> None:
        at.step(rows)

    if plan.schedule.compile:
        # Counted on an eager twin: a compiled network is neither hooked nor run under the op
        # counter (a dispatch mode), so that what is timed is torch's compiled code alone.
        eager = replace(options, settings=(*options.settings, ("train.compile", False)))
        twin = _subject(name, eager, device, defaults)
        images, ops, launches = twin.images, twin.ops, twin.launches
        syncs, sync_names = twin.syncs, twin.sync_names
        del twin
    else:
        seen = []
        hook = net.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0].shape[0]))
        step()
        hook.remove()
        images = sum(seen)
        with OpCounter() as counter:
            step()
        ops, launches = counter.total, counter.launches
        syncs, sync_names = counter.host_syncs, dict(counter.syncs)
    floor_net = build_network(plan, num_classes, device)
    floor_opt = make_optimizer(floor_net.parameters(), plan.fit_schedule)
    floor_x = torch.randn(images, *shape, device=device)
    no_labels = torch.zeros(0, dtype=torch.int64, device=device)

    def floor_step(x: torch.Tensor, _: torch.Tensor) -> StepResult:
        with autocast(plan.schedule.precision, device, cache=not plan.schedule.step_graph):
            loss = floor_net(x).float().logsumexp(dim=1).mean()
        floor_opt.zero_grad(set_to_none=True)
        loss.backward()
        floor_opt.step()
        return StepResult(loss.detach(), {}, {})

    # With step graphs the floor is replayed too: like against like.
    floor_graphs = StepGraphs(_Floor(floor_net), floor_opt, None) if plan.schedule.step_graph else None

    def floor() -> None:
        if floor_graphs is None:
            floor_step(floor_x, no_labels)
        else:
            floor_graphs.step(floor_step, floor_x, no_labels, options.task)

    def epoch() -> int:
        bounds = batch_bounds(n_items, plan.schedule.batch_size, drop_last=plan.schedule.drop_last)
        with contextlib.suppress(NonFiniteLossError):  # random data may diverge: the time stands
            run_epoch(loop, options.task, 0, torch.arange(n_items, device=device), bounds)
        return len(bounds)

    return _Subject(name, step, floor, images, ops, launches, syncs, sync_names, epoch, loop)


def wait_for_start(folder: Path, timeout: float = 600.0) -> None:
    """In a fair-share child (:mod:`xder_cli.runs.bench_share`, which writes ``go`` once every
    child is ready): say it is ready (a file in ``folder``), then wait for ``go``.

    Raises:
        BenchError: no ``go`` within ``timeout`` seconds.
    """
    (folder / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + timeout
    while not (folder / "go").exists():
        if time.monotonic() > deadline:
            raise BenchError(f"bench: the other processes never became ready ({folder})")
        time.sleep(0.005)


def _protocol_width(defaults: BenchmarkDefaults) -> int | None:
    """The protocol's ``resnet18-cifar`` width (64 unless it sets one); None for another backbone
    (an MLP has no width)."""
    if defaults.backbone != "resnet18-cifar":
        return None
    return int(defaults.backbone_options.get("width", 64))


def with_protocol(options: BenchOptions, defaults: BenchmarkDefaults) -> BenchOptions:
    """``options`` with ``backbone``, ``width``, ``batch_size`` and ``buffer_size`` left None
    taken from the protocol's ``defaults`` (EfficientNet-B2 on ``seq-miniimg``, the MNIST MLP on
    ``seq-mnist``, the CIFAR ResNet18 on the others; a width for the ResNet only); ``options``
    itself is left as it is. (The buffer size's range is the method config's to check, as a
    run's: :func:`bench_plan`.)

    Raises:
        SettingError: a width or batch size below 1.
    """
    options = replace(
        options,
        backbone=defaults.backbone if options.backbone is None else options.backbone,
        width=_protocol_width(defaults) if options.width is None else options.width,
        batch_size=defaults.batch_size if options.batch_size is None else options.batch_size,
        buffer_size=defaults.buffer_size if options.buffer_size is None else options.buffer_size,
    )
    for name, value in (("width", options.width), ("batch_size", options.batch_size)):
        if value is not None and value < 1:
            raise SettingError(f"{option(name)} must be >= 1, got {value}")
    return options


def timing_order(names: list[str], warmup: int, steps: int, *, blocked: bool) -> list[tuple[bool, str, str]]:
    """The bench's calls in order, each ``(timed, method, "step" | "floor")``: the ``warmup``
    untimed rounds, then the ``steps`` timed ones, every method's step and floor once a round.

    Interleaved (default): round by round, so that drift (clocks, a neighbour's load) hits every
    method alike. ``blocked``: within the warm-up and the timed part, each method's steps in a row,
    then its floor's, for networks run as CUDA graphs: every method's network and every floor's
    share one compiled function, whose graphs are recorded with one network's parameters, so that
    a call with another's records again; interleaved, the bench would time those re-recordings.
    (On an H200 this was not why the bench's CUDA-graph steps were slow: DER++'s took 24.6 ms
    interleaved and 28.8 ms blocked, where the training loop's took 10 ms.)"""
    calls = []
    for timed, rounds in ((False, warmup), (True, steps)):
        if blocked:
            calls += [(timed, n, kind) for n in names for kind in ("step", "floor") for _ in range(rounds)]
        else:
            calls += [(timed, n, kind) for _ in range(rounds) for n in names for kind in ("step", "floor")]
    return calls


def run_bench(options: BenchOptions) -> dict[str, Any]:
    """Measure every method of ``options.methods``; returns the JSON payload. ``backbone``,
    ``width``, ``batch_size`` and ``buffer_size`` left None take the protocol's values
    (:func:`with_protocol`; the payload's ``settings`` give the values used).

    Raises:
        SettingError: a benchmark without bench shapes or images, a task out of range, a width,
            batch size or buffer size out of range (and the packages' errors: an unknown method).
    """
    device = resolve_device(options.device)
    if options.benchmark not in BENCH_SHAPES:
        raise SettingError(f"bench shapes exist for {', '.join(BENCH_SHAPES)}, not {options.benchmark!r}")
    protocol = options.protocol or DEFAULT_PROTOCOL
    defaults = benchmark_defaults(options.benchmark, protocol)
    options = with_protocol(options, defaults)
    _, _, n_tasks, _ = BENCH_SHAPES[options.benchmark]
    if not 0 <= options.task < n_tasks:
        raise SettingError(f"{option('task')} must be in [0, {n_tasks - 1}] for {options.benchmark}")
    names = list(options.methods)
    for name in names:
        method_config_class(name)  # UnknownMethodError names the choices
    _check_settings(options.settings, names)
    # Every method's plan before any is built: a setting that is not one, or a value out of range,
    # is said at once. The train settings are every method's: the first plan's schedule stands
    # for them all (the payload's settings).
    plans = [bench_plan(name, options) for name in names]
    schedule = plans[0].schedule
    with ThreadPolicy() as threads:
        subjects = [_subject(name, options, device, defaults) for name in names]
        by_name = {s.name: s for s in subjects}
        steps: dict[str, list[float]] = {s.name: [] for s in subjects}
        floors: dict[str, list[float]] = {s.name: [] for s in subjects}
        timed_from = 0.0
        for timed, subject, kind in timing_order(
            [s.name for s in subjects], options.warmup, options.steps, blocked=schedule.cuda_graphs
        ):
            if timed and not timed_from:
                if options.start_after is not None:  # a fair-share child: start with the others
                    wait_for_start(options.start_after)
                timed_from = time.perf_counter()
            fn, store = (by_name[subject].step, steps) if kind == "step" else (by_name[subject].floor, floors)
            threads.poll()
            _sync(device)
            started = time.perf_counter()
            fn()
            _sync(device)
            if timed:
                store[subject].append(time.perf_counter() - started)
        timed_seconds = time.perf_counter() - timed_from
        timing = (steps, floors, timed_seconds, threads.used)
        return _payload(options, subjects, timing, device, defaults, protocol, schedule)


def _check_settings(settings: tuple[tuple[str, Any], ...], names: list[str]) -> None:
    """Every setting is a training one (``train.KEY``, checked with the plans) or a method's
    (``method.KEY``) that some measured method has."""
    for key, _ in settings:
        section, _, field = key.partition(".")
        if section == "train":
            continue
        if section != "method":
            raise SettingError(
                "bench takes training and method settings only (train.KEY=VALUE, method.KEY=VALUE), "
                f"not {key!r}"
            )
        if not any(field in {f.name for f in dataclasses.fields(method_config_class(n))} for n in names):
            raise SettingError(f"none of the measured methods ({', '.join(names)}) has a setting {key!r}")


def _payload(
    options: BenchOptions,
    subjects: list[_Subject],
    timing: tuple[dict[str, list[float]], dict[str, list[float]], float, list[int]],
    device: torch.device,
    defaults: BenchmarkDefaults,
    protocol: str,
    schedule: TrainingSchedule,
) -> dict[str, Any]:
    """The figures: ``timing`` holds each method's step and floor times, the timed rounds'
    seconds and the threads used."""
    steps, floors, timed_seconds, threads = timing
    _, _, n_tasks, _ = BENCH_SHAPES[options.benchmark]
    rows: list[dict[str, Any]] = []
    for subject in subjects:
        _sync(device)
        resident = 0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            resident = torch.cuda.memory_allocated(device)
        started = time.perf_counter()
        n_steps = subject.epoch() if options.epoch else 0
        _sync(device)
        epoch_seconds = time.perf_counter() - started if options.epoch else None
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" and options.epoch else None
        seconds = statistics.median(steps[subject.name])
        floor = statistics.median(floors[subject.name])
        row = {
            "method": subject.name,
            "seconds_per_step": seconds,
            "images_per_step": subject.images,
            "floor_seconds": floor,
            "step_over_floor": seconds / floor,
            "host_syncs_per_step": subject.syncs,
            "host_sync_ops": subject.sync_names,
            "ops_per_step": subject.ops,
            "launches_per_step": subject.launches,
            "peak_memory_bytes": peak,
            "step_memory_bytes": None if peak is None else peak - resident,
            "timed_seconds": timed_seconds,
            "epoch_steps": n_steps,
            "epoch_seconds": epoch_seconds,
            "projected_protocol_seconds": None
            if epoch_seconds is None
            else epoch_seconds * defaults.epochs * n_tasks,
            "replayed_steps": None if subject.loop.graphs is None else subject.loop.graphs.replays,
        }
        rows.append(row)
    by_name: dict[str, float] = {r["method"]: r["seconds_per_step"] for r in rows}
    ratios = {
        f"{a}/{b}": by_name[a] / by_name[b]
        for a in ("xder",)
        for b in ("derpp", "er")
        if a in by_name and b in by_name
    }
    return {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({platform.processor() or platform.machine()}, {'/'.join(map(str, threads))} threads)",
        "threads": threads,
        "torch": torch.__version__,
        "settings": {
            "benchmark": options.benchmark,
            "protocol": protocol,
            "backbone": options.backbone,
            "width": options.width,
            "batch_size": options.batch_size,
            "buffer_size": options.buffer_size,
            "task": options.task,
            "lr": schedule.lr,
            "optimizer": schedule.optimizer,
            "precision": schedule.precision,
            "channels_last": schedule.channels_last,
            "compile": schedule.compile,
            "compile_mode": schedule.compile_mode,
            "step_graph": schedule.step_graph,
            "train_settings": {k: v for k, v in options.settings if k.startswith("train.")},
            "method_settings": {k: v for k, v in options.settings if k.startswith("method.")},
            "steps": options.steps,
            "warmup": options.warmup,
            "protocol_epochs": defaults.epochs,
        },
        "methods": rows,
        "ratios": ratios,
        "cudagraph_counters": _cudagraph_counters() if schedule.cuda_graphs else None,
    }


def _cudagraph_counters() -> dict[str, int]:
    """torch's counters of the compiled graphs it did not run as CUDA graphs (``cudagraph_skips``;
    the reasons go to its ``cudagraphs`` log) and of the inputs a recorded graph did not take as
    static."""
    from torch._dynamo.utils import counters  # torch's compiler, imported only when it ran

    return {k: v for k, v in counters["inductor"].items() if k.startswith("cudagraph")}
