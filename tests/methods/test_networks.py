"""Frozen copies: a teacher as it is, and a copy fine-tuned before it is frozen; features in eval
mode."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from xder_methods.parts.networks import eval_features, frozen_copy


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


# ------------------------------------------------------------------------------ eval_features


def to_float(x: torch.Tensor) -> torch.Tensor:
    return x.float() / 255


def test_eval_features_in_chunks_in_eval_mode_and_the_mode_restored(batchnorm_net) -> None:
    """Five rows in chunks of 2 (2 + 2 + 1 forward passes), each row's features those of the
    network in eval mode (BatchNorm on its running statistics), computed here one row at a time;
    the network is back in train mode and its running statistics untouched."""
    net, batchnorm, statistics, reference = batchnorm_net
    x_raw = torch.randint(0, 256, (5, 1, 2, 2), dtype=torch.uint8)
    sizes: list[int] = []
    net.body.register_forward_pre_hook(lambda _, args: sizes.append(args[0].shape[0]))
    features = eval_features(net, x_raw, to_float, 2)
    assert sizes == [2, 2, 1]
    with torch.no_grad():
        expected = torch.cat([reference.forward_features(to_float(x_raw[i : i + 1])) for i in range(5)])
    torch.testing.assert_close(features, expected)
    assert net.training
    assert all(torch.equal(a, b) for a, b in zip(batchnorm.buffers(), statistics, strict=True))
    eval_features(net.eval(), x_raw, to_float, 2)
    assert not net.training  # a network in eval mode stays so


def test_eval_features_of_no_rows_is_empty_with_the_network_s_width(tiny_net) -> None:
    """(0, D) with D = ``net.num_features`` (16 for the tiny net), (0, 0) for a network without
    that attribute; the network is not called."""
    empty = torch.zeros(0, 1, 2, 2, dtype=torch.uint8)
    features = eval_features(tiny_net(3), empty, to_float, 4)
    assert (features.shape, features.dtype) == ((0, 16), torch.float32)
    assert eval_features(torch.nn.Flatten(), empty, to_float, 4).shape == (0, 0)
