"""``method.replay_forward``: the stream and buffer batches of DER, DER++, DER++-ACE and X-DER go
through the network one pass each (``separate``, the authors' code), as one concatenated pass
(``joint``), or as one pass in which BatchNorm keeps each batch apart (``grouped``). Without
BatchNorm the three are the same computation; with it, ``joint``'s batch statistics differ and
``grouped``'s do not."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from xder_methods import (
    Batch,
    MethodConfigError,
    OpCounter,
    batchnorm_per_part,
    forward_parts,
    method_config_class,
)

METHODS = ["der", "derpp", "derpp_ace", "xder"]
# Buffer batches a step draws, hence forward passes of a separate step beyond the stream's.
REPLAY_BATCHES = {"der": 1, "derpp": 2, "derpp_ace": 2, "xder": 2}


def parts() -> list[Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(n, 3, generator=generator) for n in (2, 3, 4)]


def test_forward_parts_calls_once_per_part_or_once_in_all() -> None:
    weight = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    sizes: list[int] = []

    def linear(x: Tensor) -> Tensor:
        sizes.append(x.shape[0])
        return x @ weight

    separate = forward_parts(linear, parts(), "separate")
    assert sizes == [2, 3, 4]
    joint = forward_parts(linear, parts(), "joint")
    assert sizes[3:] == [9]
    for a, b, x in zip(separate, joint, parts(), strict=True):
        torch.testing.assert_close(a, x @ weight)
        torch.testing.assert_close(b, x @ weight)
    assert len(forward_parts(linear, parts()[:1], "joint")) == 1


def test_joint_batchnorm_uses_the_statistics_of_the_mixed_batch() -> None:
    norm = nn.BatchNorm1d(3, affine=False).train()

    def by_hand(x: Tensor) -> Tensor:  # training-mode BatchNorm: biased variance, eps 1e-5
        return (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5)

    joint = torch.cat(forward_parts(norm, parts(), "joint"))
    torch.testing.assert_close(joint, by_hand(torch.cat(parts())))
    separate = forward_parts(norm, parts(), "separate")
    for out, x in zip(separate, parts(), strict=True):
        torch.testing.assert_close(out, by_hand(x))
    assert not torch.allclose(torch.cat(separate), joint)


def make(name, mode, stream, transforms, in_second_task, batchnorm):
    extra = {"simclr_batch_size": 4} if name == "xder" else {}
    config = method_config_class(name)(buffer_size=20, minibatch_size=4, replay_forward=mode, **extra)
    return in_second_task(name, stream, transforms, config, batchnorm=batchnorm)


def task1_batch(stream, transforms) -> Batch:
    rows = stream.task(1).train[:6]
    x = stream.train_x[rows]
    return Batch(transforms.train(x, torch.Generator()), stream.train_y[rows], x, 1)


def forward_sizes_of(module: nn.Module) -> list[int]:
    """The batch size of each call of ``module`` from now on (filled as the calls come)."""
    sizes: list[int] = []
    module.register_forward_hook(lambda module, args, out: sizes.append(args[0].shape[0]))
    return sizes


def forward_sizes(method) -> list[int]:
    return forward_sizes_of(method.net)


@pytest.mark.parametrize("name", METHODS)
def test_without_batchnorm_joint_and_separate_steps_are_the_same(
    name, stream, transforms, in_second_task
) -> None:
    outputs, calls = {}, {}
    for mode in ("separate", "joint", "grouped"):
        method = make(name, mode, stream, transforms, in_second_task, batchnorm=False)
        sizes = forward_sizes(method)
        out = method.observe(task1_batch(stream, transforms))
        out.loss.backward()
        grads = torch.cat([p.grad.flatten() for p in method.net.parameters()])
        outputs[mode] = (out.loss.detach(), out.terms, grads, method.buffer.logits.clone())
        calls[mode] = sizes
    loss_s, terms_s, grads_s, stored_s = outputs["separate"]
    for mode in ("joint", "grouped"):
        loss_j, terms_j, grads_j, stored_j = outputs[mode]
        torch.testing.assert_close(loss_j, loss_s)
        assert terms_j.keys() == terms_s.keys()
        for key in terms_s:
            torch.testing.assert_close(terms_j[key], terms_s[key])
        torch.testing.assert_close(grads_j, grads_s)
        torch.testing.assert_close(stored_j, stored_s)  # the buffer's updates too
    # X-DER's future-preparation views (8 items, 2 views each) are one more pass of their own,
    # but for grouped, whose one pass holds every batch.
    extra = [8 * 2] if name == "xder" else []
    assert calls["separate"] == [6] + [4] * REPLAY_BATCHES[name] + extra
    assert calls["joint"] == [6 + 4 * REPLAY_BATCHES[name], *extra]
    assert calls["grouped"] == [6 + 4 * REPLAY_BATCHES[name] + sum(extra)]


@pytest.mark.parametrize("name", METHODS)
def test_with_batchnorm_grouped_computes_what_separate_does(name, stream, transforms, in_second_task) -> None:
    """One pass, BatchNorm per batch: the loss, the terms, the stored logits and the running
    statistics of the separate passes, to the bit (a linear layer's rows do not depend on the
    batch around them on a CPU); the gradients up to the order of their sums."""
    results = {}
    for mode in ("separate", "grouped"):
        method = make(name, mode, stream, transforms, in_second_task, batchnorm=True)
        sizes, step_batch = forward_sizes(method), task1_batch(stream, transforms)
        with OpCounter() as counter:
            out = method.observe(step_batch)
            out.loss.backward()
        assert counter.host_syncs == 0, (mode, counter.syncs)
        grads = torch.cat([p.grad.flatten() for p in method.net.parameters()])
        norm = next(m for m in method.net.modules() if isinstance(m, nn.BatchNorm1d))
        results[mode] = (out, grads, method.buffer.logits.clone(), [b.clone() for b in norm.buffers()])
        assert len(sizes) == (1 if mode == "grouped" else 1 + REPLAY_BATCHES[name] + (name == "xder"))
    (out_s, grads_s, stored_s, stats_s), (out_g, grads_g, stored_g, stats_g) = results.values()
    assert torch.equal(out_g.loss, out_s.loss)
    assert out_g.terms.keys() == out_s.terms.keys()
    assert all(torch.equal(out_g.terms[key], out_s.terms[key]) for key in out_s.terms)
    assert torch.equal(stored_g, stored_s)
    assert all(torch.equal(a, b) for a, b in zip(stats_g, stats_s, strict=True))
    torch.testing.assert_close(grads_g, grads_s, rtol=1e-5, atol=1e-6)


def test_batchnorm_per_part_by_hand() -> None:
    """Two parts and a frozen third: each normalised by its own statistics; the running mean
    and (unbiased) variance updated by the first part, then the second, as two passes would
    (momentum 0.1: r <- 0.9 r + 0.1 m), never by the third; the layer's own forward restored."""
    norm = nn.BatchNorm1d(3, affine=False).train()
    first, second, third = parts()

    def by_hand(x: Tensor) -> Tensor:  # training-mode BatchNorm: biased variance, eps 1e-5
        return (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5)

    with batchnorm_per_part(norm, [2, 3, 4], [False, False, True]):
        out = norm(torch.cat([first, second, third]))
    torch.testing.assert_close(out, torch.cat([by_hand(first), by_hand(second), by_hand(third)]))
    mean = 0.9 * (0.9 * torch.zeros(3) + 0.1 * first.mean(0)) + 0.1 * second.mean(0)
    var = 0.9 * (0.9 * torch.ones(3) + 0.1 * first.var(0)) + 0.1 * second.var(0)
    torch.testing.assert_close(norm.running_mean, mean)
    torch.testing.assert_close(norm.running_var, var)
    assert int(norm.num_batches_tracked) == 2
    assert "forward" not in vars(norm)
    assert norm.track_running_stats
    norm.eval()  # eval mode: the running statistics, over the whole
    with batchnorm_per_part(norm, [2, 3, 4], [False, False, True]):
        evaluated = norm(torch.cat(parts()))
    torch.testing.assert_close(evaluated, (torch.cat(parts()) - mean) / torch.sqrt(var + 1e-5))


def test_forward_parts_freezes_the_marked_parts_in_every_mode() -> None:
    """The marked part leaves the running statistics alone; separate and joint forward it in a
    pass of its own, grouped in the one pass; a mark without a module to freeze is refused."""
    for mode, calls in (("separate", [2, 3, 4]), ("joint", [5, 4]), ("grouped", [9])):
        norm = nn.BatchNorm1d(3, affine=False).train()
        sizes = forward_sizes_of(norm)
        outputs = forward_parts(norm, parts(), mode, frozen=[False, False, True])
        assert sizes == calls, mode
        assert [o.shape[0] for o in outputs] == [2, 3, 4]
        assert int(norm.num_batches_tracked) == (1 if mode == "joint" else 2)
        assert norm.track_running_stats
    with pytest.raises(ValueError, match="network"):
        forward_parts(lambda x: x, parts(), "separate", frozen=[True])


def test_grouped_needs_a_network_only_to_split_several_parts() -> None:
    """A forward that is not a module gets no network to split: refused for two parts or more;
    one part goes through as it is, in every mode."""
    for several in (parts(), parts()[:2]):
        with pytest.raises(ValueError, match="network"):
            forward_parts(lambda x: x * 2, several, "grouped")
    part = parts()[0]
    for mode in ("separate", "joint", "grouped"):
        (out,) = forward_parts(lambda x: x * 2, [part], mode)
        assert torch.equal(out, part * 2)


@pytest.mark.parametrize("name", METHODS)
def test_with_batchnorm_joint_updates_running_statistics_once_per_step(
    name, stream, transforms, in_second_task
) -> None:
    losses = {}
    for mode, updates in (("separate", 1 + REPLAY_BATCHES[name]), ("joint", 1)):
        method = make(name, mode, stream, transforms, in_second_task, batchnorm=True)
        norm = next(m for m in method.net.modules() if isinstance(m, nn.BatchNorm1d))
        before, step_batch = int(norm.num_batches_tracked), task1_batch(stream, transforms)
        with OpCounter() as counter:
            out = method.observe(step_batch)
            out.loss.backward()
        assert counter.host_syncs == 0, counter.syncs
        assert int(norm.num_batches_tracked) - before == updates
        losses[mode] = out.loss.detach()
    assert not torch.allclose(losses["joint"], losses["separate"])


@pytest.mark.parametrize("name", METHODS)
def test_replay_forward_is_validated(name) -> None:
    config_class = method_config_class(name)
    assert config_class().replay_forward == "separate"
    with pytest.raises(MethodConfigError, match="separate, joint or grouped"):
        config_class(replay_forward="both")


def test_forward_parts_joint_with_one_part_forwards_the_part_itself() -> None:
    """Nothing to concatenate: the part goes through as it is, not a copy of it."""
    seen: list[Tensor] = []

    def forward(x: Tensor) -> Tensor:
        seen.append(x)
        return x * 2

    part = parts()[0]
    out = forward_parts(forward, [part], "joint")
    assert len(seen) == 1
    assert seen[0] is part
    assert len(out) == 1
    assert torch.equal(out[0], part * 2)
