"""What makes A-GEM what it is: the stream gradient projected, in closed form and on the device,
so that the loss on a memory minibatch does not increase to first order."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from xder_methods import Batch, OpCounter, TaskData, Transforms, create_method
from xder_methods.methods.agem import AGEM, AGEMConfig, project_agem
from xder_methods.parts.gradients import flatten_gradients


def build(stream, tiny_net, setting_of, transforms, seed=0, **config) -> AGEM:
    torch.manual_seed(seed)
    method = create_method(
        "agem",
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=AGEMConfig(**({"buffer_size": 10, "minibatch_size": 4} | config)),
        generator=torch.Generator().manual_seed(seed),
    )
    assert isinstance(method, AGEM)
    return method


def in_task(method: AGEM, stream, task: int) -> AGEM:
    """``method`` with the memories of tasks ``0 .. task - 1`` stored and ``task`` begun."""
    for t in range(task):
        rows = stream.task(t).train
        method.end_task(t, TaskData(stream.train_x[rows], stream.train_y[rows], t))
    method.begin_task(task)
    return method


# ------------------------------------------------------------------------------- pure functions


def test_projection_by_hand() -> None:
    # g = (1, -1), g_ref = (0, 2): <g, g_ref> = -2 < 0, <g_ref, g_ref> = 4,
    # g~ = g - (-2 / 4) g_ref = (1, -1) + (0, 1) = (1, 0); <g~, g_ref> = 0.
    torch.testing.assert_close(
        project_agem(torch.tensor([1.0, -1.0]), torch.tensor([0.0, 2.0])), torch.tensor([1.0, 0.0])
    )
    # g = (-3, 1), g_ref = (1, 1): <g, g_ref> = -2, <g_ref, g_ref> = 2, g~ = (-3, 1) + (1, 1) = (-2, 2).
    torch.testing.assert_close(
        project_agem(torch.tensor([-3.0, 1.0]), torch.tensor([1.0, 1.0])), torch.tensor([-2.0, 2.0])
    )
    # g = (3, -1), g_ref = (1, 1): <g, g_ref> = 2 >= 0: g is kept.
    torch.testing.assert_close(
        project_agem(torch.tensor([3.0, -1.0]), torch.tensor([1.0, 1.0])), torch.tensor([3.0, -1.0])
    )
    # g_ref = 0: <g, g_ref> = 0, g is kept (the 0/0 of the other branch is discarded, no NaN).
    torch.testing.assert_close(
        project_agem(torch.tensor([3.0, -1.0]), torch.zeros(2)), torch.tensor([3.0, -1.0])
    )


def test_projection_properties_on_random_gradients() -> None:
    generator = torch.Generator().manual_seed(0)
    projected_some = kept_some = False
    for _ in range(200):
        g, reference = torch.randn(2, 7, generator=generator, dtype=torch.float64)
        projected = project_agem(g, reference)
        dot = float(g @ reference)
        # Never against the reference: <g~, g_ref> >= 0 (0 up to rounding where it projected).
        assert float(projected @ reference) >= -1e-12 * float(g.norm() * reference.norm())
        if dot >= 0:
            assert torch.equal(projected, g)
            kept_some = True
        else:
            # The projection removes exactly the component along g_ref: g~ - g is parallel to g_ref.
            difference = projected - g
            torch.testing.assert_close(
                difference, (difference @ reference) / (reference @ reference) * reference
            )
            projected_some = True
    assert projected_some
    assert kept_some


# ------------------------------------------------------------------------------------ the method


def test_memory_is_filled_per_task_at_its_end(stream, transforms, tiny_net, setting_of) -> None:
    method = in_task(build(stream, tiny_net, setting_of, transforms), stream, 2)
    # buffer 10, 3 tasks: 3 examples of each finished task, with their labels and tasks.
    assert len(method.buffer) == 6
    stored = method.buffer.all()
    assert stored.task_labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert [int(y) // 2 for y in stored.labels] == [0, 0, 0, 1, 1, 1]  # two classes per task


def test_projected_step_does_not_increase_the_memory_loss(stream, tiny_net, setting_of) -> None:
    """In task 1 (memory: 3 examples of task 0; minibatch 4 draws them all, so g_ref is the
    gradient of the memory loss), a batch of task-0 images labelled as a task-1 class has a
    gradient that would increase the memory loss; the applied gradient does not, to first order."""
    plain = Transforms(train=lambda x, g=None: x.float() / 255, test=lambda x, g=None: x.float() / 255)
    method = in_task(build(stream, tiny_net, setting_of, plain), stream, 1)
    params = method.trained_parameters()
    memory = method.buffer.all()
    memory_loss = F.cross_entropy(method.net(memory.examples.float() / 255), memory.labels)
    memory_gradient = flatten_gradients(params, torch.autograd.grad(memory_loss, params))

    rows = stream.task(0).train[:8]
    x_raw = stream.train_x[rows]
    method.observe(Batch(x_raw.float() / 255, torch.full((8,), 2), x_raw, 1)).loss.backward()
    raw = flatten_gradients(params, [p.grad for p in params])
    assert float(raw @ memory_gradient) < 0  # the constructed step would increase the memory loss
    method.after_backward()
    applied = flatten_gradients(params, [p.grad for p in params])
    assert float(applied @ memory_gradient) >= -1e-5 * float(raw.norm() * memory_gradient.norm())
    torch.testing.assert_close(applied, project_agem(raw, memory_gradient))


@pytest.mark.parametrize("task", [0, 2])
def test_a_step_has_no_host_sync(task, stream, transforms, tiny_net, setting_of) -> None:
    """observe, backward and after_backward of one step, with and without a memory: the buffer
    draw, the reference gradient and the projection's branch all stay on the device."""
    method = in_task(build(stream, tiny_net, setting_of, transforms), stream, task)
    rows = stream.task(task).train[:6]
    x = stream.train_x[rows]
    batch = Batch(transforms.train(x, torch.Generator()), stream.train_y[rows], x, task)
    with OpCounter() as counter:
        method.observe(batch).loss.backward()
        method.after_backward()
    assert counter.host_syncs == 0, counter.syncs
    assert counter.ops["dot"] == (2 if task else 0)  # <g, g_ref> and <g_ref, g_ref>: it projected
