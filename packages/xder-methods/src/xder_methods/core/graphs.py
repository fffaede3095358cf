"""Whole training steps replayed from CUDA graphs (``train.step_graph``).

At batch 32 a step of DER++ on the CIFAR ResNet-18 launches some 800 kernels, each of which
costs the host 20-28 us on an H200 (docs/performance.md, "CUDA graphs"): the step is bound by
launches, not by FLOPs, and compiling the backbone alone into graphs leaves the augmentation,
the buffer's draws and writes, the losses and the optimiser step launching one kernel at a time.
A CUDA graph records every launch of one step, then replays them all as one.

A replay runs the recorded kernels on the recorded memory; the Python code of the step does not
run. So a step can be replayed only while it runs the same ops, with the same shapes and Python
scalars, on the same held tensors (parameters, optimiser state, the buffer's storage), and
changes no Python state. A method declares when that holds with
:meth:`~xder_methods.MethodBase.graph_key`; :class:`StepGraphs` records a step once its key
(with the task, the batch's shape and the learning rates) has held for a few eager steps, and
replays it while the key holds. Reservoir insertion qualifies once the buffer is full, because
the buffer counts the items offered on the device (:attr:`xder_methods.Buffer.seen`).

On a CPU there are no CUDA graphs. There, :class:`ReplayCheck` stands in for them: every step
that a GPU would replay runs eagerly and is checked against the recorded one (the same ops in
the same order, with the same shapes, strides, dtypes and Python arguments, the same held
tensors, and no Python attribute of the method changed), and a difference raises
:class:`StepNotReplayable` naming the first op that differs. ``train.step_graph`` on a CPU is
therefore a test of a method's replay safety (slower than a plain run), and the results are a
plain run's.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from xder_methods.core.errors import MethodError

__all__ = ["CaptureFailed", "CudaGraphs", "ReplayCheck", "StepGraphs", "StepNotReplayable", "StepResult"]


class StepNotReplayable(MethodError):
    """A step declared replayable (:meth:`~xder_methods.MethodBase.graph_key`) ran differently
    from the recorded one: a CUDA graph would have replayed the wrong computation."""


class StepResult(NamedTuple):
    """What a training step hands back to the loop: its loss (detached; None when the method
    took no step), its logged terms and its sampled gradient norms (device tensors)."""

    loss: Tensor | None
    terms: dict[str, Tensor]
    norms: dict[str, Tensor]


StepBody = Callable[[Tensor, Tensor], StepResult]
"""One whole training step on a stream batch ``(x_raw, y)``: observe, backward, optimiser step."""


class Backend(Protocol):
    """How :class:`StepGraphs` records, replays and warms up steps."""

    def warm(self, body: StepBody, x_raw: Tensor, y: Tensor) -> StepResult: ...

    def record(self, body: StepBody, x_raw: Tensor, y: Tensor) -> tuple[Any, StepResult]: ...

    def replay(self, recorded: Any, body: StepBody, x_raw: Tensor, y: Tensor) -> StepResult | None:
        """Replay a record; None where its outputs are the record's (static) ones."""


class CaptureFailed(RuntimeError):
    """torch could not capture a step into a CUDA graph (an op that cannot be captured)."""


class CudaGraphs:
    """The CUDA backend: eager warm-up steps on a side stream, as torch asks before a capture;
    a recorded step is captured into a ``torch.cuda.CUDAGraph`` (with the run's generator
    registered, so each replay draws fresh random numbers from it) and then replayed once, since
    a capture runs nothing. A capture that fails raises :class:`CaptureFailed`."""

    def __init__(self, generator: torch.Generator | None, device: torch.device) -> None:
        self.generator = generator
        self.device = device
        self.side = torch.cuda.Stream(device)

    def warm(self, body: StepBody, x_raw: Tensor, y: Tensor) -> StepResult:
        current = torch.cuda.current_stream(self.device)
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            result = body(x_raw, y)
        current.wait_stream(self.side)
        return result

    def record(self, body: StepBody, x_raw: Tensor, y: Tensor) -> tuple[Any, StepResult]:
        graph = torch.cuda.CUDAGraph()
        default = torch.cuda.default_generators[self.device.index or 0]
        if self.generator is not None and self.generator is not default:
            if not hasattr(graph, "register_generator_state"):
                raise CaptureFailed("this torch cannot capture draws from a generator of its own")
            graph.register_generator_state(self.generator)
        try:
            with torch.cuda.device(self.device), torch.cuda.graph(graph):
                result = body(x_raw, y)
        except RuntimeError as error:
            raise CaptureFailed(
                str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            ) from error
        graph.replay()
        return graph, result

    def replay(self, recorded: Any, body: StepBody, x_raw: Tensor, y: Tensor) -> StepResult | None:
        recorded.replay()
        return None


_PLAIN = (bool, int, float, complex, str, torch.dtype, torch.device, torch.layout, torch.memory_format)


class _Trace(TorchDispatchMode):
    """Records each dispatched op with the signature of its arguments: tensors by shape, stride,
    dtype and device, and by where their memory comes from (made by an earlier op of this step,
    or held from before it: then its address, which a replay reuses); anything else by value."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[tuple[str, Hashable]] = []
        self.made: set[int] = set()

    def signature(self, value: Any) -> Hashable:
        if isinstance(value, Tensor):
            address = value.untyped_storage().data_ptr()
            origin = "made" if address in self.made else ("held", address)
            where = (value.dtype, value.device.type, value.storage_offset(), origin)
            return ("tensor", tuple(value.shape), value.stride(), *where)
        if isinstance(value, (list, tuple)):
            return tuple(self.signature(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, self.signature(v)) for k, v in sorted(value.items()))
        if isinstance(value, torch.Generator):  # its Python object is made afresh per op
            return ("generator", str(value.device))
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        if value is None or isinstance(value, _PLAIN):
            return value
        return ("object", type(value).__name__)  # e.g. a profiler's record-function handle

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        self.ops.append((str(func), (self.signature(args), self.signature(kwargs))))
        out = func(*args, **kwargs)
        for leaf in tree_leaves(out):
            if isinstance(leaf, Tensor):
                self.made.add(leaf.untyped_storage().data_ptr())
        return out


def python_state(method: Any) -> dict[str, Any]:
    """The plain Python values (numbers, strings, flags, None) held by ``method`` and each of its
    submodules, and the lengths of the lists, tuples, dicts and sets they hold: what a replayed
    step, which runs no Python, cannot change."""
    state: dict[str, Any] = {}
    modules = method.named_modules() if isinstance(method, nn.Module) else [("", method)]
    for name, module in modules:
        for key, value in vars(module).items():
            where = f"{name}.{key}" if name else key
            if value is None or isinstance(value, (bool, int, float, str)):
                state[where] = value
            elif isinstance(value, (list, tuple, dict, set)) and not key.startswith("_"):
                state[f"len({where})"] = len(value)
    return state


def _changes(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The first three entries of :func:`python_state` that differ, ``name: old -> new`` ("": none)."""
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return ", ".join(f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in changed[:3])


def _first_difference(recorded: list[Any], seen: list[Any]) -> str:
    for i, (a, b) in enumerate(zip(recorded, seen, strict=False)):
        if a != b:
            return f"op {i}: recorded {a[0]} {a[1]!r:.300}, now {b[0]} {b[1]!r:.300}"
    return f"the recorded step ran {len(recorded)} ops, this one {len(seen)}"


@dataclass
class _Recorded:
    """ReplayCheck's record of a step: its ops."""

    ops: list[tuple[str, Hashable]]


class ReplayCheck:
    """The CPU backend: runs every step eagerly and checks each would-be replay against the
    recorded step (see the module docstring); raises :class:`StepNotReplayable` where they
    differ."""

    def __init__(self, method: nn.Module) -> None:
        self.method = method
        self.checked = 0

    def warm(self, body: StepBody, x_raw: Tensor, y: Tensor) -> StepResult:
        return body(x_raw, y)

    def _traced(self, body: StepBody, x_raw: Tensor, y: Tensor) -> tuple[list[Any], StepResult]:
        before = python_state(self.method)
        with _Trace() as trace:
            result = body(x_raw, y)
        changed = _changes(before, python_state(self.method))
        if changed:
            raise StepNotReplayable(
                f"{type(self.method).__name__}'s step, declared replayable, changed Python state, "
                f"which a CUDA graph's replay would not: {changed}"
            )
        return trace.ops, result

    def record(self, body: StepBody, x_raw: Tensor, y: Tensor) -> tuple[Any, StepResult]:
        ops, result = self._traced(body, x_raw, y)
        return _Recorded(ops), result

    def replay(self, recorded: Any, body: StepBody, x_raw: Tensor, y: Tensor) -> StepResult | None:
        ops, result = self._traced(body, x_raw, y)
        if ops != recorded.ops:
            raise StepNotReplayable(
                f"{type(self.method).__name__}'s step, declared replayable, ran other ops than the "
                "recorded one, so a CUDA graph would have replayed the wrong computation: "
                f"{_first_difference(recorded.ops, ops)}"
            )
        self.checked += 1
        return result


@dataclass
class _Graph:
    """One recorded step: the backend's record, its static inputs (the batch is copied into
    them before each replay), its outputs and the gradients it leaves in the parameters."""

    recorded: Any
    x_raw: Tensor
    y: Tensor
    result: StepResult
    grads: list[Tensor | None]


class StepGraphs:
    """Records training steps and replays them (see the module docstring).

    A step's key is the method's :meth:`~xder_methods.MethodBase.graph_key` (None: the step runs
    eagerly, as without StepGraphs), the task, the batch's shapes and dtypes and the optimiser's
    learning rates. A key seen for ``warmup`` eager steps in a row is recorded; a recorded key
    is replayed. At most ``capacity`` steps stay recorded (the least recently used goes first),
    each holding its own memory. A key whose capture fails (:class:`CaptureFailed`) is refused
    with a warning: that step and every later one with the key run eagerly. A warm-up step that
    changes the method's Python state (:func:`python_state`) but not its key raises
    :class:`StepNotReplayable` on any device: the declaration is wrong.

    Args:
        method: the learner (its :meth:`graph_key` decides).
        optimizer: the task's optimiser; a new one (a new task) needs new StepGraphs.
        generator: the run's generator, registered with each CUDA graph.
        warmup: eager steps with a key before it is recorded (3: torch's advice before a
            capture, and time for lazily made state such as momentum buffers).
        capacity: recorded steps kept at most.
        backend: :class:`CudaGraphs` on a CUDA device, else :class:`ReplayCheck` (default: by
            the method's device).
    """

    def __init__(
        self,
        method: Any,
        optimizer: torch.optim.Optimizer,
        generator: torch.Generator | None,
        *,
        warmup: int = 3,
        capacity: int = 4,
        backend: Backend | None = None,
    ) -> None:
        self.method = method
        self.optimizer = optimizer
        if backend is None:
            device = method.device
            backend = CudaGraphs(generator, device) if device.type == "cuda" else ReplayCheck(method)
        self.backend = backend
        self.warmup = warmup
        self.capacity = capacity
        self.graphs: OrderedDict[Hashable, _Graph] = OrderedDict()
        self.streak: tuple[Hashable, int] = (None, 0)
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.replays = 0
        self.records = 0
        self.refused: dict[Hashable, str] = {}
        """Keys whose capture failed (the error): their steps run eagerly."""

    def key(self, x_raw: Tensor, y: Tensor, task: int) -> Hashable:
        """The step's key (None: not replayable now)."""
        method_key = self.method.graph_key()
        if method_key is None:
            return None
        lrs = tuple(group["lr"] for group in self.optimizer.param_groups)
        return (method_key, task, tuple(x_raw.shape), x_raw.dtype, tuple(y.shape), y.dtype, lrs)

    def step(self, body: StepBody, x_raw: Tensor, y: Tensor, task: int) -> StepResult:
        """Run one training step: eagerly, by recording it, or by replaying its record."""
        key = self.key(x_raw, y, task)
        if key in self.refused:
            return body(x_raw, y)
        graph = self.graphs.get(key) if key is not None else None
        if graph is not None:
            self.graphs.move_to_end(key)
            graph.x_raw.copy_(x_raw)
            graph.y.copy_(y)
            result = self.backend.replay(graph.recorded, body, graph.x_raw, graph.y)
            self.replays += 1
            if result is not None:
                return result
            # The replay wrote the record's gradient tensors; an eager step since may have
            # left others in the parameters.
            for param, grad in zip(self.params, graph.grads, strict=True):
                param.grad = grad
            return graph.result
        last, count = self.streak
        count = count + 1 if key is not None and key == last else 1
        self.streak = (key, count)
        if key is None:
            return body(x_raw, y)
        if count <= self.warmup:
            before = python_state(self.method)
            result = self.backend.warm(body, x_raw, y)
            changed = _changes(before, python_state(self.method))
            if changed and self.key(x_raw, y, task) == key:
                raise StepNotReplayable(
                    f"{type(self.method).__name__}'s step changed Python state ({changed}) while "
                    "its graph_key stayed the same: a CUDA graph's replay would not change it"
                )
            return result
        if len(self.graphs) >= self.capacity:
            self._evict()
        x_static, y_static = x_raw.clone(), y.clone()
        try:
            recorded, result = self.backend.record(body, x_static, y_static)
        except CaptureFailed as error:
            # The capture ran none of the step: run it eagerly, as every later step of the key.
            self.refused[key] = str(error)
            warnings.warn(
                f"step graphs: {type(self.method).__name__}'s step could not be captured, so steps "
                f"like it run eagerly: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
            return body(x_raw, y)
        self.graphs[key] = _Graph(recorded, x_static, y_static, result, [p.grad for p in self.params])
        self.records += 1
        return result

    def _evict(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)  # no parameter keeps a gradient of its memory
        self.graphs.popitem(last=False)

    def close(self) -> None:
        """Drop every record (their memory) and the gradients they left in the parameters."""
        self.optimizer.zero_grad(set_to_none=True)
        self.graphs.clear()
