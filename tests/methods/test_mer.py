"""What makes MER what it is: for each stream example, SGD steps on batches of memory items plus the
example, each followed by the within-batch Reptile step (beta), then the reservoir insertion and
the across-batch Reptile step (gamma). Worked by hand on a linear net without bias, in float64:
``logits = W x`` with ``W`` (2, 1), so that with ``p = softmax(W x)`` the cross-entropy's gradient
is ``(p - e_y) x``."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from xder_methods import Batch, ContinualSetting, MethodConfigError, Transforms, create_method
from xder_methods.methods.mer import MER, MERConfig, reptile_update


def identity(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    return x


def linear_mer(weights: tuple[float, float] = (0.0, 0.0), lr: float = 1.0, **config) -> MER:
    """MER on ``W = weights`` (2 classes, one task, inputs (1,) float64, no augmentation), with a
    plain SGD optimiser at ``lr`` as the loop would set it."""
    net = nn.Linear(1, 2, bias=False, dtype=torch.float64)
    with torch.no_grad():
        net.weight.copy_(torch.tensor(weights, dtype=torch.float64)[:, None])
    method = create_method(
        "mer",
        net=net,
        setting=ContinualSetting((2,), (1,), torch.float64),
        transforms=Transforms(train=identity, test=identity),
        config=MERConfig(**({"buffer_size": 10, "minibatch_size": 4} | config)),
        generator=torch.Generator().manual_seed(0),
    )
    assert isinstance(method, MER)
    method.optimizer = torch.optim.SGD(method.net.parameters(), lr=lr)
    return method


def example(x: float, y: int) -> Batch:
    inputs = torch.tensor([[x]], dtype=torch.float64)
    return Batch(inputs, torch.tensor([y]), inputs, 0)


def weights(method: MER) -> list[float]:
    return method.net.weight.detach().flatten().tolist()


def test_reptile_update_by_hand() -> None:
    # theta_0 = (1, 2), theta = (3, -2), rate 0.5: (1 + 0.5 * 2, 2 + 0.5 * -4) = (2, 0).
    theta = torch.tensor([3.0, -2.0], dtype=torch.float64)
    reptile_update([theta], [torch.tensor([1.0, 2.0], dtype=torch.float64)], 0.5)
    assert theta.tolist() == [2.0, 0.0]


def test_one_batch_within_then_across_by_hand() -> None:
    """Empty memory, example x = 1, y = 0, W = 0, lr 1, beta 0.5, gamma 0.25, one batch: p = (0.5,
    0.5), gradient (-0.5, 0.5); SGD: W = (0.5, -0.5); within: 0 + 0.5 * (0.5, -0.5) = (0.25, -0.25);
    across: 0 + 0.25 * (0.25, -0.25) = (0.0625, -0.0625)."""
    method = linear_mer(beta=0.5, gamma=0.25, batch_num=1)
    out = method.observe(example(1.0, 0))
    assert weights(method) == pytest.approx([0.0625, -0.0625], abs=1e-15)
    assert float(out.loss) == pytest.approx(math.log(2), abs=1e-15)  # CE at p = (0.5, 0.5)
    assert len(method.buffer) == 1  # the example, after its steps


def test_two_batches_each_with_its_within_step_then_one_across_step() -> None:
    """As above with two batches: the second starts from the first's within result (0.25, -0.25):
    p_0 = s = sigmoid(0.5), gradient (s - 1, 1 - s); SGD: 0.25 + (1 - s); within: 0.25 + 0.5 (1 - s)
    = 0.43877...; across (from W = 0): 0.25 * 0.43877... = 0.10969258..."""
    s = 1 / (1 + math.exp(-0.5))
    method = linear_mer(beta=0.5, gamma=0.25, batch_num=2)
    method.observe(example(1.0, 0))
    expected = 0.25 * (0.25 + 0.5 * (1 - s))
    assert expected == pytest.approx(0.1096925836, abs=1e-10)
    assert weights(method) == pytest.approx([expected, -expected], abs=1e-15)


def test_the_batch_is_the_memory_then_the_example_which_enters_after_its_steps() -> None:
    """Memory (x = 2, y = 1); example x = 1, y = 0; W = 0, lr 1, beta = gamma = 1. The batch is
    [(2, 1), (1, 0)]: gradient 1/2 [(0.5, -0.5) 2 + (-0.5, 0.5) 1] = (0.25, -0.25), so W = (-0.25,
    0.25). Were the example in the memory before its step, the batch [(2, 1), (1, 0), (1, 0)] would
    have gradient 0. Were the memory left out, the gradient would be (-0.5, 0.5)."""
    method = linear_mer()
    method.observe(example(2.0, 1))  # fills the memory; this step's result is not checked
    with torch.no_grad():
        method.net.weight.zero_()
    method.observe(example(1.0, 0))
    assert weights(method) == pytest.approx([-0.25, 0.25], abs=1e-15)
    stored = method.buffer.all()
    assert stored.examples.flatten().tolist() == [2.0, 1.0]
    assert stored.labels.tolist() == [1, 0]


def test_a_stream_batch_is_its_examples_one_after_another() -> None:
    """A batch of three examples leaves the network and the memory as three batches of one
    (mammoth runs MER at batch size 1); the logged ce is the mean of the three last losses."""
    xs, ys = [1.0, -2.0, 0.5], [0, 1, 1]
    together = linear_mer(weights=(0.3, -0.1), lr=0.1, beta=0.5, gamma=0.25, batch_num=2)
    inputs = torch.tensor(xs, dtype=torch.float64)[:, None]
    out = together.observe(Batch(inputs, torch.tensor(ys), inputs, 0))
    alone = linear_mer(weights=(0.3, -0.1), lr=0.1, beta=0.5, gamma=0.25, batch_num=2)
    losses = [alone.observe(example(x, y)).loss for x, y in zip(xs, ys, strict=True)]
    assert weights(together) == pytest.approx(weights(alone), abs=1e-14)
    assert together.buffer.all().examples.flatten().tolist() == xs
    assert float(out.terms["ce"]) == pytest.approx(float(torch.stack(losses).mean()), abs=1e-14)


@pytest.mark.parametrize(("field", "value"), [("beta", 0.0), ("gamma", -1.0), ("batch_num", 0)])
def test_config_rejects_rates_and_counts_out_of_range(field, value) -> None:
    with pytest.raises(MethodConfigError, match=rf"^method\.{field} must be"):
        MERConfig(**{field: value})
