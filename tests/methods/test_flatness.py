"""LFR and LLR against closed forms on a linear model, and ``er_flat``'s stable regime on task 0."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods import Batch, MethodConfigError, TrainingSchedule, create_method, fit
from xder_methods.methods.flatness import ERFlat, ERFlatConfig, local_flatness, local_linearity

EPS = 0.1


class Linear(nn.Module):
    """f(x) = w^T x + b, float64."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([0.5, -1.0, 2.0, -0.25], dtype=torch.float64))
        self.b = nn.Parameter(torch.tensor(0.3, dtype=torch.float64))

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(1) @ self.w + self.b


def problem() -> tuple[Linear, Tensor, Tensor]:
    model = Linear()
    x = torch.tensor(
        [[1.0, 2.0, 0.0, -1.0], [0.5, 0.5, 0.5, 0.5], [-2.0, 1.0, 1.0, 0.0]], dtype=torch.float64
    )
    y = torch.tensor([3.0, -2.0, 1.5], dtype=torch.float64)
    return model, x, y


def quadratic(model: Linear, y: Tensor):
    """Per-example 0.5 (w^T x + b - y)^2: its input gradient is r w, r the residual."""
    return lambda inputs: 0.5 * (model(inputs) - y).pow(2)


def residuals(model: Linear, x: Tensor, y: Tensor) -> Tensor:
    return x @ model.w + model.b - y


# ------------------------------------------------------------------------------------------ LFR


@pytest.mark.parametrize("random_start", [False, True])
def test_lfr_matches_the_closed_form_and_its_gradient(random_start) -> None:
    model, x, y = problem()
    r = residuals(model, x, y)
    assert bool((r.abs() > EPS * model.w.abs().sum()).all())  # the ascent cannot flip a residual
    generator = torch.Generator().manual_seed(0) if random_start else None
    value = local_flatness(quadratic(model, y), x, epsilon=EPS, steps=3, step_size=EPS, generator=generator)
    # ||grad_x l(x + d)||_1 = |r + w^T d| ||w||_1 is largest at d = eps sign(r) sign(w).
    l1 = model.w.abs().sum()
    closed = ((r.abs() + EPS * l1) * l1).mean()
    torch.testing.assert_close(value, closed)
    grads = torch.autograd.grad(value, [model.w, model.b])
    expected = torch.autograd.grad(closed, [model.w, model.b])
    for mine, theirs in zip(grads, expected, strict=True):
        torch.testing.assert_close(mine, theirs)


def test_lfr_of_a_linear_loss_is_the_constant_gradient_norm() -> None:
    model, x, _ = problem()
    value = local_flatness(model, x, epsilon=EPS, steps=2, step_size=EPS, generator=torch.Generator())
    torch.testing.assert_close(value, model.w.abs().sum())
    (grad,) = torch.autograd.grad(value, model.w)
    torch.testing.assert_close(grad, model.w.sign())


def test_lfr_leaves_its_input_alone() -> None:
    model, x, y = problem()
    before = x.clone()
    local_flatness(quadratic(model, y), x, epsilon=EPS, steps=2, step_size=EPS, generator=torch.Generator())
    assert torch.equal(x, before)
    assert model.w.grad is None  # nothing accumulated into the parameters


# ------------------------------------------------------------------------------------------ LLR


def test_llr_matches_the_closed_form_and_its_gradient() -> None:
    model, x, y = problem()
    gamma, alignment = local_linearity(
        quadratic(model, y),
        x,
        epsilon=EPS,
        steps=3,
        step_size=EPS,
        generator=torch.Generator().manual_seed(1),
    )
    # l(x + d) - l(x) - d^T grad l(x) = (w^T d)^2 / 2, largest at d = +-eps sign(w);
    # there |d^T grad l(x)| = |r| |w^T d| = |r| eps ||w||_1.
    l1 = model.w.abs().sum()
    closed_gamma = 0.5 * (EPS * l1) ** 2
    closed_alignment = (residuals(model, x, y).abs() * EPS * l1).mean()
    torch.testing.assert_close(gamma, closed_gamma)
    torch.testing.assert_close(alignment, closed_alignment)
    for mine, closed in [(gamma, closed_gamma), (alignment, closed_alignment)]:
        grads = torch.autograd.grad(mine, [model.w, model.b], retain_graph=True, allow_unused=True)
        expected = torch.autograd.grad(closed, [model.w, model.b], retain_graph=True, allow_unused=True)
        for g, e in zip(grads, expected, strict=True):
            torch.testing.assert_close(
                torch.zeros(()) if g is None else g, torch.zeros(()) if e is None else e, check_dtype=False
            )


def test_llr_taylor_error_is_zero_for_a_linear_loss() -> None:
    model, x, _ = problem()
    generator = torch.Generator().manual_seed(2)
    start = generator.get_state()
    gamma, alignment = local_linearity(model, x, epsilon=EPS, steps=3, step_size=EPS, generator=generator)
    assert abs(float(gamma.detach())) < 1e-12
    # Nothing to climb: the point stays at its random start d0 and the alignment is |d0^T w|.
    generator.set_state(start)
    d0 = (2 * torch.rand(x.shape, generator=generator, dtype=torch.float64) - 1) * EPS
    torch.testing.assert_close(alignment, (d0 @ model.w.detach()).abs().mean())
    zero_gamma, zero_alignment = local_linearity(model, x, epsilon=EPS, steps=3, step_size=EPS)
    assert float(zero_alignment.detach()) == 0.0  # no generator: the search starts (and stays) at d = 0
    assert abs(float(zero_gamma.detach())) < 1e-12


# -------------------------------------------------------------------- gradients through a net


@pytest.mark.parametrize("which", ["lfr", "llr"])
def test_regularisers_send_gradient_to_every_layer_of_a_network(which, tiny_net) -> None:
    torch.manual_seed(0)
    net = tiny_net(4)
    x = torch.randn(6, 1, 2, 2)
    y = torch.tensor([0, 1, 2, 3, 0, 1])

    def loss_fn(inputs):
        return F.cross_entropy(net(inputs), y, reduction="none")

    kwargs = {"epsilon": 0.05, "steps": 2, "step_size": 0.05, "generator": torch.Generator().manual_seed(0)}
    if which == "lfr":
        value = local_flatness(loss_fn, x, **kwargs)
    else:
        gamma, alignment = local_linearity(loss_fn, x, **kwargs)
        value = gamma + alignment
    assert float(value.detach()) > 0
    value.backward()
    for name, p in net.named_parameters():
        assert p.grad is not None, name
        assert torch.count_nonzero(p.grad) > 0, name


# --------------------------------------------------------------------------------- er_flat


def make(stream, transforms, tiny_net, setting_of, batchnorm=False, **config) -> ERFlat:
    torch.manual_seed(0)
    base = {"buffer_size": 20, "minibatch_size": 4, "steps": 2}
    return create_method(
        "er_flat",
        net=tiny_net(sum(stream.classes_per_task), batchnorm=batchnorm),
        setting=setting_of(stream),
        transforms=transforms,
        config=ERFlatConfig(**(base | config)),
        generator=torch.Generator().manual_seed(0),
    )


def batch(stream, transforms, t, n=6) -> Batch:
    rows = stream.task(t).train[:n]
    x_raw = stream.train_x[rows]
    return Batch(transforms.train(x_raw, torch.Generator()), stream.train_y[rows], x_raw, t)


@pytest.mark.parametrize("regulariser", ["lfr", "llr"])
def test_er_flat_regularises_task_zero_only(
    regulariser, make_stream, transforms, tiny_net, setting_of
) -> None:
    stream = make_stream(classes_per_task=(2, 2))
    method = make(stream, transforms, tiny_net, setting_of, regulariser=regulariser)
    calls = []
    original = method.regulariser

    def spy(x, y):
        calls.append(method.current_task)
        return original(x, y)

    method.regulariser = spy  # type: ignore[method-assign]
    method.begin_task(0)
    b = batch(stream, transforms, 0)
    state = method.generator.get_state()
    out = method.observe(b)
    assert set(out.terms) == {"ce", regulariser}
    method.generator.set_state(state)
    ce = F.cross_entropy(method.net(b.x), b.y)
    expected = ce + method.config.weight * original(b.x, b.y)
    torch.testing.assert_close(out.loss, expected)
    assert method.config.weight == {"lfr": 0.03, "llr": 4.0}[regulariser]
    assert len(method.buffer) == 6  # the reservoir fills during task 0 ...
    method.observe(b)
    assert calls == [0, 0]

    method.begin_task(1)
    out = method.observe(batch(stream, transforms, 1))
    assert set(out.terms) == {"ce"}  # ... and plain ER replays it from task 1 on
    assert set(out.groups) == {"stream", "buffer"}
    assert calls == [0, 0]


def test_er_flat_task_zero_is_plain_sgd_with_batchnorm_statistics_updated_once(
    make_stream, transforms, tiny_net, setting_of
) -> None:
    stream = make_stream(classes_per_task=(2, 2))
    method = make(stream, transforms, tiny_net, setting_of, batchnorm=True, regulariser="lfr")
    sizes = []
    method.net.register_forward_hook(lambda module, args, output: sizes.append(args[0].shape[0]))
    method.begin_task(0)
    method.observe(batch(stream, transforms, 0))
    method.observe(batch(stream, transforms, 0))
    assert set(sizes) == {6}  # no replay on task 0 although the buffer holds items
    bn = method.net.body[2]
    assert int(bn.num_batches_tracked) == 2  # one update per step: the clean forward

    plain = make(stream, transforms, tiny_net, setting_of, regulariser="none")
    plain.begin_task(0)
    b = batch(stream, transforms, 0)
    out = plain.observe(b)
    assert set(out.terms) == {"ce"}
    torch.testing.assert_close(out.loss, F.cross_entropy(plain.net(b.x), b.y))


@pytest.mark.parametrize("regulariser", ["lfr", "llr", "none"])
def test_er_flat_runs_the_two_task_study(regulariser, make_stream, transforms, tiny_net, setting_of) -> None:
    stream = make_stream(classes_per_task=(2, 2))
    method = make(stream, transforms, tiny_net, setting_of, batchnorm=True, regulariser=regulariser)
    history = fit(
        method, stream, TrainingSchedule(epochs=1, batch_size=8, lr=0.05), generator=method.generator
    )
    assert [len(row) for row in history.class_il] == [1, 2]


def test_er_flat_config() -> None:
    config = ERFlatConfig()
    assert (config.regulariser, config.buffer_size, config.minibatch_size) == ("lfr", 500, 32)
    assert config.epsilon == pytest.approx(8 / 255)
    assert config.ascent_step == pytest.approx(2.5 * (8 / 255) / 5)
    assert ERFlatConfig(regulariser="llr").weight == 4.0
    assert ERFlatConfig(regulariser="llr", mu=1.5).weight == 1.5
    assert ERFlatConfig(step_size=0.01).ascent_step == 0.01
    with pytest.raises(MethodConfigError, match=r"method\.regulariser"):
        ERFlatConfig(regulariser="sam")  # type: ignore[arg-type]
    with pytest.raises(MethodConfigError, match=r"method\.epsilon"):
        ERFlatConfig(epsilon=0)
    with pytest.raises(MethodConfigError, match=r"method\.mu"):
        ERFlatConfig(mu=-1)
