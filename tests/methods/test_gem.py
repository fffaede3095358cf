"""What makes GEM what it is: the stream gradient projected so that no past task's memory loss
increases to first order (the dual QP of the GEM paper, Eq. 10-11)."""

from __future__ import annotations

import ast
import inspect
import itertools

import pytest
import torch
import torch.nn.functional as F

import xder_methods.methods.gem as gem_module
from xder_methods import Batch, OpCounter, TaskData, Transforms, create_method
from xder_methods.methods.gem import GEM, GEMConfig, project_gem
from xder_methods.parts.gradients import flatten_gradients


def build(stream, tiny_net, setting_of, transforms, seed=0, **config) -> GEM:
    torch.manual_seed(seed)
    method = create_method(
        "gem",
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=GEMConfig(**({"buffer_size": 10} | config)),
        generator=torch.Generator().manual_seed(seed),
    )
    assert isinstance(method, GEM)
    return method


def task_data(stream, task: int) -> TaskData:
    rows = stream.task(task).train
    return TaskData(stream.train_x[rows], stream.train_y[rows], task)


def in_task(method: GEM, stream, task: int) -> GEM:
    """``method`` with the memories of tasks ``0 .. task - 1`` stored and ``task`` begun."""
    for t in range(task):
        method.end_task(t, task_data(stream, t))
    method.begin_task(task)
    return method


# ------------------------------------------------------------------------------- pure functions


def brute_force_projection(g: torch.Tensor, memory: torch.Tensor, margin: float) -> torch.Tensor:
    """The primal problem GEM's dual (with ``v >= margin``, no ridge) solves, in float64:
    ``argmin_z ||z - t||^2  s.t.  memory @ z >= 0``, ``t = g + margin * memory.T @ 1``.

    Active-set enumeration: the optimum is the projection of t onto ``{z : G_A z = 0}`` for its
    active set A, ``z = t - G_A^T (G_A G_A^T)^{-1} G_A t``; over all 2^K subsets, the feasible
    candidate closest to t is it."""
    target = g + margin * memory.sum(dim=0)
    best, best_distance = None, float("inf")
    k = memory.shape[0]
    for size in range(k + 1):
        for active in itertools.combinations(range(k), size):
            if active:
                rows = memory[list(active)]
                z = target - rows.T @ torch.linalg.solve(rows @ rows.T, rows @ target)
            else:
                z = target
            distance = float((z - target).norm())
            if bool((memory @ z >= -1e-9).all()) and distance < best_distance:
                best, best_distance = z, distance
    assert best is not None
    return best


@pytest.mark.parametrize("margin", [0.0, 0.5])
@pytest.mark.parametrize(("k", "dim"), [(2, 3), (3, 4), (3, 6), (4, 5)])
def test_projection_matches_a_brute_force_solution_of_the_primal(k, dim, margin) -> None:
    generator = torch.Generator().manual_seed(100 * k + dim)
    checked = 0
    for _ in range(20):
        memory = torch.randn(k, dim, generator=generator, dtype=torch.float64)
        g = torch.randn(dim, generator=generator, dtype=torch.float64)
        if bool((memory @ g >= 0).all()):
            continue  # no violation: GEM keeps g (tested below), whatever the margin
        projected = project_gem(g, memory, margin, eps=0.0)
        torch.testing.assert_close(projected, brute_force_projection(g, memory, margin), atol=1e-7, rtol=1e-7)
        assert bool((memory @ projected >= -1e-9).all())  # every constraint holds after projection
        checked += 1
    assert checked >= 10


def test_projection_by_hand() -> None:
    # g = (1, -1), one memory gradient g_0 = (0, 1): <g, g_0> = -1 < 0. Dual, one variable:
    # min 1/2 (|g_0|^2 + eps) v^2 + <g, g_0> v = 1/2 (1 + eps) v^2 - v  s.t. v >= margin,
    # so v = max(1 / (1 + eps), margin) and g~ = g + v g_0 = (1, -1 + v).
    g = torch.tensor([1.0, -1.0], dtype=torch.float64)
    memory = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    # margin 0, eps 0: v = 1, g~ = (1, 0): the projection onto <z, g_0> >= 0.
    torch.testing.assert_close(
        project_gem(g, memory, 0.0, eps=0.0), torch.tensor([1.0, 0.0], dtype=torch.float64)
    )
    # margin 2: v = 2, g~ = (1, 1): the margin pushes the update into the memory's descent cone.
    torch.testing.assert_close(
        project_gem(g, memory, 2.0, eps=0.0), torch.tensor([1.0, 1.0], dtype=torch.float64)
    )
    # the authors' ridge eps = 1e-3, margin 0.5: v = 1 / 1.001 > 0.5, g~ = (1, -0.001 / 1.001):
    # the constraint is softened to <g~, g_0> >= -eps v.
    expected = torch.tensor([1.0, -1.0 + 1.0 / 1.001], dtype=torch.float64)
    torch.testing.assert_close(project_gem(g, memory, 0.5), expected)


def test_projection_keeps_a_gradient_that_violates_no_constraint() -> None:
    # <g, g_0> = 1 * 1 + 1 * 0 = 1 >= 0 and <g, g_1> = 0: no projection, whatever the margin.
    g = torch.tensor([1.0, 1.0, 0.0])
    memory = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    assert project_gem(g, memory, 0.5) is g


def test_projection_keeps_dtype_and_device() -> None:
    g = torch.tensor([1.0, -1.0])
    projected = project_gem(g, torch.tensor([[0.0, 1.0]]), 0.0, eps=0.0)
    assert projected.dtype == torch.float32
    torch.testing.assert_close(projected, torch.tensor([1.0, 0.0]))


def test_quadprog_is_imported_lazily() -> None:
    """A machine without quadprog must still import xder_methods: no module-level import of it."""
    tree = ast.parse(inspect.getsource(gem_module))
    top_level = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = {alias.name for node in top_level for alias in node.names}
    names |= {node.module for node in top_level if isinstance(node, ast.ImportFrom) and node.module}
    assert "quadprog" not in names
    assert "numpy" not in names


# ------------------------------------------------------------------------------------ the method


def test_memory_holds_buffer_size_over_n_tasks_examples_of_each_task(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = build(stream, tiny_net, setting_of, transforms, buffer_size=10)
    for t in range(3):
        method.end_task(t, task_data(stream, t))
    # 10 // 3 = 3 examples per task, in contiguous rows, labelled with their task.
    assert method.memory.blocks == [(0, 3), (3, 6), (6, 9)]
    assert len(method.buffer) == 9
    stored = method.buffer.all()
    assert stored.task_labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for i, (x, y, t) in enumerate(zip(stored.examples, stored.labels, stored.task_labels, strict=True)):
        data = task_data(stream, int(t))
        matches = [j for j in range(data.y.shape[0]) if torch.equal(data.x_raw[j], x) and data.y[j] == y]
        assert matches, f"row {i} is not an example of task {int(t)} as stored"
    assert stored.examples.dtype == torch.uint8


def memory_loss(method: GEM, stream, task: int) -> torch.Tensor:
    """The memory loss of ``task`` recomputed independently (test transform: no randomness)."""
    start, end = method.memory.blocks[task]
    x = method.buffer.examples[start:end].float() / 255
    return F.cross_entropy(method.net(x), method.buffer.labels[start:end])


def test_projected_step_does_not_increase_any_memory_loss(stream, tiny_net, setting_of) -> None:
    """In task 2, a stream batch of task-0 images labelled as a task-2 class has a gradient that
    would increase task 0's memory loss; after the projection, no memory loss increases to first
    order (up to the authors' ridge), and a small step along it increases them by a tiny
    fraction of what the raw step does."""
    plain = Transforms(train=lambda x, g=None: x.float() / 255, test=lambda x, g=None: x.float() / 255)
    method = in_task(build(stream, tiny_net, setting_of, plain, gamma=0.0), stream, 2)
    rows = stream.task(0).train[:8]
    x_raw = stream.train_x[rows]
    batch = Batch(x_raw.float() / 255, torch.full((8,), 4), x_raw, 2)
    params = method.trained_parameters()
    memory = torch.stack(
        [
            flatten_gradients(params, torch.autograd.grad(memory_loss(method, stream, t), params))
            for t in (0, 1)
        ]
    )

    loss = method.observe(batch).loss
    loss.backward()
    raw = flatten_gradients(params, [p.grad for p in params])
    assert float((memory @ raw).min()) < 0  # the constructed step would increase a memory loss
    method.after_backward()
    applied = flatten_gradients(params, [p.grad for p in params])
    dots = memory @ applied
    # The ridge eps = 1e-3 softens each constraint to >= -eps * v_k (v_k <~ 1 here).
    assert float(dots.min()) >= -1e-3 * float(raw.norm() * memory.norm(dim=1).max()), dots
    assert not torch.allclose(applied, raw)

    def increases_after_step(direction: torch.Tensor) -> torch.Tensor:
        """Memory losses after a step of 1e-2 along ``direction``, minus before."""
        start = [p.detach().clone() for p in params]
        with torch.no_grad():
            before = torch.stack([memory_loss(method, stream, t) for t in (0, 1)])
            offset = 0
            for p in params:
                p -= 1e-2 * direction[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
            after = torch.stack([memory_loss(method, stream, t) for t in (0, 1)])
            for p, value in zip(params, start, strict=True):
                p.copy_(value)
        return after - before

    raw_increase, projected_increase = increases_after_step(raw), increases_after_step(applied)
    assert float(raw_increase.max()) > 1e-3, raw_increase
    assert float(projected_increase.max()) <= 0.02 * float(raw_increase.max()), (
        raw_increase,
        projected_increase,
    )


def test_one_step_reads_back_once_from_task_one_on(
    monkeypatch, stream, transforms, tiny_net, setting_of
) -> None:
    """Host synchronisations of one step (observe, backward, after_backward): none in task 0;
    from task 1 on, exactly one, unavoidable: the read-back of G G^T and G g for the CPU QP
    (``_to_host``; on a CPU that copy is no synchronisation, so its calls are counted and
    OpCounter must find nothing else; on a GPU OpCounter counts it: one ``_to_copy``)."""
    reads = []
    to_host = gem_module._to_host
    monkeypatch.setattr(gem_module, "_to_host", lambda values: reads.append(values.shape) or to_host(values))

    def step(method: GEM, task: int) -> int:
        rows = stream.task(task).train[:6]
        x = stream.train_x[rows]
        batch = Batch(transforms.train(x, torch.Generator()), stream.train_y[rows], x, task)
        with OpCounter() as counter:
            method.observe(batch).loss.backward()
            method.after_backward()
        return counter.host_syncs

    method = build(stream, tiny_net, setting_of, transforms)
    method.begin_task(0)
    assert step(method, 0) == 0
    assert reads == []
    in_task(method, stream, 2)
    assert step(method, 2) == 0
    assert reads == [torch.Size([2 * 2 + 2])]  # K = 2 past tasks: the 2 x 2 Gram matrix and 2 dots


def test_the_step_projects_with_the_configured_margin(stream, tiny_net, setting_of) -> None:
    """Guards ``after_backward`` passing ``config.gamma`` (the memory strength) to the projection:
    with gamma 0.5, a violating task-2 step's applied gradient is ``project_gem(g, G, 0.5)`` of the
    raw gradient and the memory gradients recomputed here, not the margin-0 projection. The
    batch (task-0 images labelled 2, a task-1 class) violates task 0's constraint only; margin 0
    gives v = (0.43, 0), margin 0.5 raises both to 0.5."""
    plain = Transforms(train=lambda x, g=None: x.float() / 255, test=lambda x, g=None: x.float() / 255)
    method = in_task(build(stream, tiny_net, setting_of, plain, gamma=0.5), stream, 2)
    rows = stream.task(0).train[:8]
    x_raw = stream.train_x[rows]
    batch = Batch(x_raw.float() / 255, torch.full((8,), 2), x_raw, 2)
    params = method.trained_parameters()
    memory = torch.stack(
        [
            flatten_gradients(params, torch.autograd.grad(memory_loss(method, stream, t), params))
            for t in (0, 1)
        ]
    )

    method.observe(batch).loss.backward()
    raw = flatten_gradients(params, [p.grad for p in params]).clone()
    dots = memory @ raw
    assert float(dots[0]) < 0 < float(dots[1])  # a violation: the projection is taken
    method.after_backward()
    applied = flatten_gradients(params, [p.grad for p in params])
    torch.testing.assert_close(applied, project_gem(raw, memory, 0.5))
    margin_0 = project_gem(raw, memory, 0.0)
    assert float((applied - margin_0).norm()) > 0.1 * float(margin_0.norm()), (applied, margin_0)
