"""What makes ER-ACE and DER++-ACE what they are: the asymmetric (masked) stream cross-entropy."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from xder_methods import Batch, TrainingSchedule, create_method, fit, method_config_class
from xder_methods.methods.derpp_ace import DERppACEConfig
from xder_methods.methods.er_ace import ERACE
from xder_methods.parts.losses import asymmetric_mask, masked_cross_entropy


def build(name, stream, transforms, tiny_net, setting_of, seed=0, **config):
    torch.manual_seed(seed)
    return create_method(
        name,
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=method_config_class(name)(**config),
        generator=torch.Generator().manual_seed(seed),
    )


def batch_of(stream, transforms, task, labels, per_class=3) -> Batch:
    rows = torch.cat([torch.nonzero(stream.train_y == c).flatten()[:per_class] for c in labels])
    x_raw = stream.train_x[rows]
    return Batch(transforms.train(x_raw, torch.Generator()), stream.train_y[rows], x_raw, task)


def nonzero_rows(grad) -> list[int]:
    return [i for i in range(grad.shape[0]) if torch.count_nonzero(grad[i]) > 0]


# ------------------------------------------------------------------------------- pure functions


def test_asymmetric_mask_by_hand() -> None:
    labels = torch.tensor([2, 3, 2])
    assert asymmetric_mask(labels, 6, task=1, num_seen=5).tolist() == [False, False, True, True, False, False]
    # Task 0: the classes seen so far, whatever the batch holds.
    assert asymmetric_mask(torch.tensor([0, 0]), 6, task=0, num_seen=2).tolist() == [True, True] + [False] * 4
    assert labels.tolist() == [2, 3, 2]


def test_masked_cross_entropy_by_hand() -> None:
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0], [0.0, 3.0, 1.0, 2.0]])
    labels = torch.tensor([2, 1])
    mask = torch.tensor([False, True, True, False])
    # Row 0: softmax over {2.0, 0.5}, target 0.5; row 1: over {3.0, 1.0}, target 3.0.
    row0 = -(0.5 - math.log(math.exp(2.0) + math.exp(0.5)))
    row1 = -(3.0 - math.log(math.exp(3.0) + math.exp(1.0)))
    expected = torch.tensor((row0 + row1) / 2)
    torch.testing.assert_close(masked_cross_entropy(logits, labels, mask), expected)
    assert logits[0, 0] == 1.0  # inputs untouched


# ------------------------------------------------------------------------------------- ER-ACE


def test_stream_term_sends_no_gradient_to_masked_logits(
    make_stream, transforms, tiny_net, setting_of
) -> None:
    # Task 1 owns classes 2, 3, 4; the batch holds only 2 and 3: past (0, 1), absent (4) and
    # future (5) logits are all masked.
    stream = make_stream(classes_per_task=(2, 3, 1))
    method = build("er_ace", stream, transforms, tiny_net, setting_of, buffer_size=20, minibatch_size=4)
    method.begin_task(0)
    method.observe(batch_of(stream, transforms, 0, [0, 1]))
    method.begin_task(1)
    out = method.observe(batch_of(stream, transforms, 1, [2, 3]))
    assert set(out.groups) == {"stream", "buffer"}
    out.groups["stream"].backward(retain_graph=True)
    weight = method.net.classifier.weight
    assert nonzero_rows(weight.grad) == [2, 3]
    assert nonzero_rows(method.net.classifier.bias.grad[:, None]) == [2, 3]
    # The replay term (task-0 items) spans every seen class, tasks 0 and 1, and nothing later.
    weight.grad = None
    out.groups["buffer"].backward()
    assert nonzero_rows(weight.grad) == [0, 1, 2, 3, 4]


def test_task_zero_masks_to_the_seen_classes(stream, transforms, tiny_net, setting_of) -> None:
    method = build("er_ace", stream, transforms, tiny_net, setting_of, buffer_size=20, minibatch_size=4)
    method.begin_task(0)
    out = method.observe(batch_of(stream, transforms, 0, [0]))  # one class only
    assert set(out.terms) == {"ce"}  # empty buffer: no replay at the first step
    out.loss.backward()
    # Class 1 is seen (task 0) though absent from the batch: it takes part; tasks 1-2 do not.
    assert nonzero_rows(method.net.classifier.weight.grad) == [0, 1]


def test_replay_term_is_cross_entropy_over_all_seen_classes(
    make_stream, transforms, tiny_net, setting_of
) -> None:
    stream = make_stream(classes_per_task=(2, 3, 1))
    method = build("er_ace", stream, transforms, tiny_net, setting_of, buffer_size=20, minibatch_size=5)
    assert isinstance(method, ERACE)
    method.begin_task(0)
    method.observe(batch_of(stream, transforms, 0, [0, 1]))  # 6 items in rows 0..5
    method.begin_task(1)
    batch = batch_of(stream, transforms, 1, [2, 3])
    generator = method.generator
    state = generator.get_state()
    out = method.observe(batch)
    generator.set_state(state)
    rows = torch.randperm(6, generator=generator)[:5]
    logits = method.net(transforms.train(method.buffer.examples[rows], generator)).double()
    labels = method.buffer.labels[rows]
    seen = logits[:, :5]  # classes of tasks 0 and 1
    expected = (seen.logsumexp(dim=1) - seen.gather(1, labels[:, None]).squeeze(1)).mean()
    torch.testing.assert_close(out.terms["buffer_ce"].double(), expected.detach(), rtol=1e-5, atol=1e-6)
    stream_logits = method.net(batch.x).double()
    present = stream_logits[:, 2:4]
    expected_ce = (present.logsumexp(dim=1) - present.gather(1, (batch.y - 2)[:, None]).squeeze(1)).mean()
    torch.testing.assert_close(out.terms["ce"].double(), expected_ce.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.loss, out.terms["ce"] + out.terms["buffer_ce"])
    assert len(method.buffer) == 12  # the stream batch entered the reservoir afterwards


# ----------------------------------------------------------------------------------- DER++-ACE


def test_derpp_ace_is_derpp_terms_plus_masked_stream_ce(stream, transforms, tiny_net, setting_of) -> None:
    config = {"buffer_size": 20, "minibatch_size": 4, "alpha": 0.3, "beta": 0.7}
    derpp = build("derpp", stream, transforms, tiny_net, setting_of, **config)
    ace = build("derpp_ace", stream, transforms, tiny_net, setting_of, **config)
    assert isinstance(ace.config, DERppACEConfig)
    first = batch_of(stream, transforms, 0, [0, 1])
    second = batch_of(stream, transforms, 1, [2])  # one class present: only logit 2 kept
    for method in (derpp, ace):
        method.begin_task(0)
        method.observe(first)
        method.begin_task(1)
    torch.testing.assert_close(ace.buffer.logits, derpp.buffer.logits)  # raw logits stored alike
    plain, masked = derpp.observe(second), ace.observe(second)
    torch.testing.assert_close(masked.terms["der"], plain.terms["der"])
    torch.testing.assert_close(masked.terms["buffer_ce"], plain.terms["buffer_ce"])
    logits = ace.net(second.x)
    # A single present class: the masked softmax is certain, the stream term is exactly 0.
    assert float(masked.terms["ce"]) == 0.0
    assert float(plain.terms["ce"]) == pytest.approx(float(F.cross_entropy(logits, second.y).detach()))
    torch.testing.assert_close(masked.loss, masked.terms["der"] + masked.terms["buffer_ce"])
    masked.groups["stream"].backward()
    assert ace.net.classifier.weight.grad is None or torch.count_nonzero(ace.net.classifier.weight.grad) == 0


def test_derpp_ace_defaults_are_derpp_values() -> None:
    config = method_config_class("derpp_ace")()
    assert (config.alpha, config.beta) == (0.1, 0.5)
    assert (config.buffer_size, config.minibatch_size) == (500, 32)


# --------------------------------------------------------------------------------------- resume


@pytest.mark.parametrize("name", ["er_ace", "derpp_ace"])
@pytest.mark.parametrize("stop_after", [2, 3])  # at a task's last epoch, and mid-task
def test_resume_equals_uninterrupted(
    name, stop_after, stream, transforms, tiny_net, setting_of, snapshot_after
) -> None:
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9)
    config = {"buffer_size": 10, "minibatch_size": 4}
    method = build(name, stream, transforms, tiny_net, setting_of, **config)
    full = fit(method, stream, schedule, generator=method.generator)
    method = build(name, stream, transforms, tiny_net, setting_of, **config)
    snapshot = snapshot_after(method, stream, schedule, method.generator, stop_after)
    torch.manual_seed(123)
    method = build(name, stream, transforms, tiny_net, setting_of, seed=99, **config)
    resumed = fit(method, stream, schedule, generator=method.generator, resume=snapshot)
    assert resumed.class_il == full.class_il
    assert resumed.task_il == full.task_il
