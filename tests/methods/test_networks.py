"""Frozen copies: a teacher as it is, and a copy fine-tuned before it is frozen."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from xder_methods.parts.networks import frozen_copy


def test_frozen_copy_is_an_eval_mode_copy_without_gradients(tiny_net) -> None:
    torch.manual_seed(0)
    net = tiny_net(3, batchnorm=True).train(True)
    copy = frozen_copy(net)
    assert copy is not net
    assert not copy.training
    assert all(not p.requires_grad for p in copy.parameters())
    assert all(p.requires_grad for p in net.parameters())
    assert net.training
    for (name, a), b in zip(copy.state_dict().items(), net.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
        assert a.data_ptr() != b.data_ptr(), name


def test_frozen_copy_fine_tunes_the_copy_in_train_mode_then_freezes_it(tiny_net) -> None:
    """One SGD step of lr 0.1 inside ``finetune``: the copy moves by exactly ``-0.1 * grad`` (the
    gradient of the network as it was, in train mode), the network does not."""
    torch.manual_seed(0)
    net = tiny_net(3, batchnorm=True)
    x, y = torch.rand(6, 1, 2, 2), torch.tensor([0, 1, 2, 0, 1, 2])
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    reference = tiny_net(3, batchnorm=True)
    reference.load_state_dict(net.state_dict())
    expected = torch.autograd.grad(F.cross_entropy(reference.train(True)(x), y), list(reference.parameters()))
    modes = []

    def finetune(model: torch.nn.Module) -> None:
        modes.append((model.training, all(p.requires_grad for p in model.parameters())))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    copy = frozen_copy(net.eval(), finetune=finetune)
    assert modes == [(True, True)]
    assert not copy.training
    assert all(not p.requires_grad for p in copy.parameters())
    assert not net.training
    for (name, p), g in zip(copy.named_parameters(), expected, strict=True):
        torch.testing.assert_close(p, before[name] - 0.1 * g)
        assert torch.equal(dict(net.named_parameters())[name].detach(), before[name])
