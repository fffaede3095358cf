"""JT (``joint``): joint training on the union of all tasks, the upper bound of Table 1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from xder_methods.core.base import MethodBase
from xder_methods.core.errors import MethodConfigError
from xder_methods.core.protocols import Batch, MethodConfig, StepOutput
from xder_methods.core.registry import register_method
from xder_methods.parts.losses import seen_class_cross_entropy

if TYPE_CHECKING:
    from xder_methods.core.schedule import TrainingSchedule

__all__ = ["Joint", "JointConfig"]


@dataclass(frozen=True, kw_only=True)
class JointConfig(MethodConfig):
    """Attributes:
    mode: ``final`` (the paper's JT and the authors' code): no training until the last task,
        then the benchmark's epochs over the union of all tasks, from the untrained network.
        ``cumulative``: at every task t, train on the union of tasks 0..t (continuing from the
        current weights), so that every row of the accuracy matrix is a joint model; it costs
        about (T + 1) / 2 times more.
    """

    mode: Literal["final", "cumulative"] = "final"

    def __post_init__(self) -> None:
        if self.mode not in ("final", "cumulative"):
            raise MethodConfigError(f"method.mode must be final or cumulative, got {self.mode!r}")

    def check_schedule(self, schedule: TrainingSchedule) -> None:
        """``final`` trains only at the benchmark's last task: a stream shortened by
        ``train.tasks`` would never train."""
        if schedule.tasks is not None and self.mode == "final":
            raise MethodConfigError(
                "train.tasks cannot shorten joint with method.mode = 'final': it trains only at the "
                "benchmark's last task; pick another method.mode or drop train.tasks"
            )


@register_method("joint", JointConfig)
class Joint(MethodBase[JointConfig]):
    """Joint training (JT), X-DER paper Sec. 5.2: the i.i.d. upper bound.

    With ``mode="final"`` the rows of the accuracy matrix before the last task come from the
    untrained network; only the last row (FAA) is meaningful, as in the paper (FF is "-").

    Scenarios: every one. In ``domain-il`` the union of the tasks is every domain's data over the
    one label set (mammoth's ``joint``). On a ``general`` stream (one task to the learner) both
    modes are the DER paper's JOINT (mammoth's ``joint_gcl``): the network, untrained until the
    stream's end, trains on everything the stream showed, shuffled (not in the stream's order,
    which the loop keeps for the other methods), in batches of the run's batch size with the
    last partial batch kept where the protocol keeps it (``digits-360``, ``mnist-360``), then
    is evaluated; the cross-entropy spans every class. Where it differs from ``joint_gcl``: it
    trains the schedule's epochs (the protocols' 1; ``joint_gcl`` always 1), with the loop's
    optimiser (SGD at the run's lr and momentum, which the protocols set to 0, as ``joint_gcl``'s
    plain SGD), and augments the stored rows anew each epoch (``joint_gcl`` keeps the stream's
    augmented views; the 360 streams augment nothing, so the two are the same).
    """

    @property
    def training_data(self) -> Literal["task", "cumulative", "none"]:  # type: ignore[override]
        if self.config.mode == "cumulative" or self.current_task == self.setting.n_tasks - 1:
            return "cumulative"
        return "none"

    @property
    def forgetting_defined(self) -> bool:
        """FF needs a trained model after every task: not the case in ``final`` mode (the paper: "-")."""
        return self.config.mode == "cumulative"

    def observe(self, batch: Batch) -> StepOutput:
        loss = seen_class_cross_entropy(self.net(batch.x), batch.y, self.seen_classes(batch.task))
        return StepOutput(loss, {"ce": loss.detach()})
