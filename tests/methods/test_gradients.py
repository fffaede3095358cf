"""Per-example gradients against a loop of single-item ``torch.autograd.grad``; flat gradient vectors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from xder_methods.parts.gradients import flatten_gradients, per_example_gradients


def test_per_example_gradients_match_autograd_item_by_item(stream, tiny_net) -> None:
    torch.manual_seed(0)
    net = tiny_net(6, batchnorm=True).eval()
    with torch.no_grad():
        net.body[2].running_mean.uniform_(-1, 1)  # non-trivial running statistics
    x, y = stream.train_x[:5].float() / 255, stream.train_y[:5]
    grads, values = per_example_gradients(net, F.cross_entropy, x, y)
    params = dict(net.named_parameters())
    assert list(grads) == list(params)
    for i in range(5):
        loss = F.cross_entropy(net(x[i : i + 1]), y[i : i + 1])
        expected = torch.autograd.grad(loss, list(params.values()))
        for (name, got), want in zip(grads.items(), expected, strict=True):
            assert got.shape == (5, *params[name].shape)
            torch.testing.assert_close(got[i], want)
        torch.testing.assert_close(values[i], loss.detach())
    assert all(p.grad is None for p in params.values())
    assert not values.requires_grad


def test_per_example_gradients_of_any_objective_and_only_trainable_parameters(stream, tiny_net) -> None:
    """A log-likelihood over the first 4 outputs, the first layer frozen: by default its gradient
    is there too; ``trainable_only`` leaves it out and the rest unchanged."""
    torch.manual_seed(1)
    net = tiny_net(6).eval()
    net.body[1].requires_grad_(False)
    x, y = stream.train_x[:4].float() / 255, stream.train_y[:4] % 4

    def log_likelihood(logits, label):
        return logits[0, :4].log_softmax(dim=0).gather(0, label).squeeze(0)

    every, values = per_example_gradients(net, log_likelihood, x, y)
    trainable, _ = per_example_gradients(net, log_likelihood, x, y, trainable_only=True)
    names = [name for name, _ in net.named_parameters()]
    assert list(every) == names
    assert list(trainable) == ["classifier.weight", "classifier.bias"]
    for i in range(4):
        leaves = [p.detach().requires_grad_(True) for p in net.parameters()]
        out = torch.func.functional_call(net, dict(zip(names, leaves, strict=True)), (x[i : i + 1],))
        value = torch.log_softmax(out[0, :4], dim=0)[y[i]]
        expected = dict(zip(names, torch.autograd.grad(value, leaves), strict=True))
        torch.testing.assert_close(values[i], value.detach())
        for name in names:
            torch.testing.assert_close(every[name][i], expected[name])
        for name in trainable:
            torch.testing.assert_close(trainable[name][i], expected[name])
    # The classifier's rows of the outputs outside the softmax get no gradient.
    assert torch.count_nonzero(every["classifier.weight"][:, 4:]) == 0


def test_per_example_gradients_of_vector_inputs() -> None:
    """Items that are vectors (x: (N, 3) through a Linear layer): each is its own batch of one,
    ``x_i[None]`` of shape (1, 3), whatever the item's first dimension."""
    torch.manual_seed(2)
    net = nn.Linear(3, 4)
    x, y = torch.randn(5, 3), torch.tensor([0, 3, 1, 1, 2])
    grads, values = per_example_gradients(net, F.cross_entropy, x, y)
    for i in range(5):
        loss = F.cross_entropy(net(x[i : i + 1]), y[i : i + 1])
        weight, bias = torch.autograd.grad(loss, [net.weight, net.bias])
        torch.testing.assert_close(grads["weight"][i], weight)
        torch.testing.assert_close(grads["bias"][i], bias)
        torch.testing.assert_close(values[i], loss.detach())


def test_flatten_gradients_by_hand() -> None:
    """Gradients in parameter order, a missing one as zeros of its parameter's size and dtype (bf16
    here: the vector stays bf16); one gradient per parameter, no more, no less."""
    params = [nn.Parameter(torch.zeros(shape, dtype=torch.bfloat16)) for shape in [(2, 3), (2,), (1,)]]
    grads = [torch.arange(6.0).view(2, 3).bfloat16(), None, torch.tensor([7.0], dtype=torch.bfloat16)]
    flat = flatten_gradients(params, grads)
    assert flat.dtype == torch.bfloat16
    assert flat.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0, 7.0]
    with pytest.raises(ValueError, match="shorter"):
        flatten_gradients(params, grads[:2])
    with pytest.raises(ValueError, match="longer"):
        flatten_gradients(params[:2], grads)


class _Aliased(nn.Module):
    """One linear layer reachable as ``fc`` and as ``body.0``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.body = nn.Sequential(self.fc, nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.flatten(1))


def test_per_example_gradients_keep_the_networks_parameters_and_refuse_an_aliased_module() -> None:
    """After the call the network holds the same parameter objects (those the optimiser steps); a
    module registered under two names would come back with new ones, so it is refused."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    held = [id(p) for p in net.parameters()]
    x, y = torch.rand(6, 1, 2, 2), torch.tensor([0, 1, 2, 0, 1, 2])
    with torch.no_grad():
        per_example_gradients(net, F.cross_entropy, x, y)
    assert [id(p) for p in net.parameters()] == held
    with pytest.raises(ValueError, match="registered once"):
        per_example_gradients(_Aliased(), F.cross_entropy, x, y)
