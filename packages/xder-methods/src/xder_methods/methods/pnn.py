"""PNN (``pnn``): progressive neural networks (Rusu et al., "Progressive Neural Networks", 2016), as
the DER paper ran them (Buzzega et al., NeurIPS 2020; the authors' code: mammoth ``models/pnn.py``,
``backbone/MNISTMLP_PNN.py``, ``backbone/ResNet18_PNN.py``): Task-IL only."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods.core.base import MethodBase
from xder_methods.core.errors import MethodConfigError
from xder_methods.core.protocols import Batch, ContinualSetting, Scenario, StepOutput, Transforms
from xder_methods.core.registry import register_method

__all__ = ["PNN", "LateralAdapter", "PNNConfig", "StagedBackbone", "progressive_forward"]


@runtime_checkable
class StagedBackbone(Protocol):
    """A backbone that gives PNN its stages: what the lateral connections need beyond
    :class:`~xder_methods.Backbone` (which shows only the features and the head, and so no layer
    a lateral could join).

    ``pnn_stages()`` returns the network as a chain of its own submodules ``s_1 .. s_n``, the
    last its classifier, such that ``forward(x) == s_n(h_{n-1})`` with ``h_1 = s_1(x)`` and
    ``h_l = relu(s_l(h_{l-1}))`` for ``1 < l < n``: each later stage's output is taken before
    a ReLU, which PNN applies after adding the stage's lateral. Activations ``h_l`` are
    ``(B, C)`` or ``(B, C, H, W)``. xder-models' ``mnist-mlp`` and ``resnet18-cifar`` give them
    (their ``pnn_stages`` say where the authors' laterals join).
    """

    def pnn_stages(self) -> tuple[nn.Module, ...]: ...


@dataclass(frozen=True, kw_only=True)
class PNNConfig:
    """PNN has no hyperparameters of its own (lr, batch size and epochs are the benchmark's
    protocol; mammoth ``best_args`` ``pnn``)."""


class LateralAdapter(nn.Module):
    """The lateral connection into one stage of a column from the same-depth activations of every
    earlier column (the authors' ``adaptor``): ``upper(relu(W (alpha * a) + b))``.

    ``a``: ``(B, k C, ...)``, the k earlier columns' activations ``h_{l-1}`` concatenated on the
    channels; ``alpha``: ``(1, k C, ...)`` learned scales, one per entry, drawn from ``U(0, 0.1)``
    (the authors' ``AlphaModule``); ``W, b``: ``k C -> C`` on the channels (a linear layer on
    ``(B, k C)``, a 1x1 convolution on ``(B, k C, H, W)``), drawn as torch draws a linear layer's
    (``U(+-1/sqrt(k C))``); ``upper``: a fresh copy of the stage ``s_l`` the lateral feeds, so the
    output has that stage's shape.

    Args:
        shape: ``(k C, ...)``, one example's concatenated activations.
        channels: C.
        upper: the copy of ``s_l`` (the adapter owns it).
        generator: the draws of ``alpha``, ``W`` and ``b``.
    """

    def __init__(
        self, shape: Sequence[int], channels: int, upper: nn.Module, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        if len(shape) not in (1, 3):
            raise MethodConfigError(
                "pnn's laterals take (B, C) or (B, C, H, W) activations, "
                f"not (B, {', '.join(map(str, shape))})"
            )
        device = next(upper.parameters()).device
        dtype = next(upper.parameters()).dtype
        draw_device = generator.device if generator is not None else device
        bound = 1.0 / math.sqrt(shape[0])

        def uniform(size: Sequence[int], low: float, high: float) -> nn.Parameter:
            values = torch.empty(tuple(size), device=draw_device, dtype=dtype).uniform_(
                low, high, generator=generator
            )
            return nn.Parameter(values.to(device))

        self.alpha = uniform((1, *shape), 0.0, 0.1)
        self.weight = uniform((channels, shape[0]), -bound, bound)
        self.bias = uniform((channels,), -bound, bound)
        self.upper = upper

    def forward(self, activations: Tensor) -> Tensor:
        x = activations * self.alpha
        if x.dim() == 2:
            x = F.linear(x, self.weight, self.bias)
        else:
            x = F.conv2d(x, self.weight[:, :, None, None], self.bias)
        out: Tensor = self.upper(F.relu(x))
        return out


def progressive_forward(
    columns: Sequence[Sequence[nn.Module]],
    laterals: Sequence[Sequence[LateralAdapter]],
    x: Tensor,
    *,
    frozen: int = 0,
) -> list[Tensor]:
    """Every column's logits, each column fed by the earlier ones (PNN's forward pass).

    Column k's stages ``columns[k] = (s_1, ..., s_n)`` (:class:`StagedBackbone`) compute
    ``h^k_1 = s_1(x)``, ``h^k_l = relu(s_l(h^k_{l-1}) + A^k_l([h^0_{l-1}, ..., h^{k-1}_{l-1}]))``
    for ``1 < l < n`` and the logits ``s_n(h^k_{n-1}) + A^k_n([h^0_{n-1}, ..., h^{k-1}_{n-1}])``,
    with ``A^k_l = laterals[k-1][l-2]`` (:class:`LateralAdapter`; column 0 has none).

    Args:
        columns: each column's stages, the first ``len(columns)`` columns.
        laterals: ``laterals[k - 1]``: column k's ``n - 1`` adapters.
        x: ``(B, ...)`` the input.
        frozen: the first ``frozen`` columns run without gradients (earlier tasks' columns).

    Returns:
        ``(B, C)`` logits of each column.
    """
    activations: list[list[Tensor]] = []
    logits: list[Tensor] = []
    for k, stages in enumerate(columns):
        with torch.set_grad_enabled(torch.is_grad_enabled() and k >= frozen):
            h = stages[0](x)
            own = [h]
            for depth in range(1, len(stages)):
                out = stages[depth](h)
                if k:
                    out = out + laterals[k - 1][depth - 1](torch.cat([a[depth - 1] for a in activations], 1))
                if depth < len(stages) - 1:
                    h = F.relu(out)
                    own.append(h)
        activations.append(own)
        logits.append(out)
    return logits


@register_method("pnn", PNNConfig)
class PNN(MethodBase[PNNConfig]):
    """Progressive neural networks (Rusu et al., 2016) in the DER paper's Task-IL setting.

    One column per task, each a copy of the backbone: task t trains column t (with its laterals)
    on the task's cross-entropy over all of its outputs (as the authors' code), while columns
    ``0..t-1`` run frozen (eval mode, no gradient, out of the optimiser: their weights and
    BatchNorm statistics never change after their task) and feed column t through lateral
    adapters (:class:`LateralAdapter`) at every stage after the first and at the logits
    (:func:`progressive_forward`). The stages come from the backbone (:class:`StagedBackbone`):
    which layers the authors' laterals join differs per backbone, which the Backbone protocol
    does not show, so each backbone of xder-models that PNN runs on says it (``pnn_stages``),
    and xder-methods imports none of them.

    :meth:`predict` gives every class the logit of its own task's column (column t's head for
    task t's classes): the loop's Task-IL argmax inside the task's classes is then PNN's
    prediction with the task given. Class-IL means nothing here (the column is chosen by the
    task), so PNN refuses every scenario but ``task-il`` (:attr:`refused_scenarios`; a class-il
    benchmark runs as task-il with ``run.scenario = "task-il"``).

    State: every column and adapter (all built at the start, so a checkpoint has one shape), the
    current task; ``net`` is column 0 (what an analysis of ``net`` sees).

    Differences from the authors' code:

    * Every column starts from the weights the backbone had when the method was built, and each
      adapter's upper part from those of the stage it feeds; the authors build each column and
      adapter anew (fresh random draws). xder-methods does not reach a backbone's initialiser, and
      library code draws from the run's generator only (which draws ``alpha``, ``W`` and ``b``).
    * The authors' MLP never uses its laterals: ``MNISTMLP_PNN`` sets ``self.old_cols = []`` and
      its forward tests that list, so on ``seq-mnist`` their columns are independent networks.
      Here the MLP's laterals join as that file builds them (before the second ReLU and at the
      logits), as in the ResNet and in Rusu et al.
    * The last layer of the MLP's adapters is a copy of ``fc2`` / the classifier, with a bias
      (theirs: ``Linear(100, 100, bias=False)``, ``Linear(100, C, bias=False)``).
    * Their ResNet feeds the laterals from copies of the earlier columns held inside the new
      column and run in train mode (batch statistics; the copies' running statistics drift), and
      passes the copied stem through the new column's ``bn1``; here the earlier columns
      themselves run frozen in eval mode, each through its own layers.
    * Their code stops adding columns after the fifth (``if self.task_idx == 4: return``): on
      ``seq-tinyimg`` (10 tasks) tasks 5-9 would train the fifth column on, and their test-time
      ``self.nets[task_label]`` fails for task 5. Here every task has its column.
    * Columns and adapters for every task exist from the start (the authors add one at each
      task's end); a task's classes are scored by its own column even before it trains (the
      untrained column: the Task-IL baseline of forward transfer), where mammoth does not
      evaluate PNN before training.
    * Each task's column and adapters train with the loop's optimiser (the run's momentum and
      weight decay; none in the ``paper`` preset), where the authors build a plain SGD per column.
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = {
        "class-il": "it needs the task at test time; run a class-il benchmark with run.scenario=task-il",
        "domain-il": "it needs the task at test time, and a column of its own per task's classes",
        "general": "it needs the task at test time, and task boundaries to add its columns",
    }

    def __init__(
        self,
        net: nn.Module,
        setting: ContinualSetting,
        transforms: Transforms,
        config: PNNConfig,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(net, setting, transforms, config, generator)  # refuses all but task-il
        if not isinstance(net, StagedBackbone):
            raise MethodConfigError(
                "pnn needs a backbone that gives its stages (pnn_stages: mnist-mlp and resnet18-cifar do), "
                f"not {type(net).__name__}"
            )
        if len(net.pnn_stages()) < 2:
            raise MethodConfigError("pnn needs a backbone of at least two stages (its features and its head)")
        initial = copy.deepcopy(net)
        self.columns = nn.ModuleList(copy.deepcopy(initial) for _ in range(setting.n_tasks - 1))
        shapes = self._activation_shapes()
        template = initial.pnn_stages()
        self.laterals = nn.ModuleList(
            nn.ModuleList(
                LateralAdapter((k * shape[0], *shape[1:]), shape[0], copy.deepcopy(stage), generator)
                for shape, stage in zip(shapes, template[1:], strict=True)
            )
            for k in range(1, setting.n_tasks)
        )

    @torch.no_grad()
    def _activation_shapes(self) -> list[tuple[int, ...]]:
        """One example's ``h_1 .. h_{n-1}`` (what each later stage takes), from a blank input
        through column 0 in eval mode (its mode restored)."""
        blank = torch.zeros(
            (1, *self.setting.input_shape), dtype=self.setting.input_dtype, device=self.device
        )
        was_training = self.net.training
        self.net.train(False)
        try:
            stages = self.stages(0)
            h = stages[0](self.transforms.test(blank))
            shapes = [tuple(h.shape[1:])]
            for stage in stages[1:-1]:
                h = F.relu(stage(h))
                shapes.append(tuple(h.shape[1:]))
        finally:
            self.net.train(was_training)
        return shapes

    def column(self, k: int) -> nn.Module:
        """Column ``k``'s backbone (``net`` for column 0)."""
        return self.net if k == 0 else self.columns[k - 1]

    def stages(self, k: int) -> tuple[nn.Module, ...]:
        """Column ``k``'s stages (:class:`StagedBackbone`)."""
        stages: tuple[nn.Module, ...] = self.column(k).pnn_stages()  # type: ignore[operator]
        return stages

    def forward_columns(self, x: Tensor, last: int, *, frozen: int = 0) -> list[Tensor]:
        """Logits ``(B, C)`` of columns ``0..last`` (:func:`progressive_forward`), the first
        ``frozen`` without gradients."""
        columns = [self.stages(k) for k in range(last + 1)]
        laterals = [list(adapters) for adapters in self.laterals[:last]]  # type: ignore[call-overload]
        return progressive_forward(columns, laterals, x, frozen=frozen)

    def train(self, mode: bool = True) -> PNN:
        """``mode`` for the current task's column and the later ones; the earlier columns (and
        their adapters) stay in eval mode: frozen, BatchNorm statistics included."""
        super().train(mode)
        for k in range(min(self.current_task, self.setting.n_tasks)):
            self.column(k).train(False)
            if k:
                self.laterals[k - 1].train(False)
        return self

    def begin_task(self, task: int) -> None:
        super().begin_task(task)
        self.train(self.training)

    def observe(self, batch: Batch) -> StepOutput:
        logits = self.forward_columns(batch.x, batch.task, frozen=batch.task)[-1]
        loss = F.cross_entropy(logits, batch.y)
        return StepOutput(loss, {"ce": loss.detach()})

    def predict(self, x: Tensor) -> Tensor:
        """``(B, num_classes)``: each class's logit from its own task's column."""
        logits = torch.stack(self.forward_columns(x, self.setting.n_tasks - 1))  # (T, B, C)
        owner = self.setting.task_of_class(x.device)
        return logits.gather(0, owner.view(1, 1, -1).expand(1, x.shape[0], -1)).squeeze(0)

    def optimizer_parameters(self) -> Iterator[nn.Parameter]:
        """The current task's column and its adapters."""
        yield from self.column(self.current_task).parameters()
        if self.current_task:
            yield from self.laterals[self.current_task - 1].parameters()
