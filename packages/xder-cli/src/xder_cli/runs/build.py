"""A run's parts built from its plan: the device (:func:`resolve_device`), its data where
``run.data_device`` puts them (:func:`load_data`, :func:`place_data`), the network
(:func:`build_network`) and the method (:func:`build_method`). Training, loading a run back and
the step-time benchmark all build them here."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from xder_cli.runs.errors import SettingError, option
from xder_cli.runs.settings import Notify, RunPlan, ignore
from xder_data import Benchmark, Progress, load_benchmark, with_scenario
from xder_data.benchmark import ClassOrderSpec, no_progress
from xder_methods import ContinualMethod, ContinualSetting, Transforms, create_method
from xder_models import create_backbone

__all__ = [
    "benchmark_setting",
    "build_method",
    "build_network",
    "load_data",
    "place_data",
    "resolve_device",
    "run_generator",
]


def resolve_device(spec: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; anything else is checked.

    Raises:
        SettingError: not a device, or not one this machine has.
    """
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as error:
        raise SettingError(f"run.device {spec!r} is not a device: use auto, cpu, cuda or cuda:N") from error
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SettingError(
                f"run.device {spec!r}: no CUDA device is available here; use {option('run.device')} cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SettingError(f"run.device {spec!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise SettingError(f"run.device {spec!r} is not supported: use auto, cpu, cuda or cuda:N")
    return device


def place_data(bench: Benchmark, device: torch.device, where: str, notify: Notify = ignore) -> Benchmark:
    """Put the benchmark's tensors where ``run.data_device`` says (see
    :class:`~xder_cli.runs.settings.RunSettings`); ``notify`` hears why the data stay in host
    memory when ``auto`` keeps them there."""
    if device.type != "cuda" or where == "device":
        return bench.to(device)
    if where == "auto":
        free, _ = torch.cuda.mem_get_info(device)
        if bench.nbytes < free / 2:
            return bench.to(device)
        notify(
            f"note: the data ({bench.nbytes / 2**30:.1f} GiB) stay in host memory: less than twice their "
            f"size is free on {device}"
        )
    return bench.pin_memory()


def load_data(
    plan: RunPlan[Any],
    device: torch.device,
    *,
    data_root: str | None = None,
    data_device: str | None = None,
    notify: Notify = ignore,
    read_progress: Progress = no_progress,
) -> Benchmark:
    """The plan's benchmark (its class order, validation split, protocol, options and the scenario
    ``run.scenario`` runs it in: :func:`xder_data.with_scenario`), read from
    ``data_root`` (default: the plan's ``run.data_root``) and placed as ``data_device`` (default:
    the plan's ``run.data_device``) says;
    ``notify`` hears where the data stay and the benchmark's notes, ``read_progress`` wraps the
    loop that reads its files."""
    settings = plan.settings
    bench = load_benchmark(
        settings.benchmark,
        data_root or settings.data_root,
        class_order=cast(ClassOrderSpec, settings.class_order),  # checked by load_benchmark
        seed=settings.seed,
        validation=settings.validation,
        protocol=settings.protocol,
        progress=read_progress,
        **plan.benchmark,
    )
    if settings.scenario != "benchmark":
        bench = with_scenario(bench, settings.scenario)
    bench = place_data(bench, device, data_device or settings.data_device, notify)
    for note in bench.notes:
        notify(f"note: {note}")
    return bench


def build_network(plan: RunPlan[Any], num_classes: int, device: torch.device) -> nn.Module:
    """The plan's backbone with ``num_classes`` outputs, initialised from the run's seed, on
    ``device``, in the memory format and compiled as ``train.channels_last``, ``train.compile``
    and ``train.compile_mode`` say (compiled in place: parameter names, and so checkpoints, stay
    those of the network; into CUDA graphs: :func:`copy_outputs_without_grad`)."""
    options = {k: v for k, v in plan.backbone.items() if k != "name"}
    torch.manual_seed(plan.settings.seed)
    net = create_backbone(plan.backbone["name"], num_classes, **options).to(device)
    if plan.schedule.channels_last:
        net = net.to(memory_format=torch.channels_last)
    if plan.schedule.compile:
        # The loop's sampled gradient-norm probes back-propagate with retain_graph=True, which a
        # compiled backward with donated buffers refuses; torch's own error names this switch.
        import torch._functorch.config as functorch_config

        functorch_config.donated_buffer = False
        net.compile(mode=plan.schedule.compile_mode)
        if plan.schedule.cuda_graphs:
            copy_outputs_without_grad(net)
    return net


def copy_outputs_without_grad(net: nn.Module) -> None:
    """Give the callers of a network compiled into CUDA graphs a copy of each output of a call
    made without gradients (evaluation, X-DER's logits of the buffer at a task's end, chunk by
    chunk), and the graph's own output otherwise.

    A graph's outputs live in memory that its next replay writes over. In training torch keeps a
    step's outputs until their backward pass; a call without gradients starts a new replay, so
    that a list of such outputs (a chunked forward pass) would be overwritten: torch then raises
    "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run" (seen on
    an H200 in X-DER's ``end_task``). The copy is one kernel per call."""
    compiled = net._compiled_call_impl
    assert compiled is not None, "copy_outputs_without_grad needs a compiled network"

    def call(*args: Any, **kwargs: Any) -> Any:
        out = compiled(*args, **kwargs)
        if torch.is_grad_enabled():
            return out
        if isinstance(out, torch.Tensor):
            return out.clone()
        return type(out)(o.clone() if isinstance(o, torch.Tensor) else o for o in out)

    net._compiled_call_impl = call


def run_generator(plan: RunPlan[Any], device: torch.device) -> torch.Generator:
    """The run's generator on ``device``, seeded with its seed: every random draw of its method
    and of its loop comes from it."""
    return torch.Generator(device=device).manual_seed(plan.settings.seed)


def build_method(
    plan: RunPlan[Any],
    net: nn.Module,
    setting: ContinualSetting,
    transforms: Transforms,
    generator: torch.Generator,
) -> ContinualMethod:
    """The plan's method (``run.method`` with its ``[method]`` config) around ``net``, for a
    stream of ``setting``'s shape, drawing from ``generator`` (:func:`run_generator`)."""
    return create_method(
        plan.settings.method,
        net=net,
        setting=setting,
        transforms=transforms,
        config=plan.method_config,
        generator=generator,
    )


def benchmark_setting(bench: Benchmark) -> tuple[ContinualSetting, Transforms]:
    """The stream shape and the transforms a method is built for on ``bench``."""
    setting = ContinualSetting(bench.classes_per_task, bench.input_shape, bench.train_x.dtype, bench.scenario)
    transforms = Transforms(bench.train_transform, bench.test_transform, bench.strong_transform)
    return setting, transforms
