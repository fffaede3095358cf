"""What makes GDumb GDumb: a greedy class-balanced memory and a fresh network fitted on it alone."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from xder_methods import (
    Batch,
    ContinualSetting,
    MethodConfigError,
    TaskData,
    TrainingSchedule,
    create_method,
    fit,
    shuffled_batches,
)
from xder_methods.methods.gdumb import (
    GDumb,
    GDumbConfig,
    cutmix,
    cutmix_box,
    cutmix_cross_entropy,
    gdumb_learning_rate,
    greedy_class_balanced_slots,
    paste_box,
    sample_symmetric_beta,
)


def build(stream, transforms, tiny_net, setting_of, seed=0, batchnorm=False, **config) -> GDumb:
    torch.manual_seed(seed)
    base = {"buffer_size": 10, "epochs_fitting": 3, "batch_size": 4}
    return create_method(
        "gdumb",
        net=tiny_net(sum(stream.classes_per_task), batchnorm=batchnorm),
        setting=setting_of(stream),
        transforms=transforms,
        config=GDumbConfig(**(base | config)),
        generator=torch.Generator().manual_seed(seed),
    )


def task_data(stream, t) -> TaskData:
    rows = stream.task(t).train
    return TaskData(stream.train_x[rows], stream.train_y[rows], t)


def cloned_state(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def assert_same_state(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


# ---------------------------------------------------------------------------------- the sampler


def test_greedy_sampler_on_a_hand_made_stream() -> None:
    seen = torch.zeros(3, dtype=torch.bool)
    incoming = torch.tensor([0, 0, 0, 1, 1, 2])
    slots, size = greedy_class_balanced_slots(
        torch.zeros(0, dtype=torch.int64), incoming, seen, 4, torch.zeros(6, dtype=torch.float64)
    )
    # Items 0-3 fill rows 0-3. Item 4 (class 1 holds 1 < 4/2) replaces the first row of the
    # largest class 0 (row 0); item 5 (class 2 holds 0 < 4/3) replaces the first row of class 0
    # again (tie 2-2 between classes 0 and 1: the lowest label), row 1. Items 0 and 1 are
    # therefore never written.
    assert slots.tolist() == [4, 4, 2, 3, 0, 1]
    assert size == 4
    stored = torch.tensor([1, 2, 0, 1])  # rows 0..3 after the batch
    seen = torch.ones(3, dtype=torch.bool)
    slots, size = greedy_class_balanced_slots(
        stored, torch.tensor([2, 0, 0]), seen, 4, torch.tensor([0.99, 0.5, 0.0], dtype=torch.float64)
    )
    # Class 2 (1 < 4/3) takes the second row of class 1 (rows 0, 3): row 3; class 0 (1 < 4/3)
    # takes the second row of the now largest class 2 (rows 1, 3): row 3 again, shadowing the
    # first write; the last item finds class 0 at 2 >= 4/3 and is discarded.
    assert slots.tolist() == [4, 3, 4]
    assert size == 4
    assert stored.tolist() == [1, 2, 0, 1]  # inputs untouched


def test_sampler_keeps_the_memory_class_balanced(make_stream, transforms, tiny_net, setting_of) -> None:
    stream = make_stream(classes_per_task=(2, 2, 2), per_class=12)
    method = build(stream, transforms, tiny_net, setting_of, buffer_size=12)
    for t in range(3):
        method.begin_task(t)
        rows = stream.task(t).train
        order = rows[torch.randperm(rows.shape[0], generator=torch.Generator().manual_seed(t))]
        for start in range(0, order.shape[0], 5):
            index = order[start : start + 5]
            x_raw, y = stream.train_x[index], stream.train_y[index]
            out = method.observe(Batch(transforms.train(x_raw), y, x_raw, t))
            assert out.loss is None  # no gradient step on the stream
        counts = torch.bincount(method.buffer.labels[: len(method.buffer)], minlength=6)
        seen = 2 * (t + 1)
        assert len(method.buffer) == 12
        assert counts[:seen].tolist() == [12 // seen] * seen
    assert method.seen.tolist() == [True] * 6
    # Stored examples are the raw stream items with their labels.
    for row in range(12):
        matches = (stream.train_x == method.buffer.examples[row]).flatten(1).all(dim=1)
        assert method.buffer.labels[row] in stream.train_y[matches]


def test_observe_leaves_the_network_alone(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of)
    before = cloned_state(method.net)
    rows = stream.task(0).train[:6]
    x_raw = stream.train_x[rows]
    out = method.observe(Batch(transforms.train(x_raw), stream.train_y[rows], x_raw, 0))
    assert out.loss is None
    assert out.terms == {}
    assert_same_state(cloned_state(method.net), before)


# ---------------------------------------------------------------------------------- the fitting


def test_network_is_reinitialised_before_each_fit(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of, batchnorm=True)
    initial = cloned_state(method.net)
    at_fit: list[dict[str, torch.Tensor]] = []
    original = method.fit_buffer

    def spy() -> None:
        at_fit.append(cloned_state(method.net))
        original()

    method.fit_buffer = spy  # type: ignore[method-assign]
    history = fit(
        method, stream, TrainingSchedule(epochs=1, batch_size=8, lr=0.1), generator=method.generator
    )
    assert len(at_fit) == 3  # one fit per task
    for state in at_fit:
        assert_same_state(state, initial)  # weights AND BatchNorm statistics
    trained = cloned_state(method.net)
    assert not torch.equal(trained["classifier.weight"], initial["classifier.weight"])
    assert trained["body.2.num_batches_tracked"] > 0
    assert len(history.class_il) == 3


class FlatNet(torch.nn.Module):
    """A linear backbone on (B, 1, 4, 4) images: big enough for CutMix boxes of several sizes."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU())
        self.classifier = torch.nn.Linear(8, num_classes)
        self.num_features = 8

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def test_the_fit_follows_sgdr_and_weighs_each_label_by_its_area(transforms) -> None:
    """One fit (4 epochs, every batch CutMix-ed) replayed here from the same draws with the
    learning rate of each epoch written out (a warm-up at lr_max / 10, then SGDR with T_0 = 1,
    T_mult = 2: lr_max, lr_max, then half-way down the second cycle) and the CutMix loss
    written out (the base image's label weighted by the area it keeps, the partner's by the
    pasted area): the same weights after the fit."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x_raw = torch.randint(0, 256, (12, 1, 4, 4), generator=g, dtype=torch.uint8)
    y = torch.arange(2).repeat(6)
    config = GDumbConfig(
        buffer_size=12, epochs_fitting=4, batch_size=4, momentum=0.9, weight_decay=1e-3,
        clip_grad_norm=None, lr_max=0.2, lr_min=0.02,
    )  # fmt: skip
    setting = ContinualSetting((2, 2, 2), (1, 4, 4))
    method = create_method(
        "gdumb", net=FlatNet(6), setting=setting, transforms=transforms, config=config,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    method.offer(x_raw, y, 0)
    net = copy.deepcopy(method.net)
    state = method.generator.get_state()
    method.fit_buffer()

    g.set_state(state)
    n = len(method.buffer)
    examples, labels = method.buffer.examples[:n], method.buffer.labels[:n]
    optimizer = torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9, weight_decay=1e-3)
    kept_areas = []
    for lr in (0.02, 0.2, 0.2, 0.02 + 0.18 * 0.5):
        for group in optimizer.param_groups:
            group["lr"] = lr
        for index in shuffled_batches(n, 4, drop_last=False, generator=g, device=labels.device):
            x = transforms.train(examples[index], g)
            x, base, partner, kept = cutmix(x, labels[index], alpha=1.0, probability=1.0, generator=g)
            kept_areas.append(float(kept))
            logits = net(x)
            loss = kept * F.cross_entropy(logits, base) + (1 - kept) * F.cross_entropy(logits, partner)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert min(kept_areas) < 0.8  # boxes were pasted
    for a, b in zip(method.net.parameters(), net.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_fit_after_last_task_leaves_earlier_tasks_untrained(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of, fit_after="last_task")
    initial = cloned_state(method.net)
    assert not method.forgetting_defined
    method.offer(stream.train_x[:10], stream.train_y[:10], 0)
    method.end_task(0, task_data(stream, 0))
    assert_same_state(cloned_state(method.net), initial)
    method.end_task(2, task_data(stream, 2))
    assert not torch.equal(method.net.classifier.weight, initial["classifier.weight"])


def test_learning_rate_matches_gdumb_warm_start_and_sgdr() -> None:
    lr_max, lr_min = 0.05, 0.0005
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=lr_max)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        optimizer, T_0=1, T_mult=2, eta_min=lr_min
    )
    for epoch in range(40):  # GDumb's code: a warm epoch, then lr_max, then the scheduler
        if epoch == 0:
            optimizer.param_groups[0]["lr"] = lr_max * 0.1
        elif epoch == 1:
            optimizer.param_groups[0]["lr"] = lr_max
        else:
            scheduler.step()
        assert gdumb_learning_rate(epoch, lr_max, lr_min) == pytest.approx(optimizer.param_groups[0]["lr"])
    assert gdumb_learning_rate(3, lr_max, lr_min) == pytest.approx((lr_max + lr_min) / 2)  # mid-cycle


def test_cutmix_box_and_paste_by_hand() -> None:
    x = torch.stack([torch.full((1, 4, 4), 1.0), torch.full((1, 4, 4), 2.0)])
    # lam 0.75: cut sides 4 * sqrt(0.25) = 2, halves 1; centre (1, 1): rows [0, 2), cols [0, 2).
    box = cutmix_box(torch.tensor(0.75), torch.tensor(1), torch.tensor(1), 4, 4)
    assert [int(v) for v in box] == [0, 2, 0, 2]
    mixed, weight = paste_box(x, torch.tensor([1, 0]), *box)
    assert mixed[0, 0].tolist() == [[2, 2, 1, 1], [2, 2, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]
    assert mixed[1, 0, :2, :2].eq(1).all()
    assert mixed[1, 0, 2:].eq(2).all()
    assert float(weight) == pytest.approx(1 - 4 / 16)
    # Centre (0, 3): rows [-1, 1) -> [0, 1), cols [2, 4): 2 pixels.
    box = cutmix_box(torch.tensor(0.75), torch.tensor(0), torch.tensor(3), 4, 4)
    assert [int(v) for v in box] == [0, 1, 2, 4]
    _, weight = paste_box(x, torch.tensor([1, 0]), *box)
    assert float(weight) == pytest.approx(1 - 2 / 16)
    assert x[0].eq(1).all()  # inputs untouched


def test_cutmix_label_weights_equal_the_pasted_area() -> None:
    x = torch.arange(6.0).view(6, 1, 1, 1).expand(6, 3, 8, 8).contiguous()
    y = torch.arange(6)
    generator = torch.Generator().manual_seed(3)
    weights = []
    for _ in range(20):
        mixed, labels, partner, weight = cutmix(x, y, alpha=1.0, probability=1.0, generator=generator)
        assert torch.equal(labels, y)
        for i in range(6):
            from_partner = (mixed[i] == float(partner[i])) & (mixed[i] != float(i))
            if partner[i] != i:
                assert float(from_partner.float().mean()) == pytest.approx(1 - float(weight))
        weights.append(float(weight))
    assert min(weights) < 0.9  # boxes of various sizes were pasted
    mixed, _, _, weight = cutmix(x, y, alpha=1.0, probability=0.0, generator=generator)
    assert torch.equal(mixed, x)
    assert float(weight) == 1.0
    flat = torch.randn(6, 5)
    assert cutmix(flat, y, alpha=1.0, probability=1.0)[0] is flat  # nothing to cut in a vector


def test_cutmix_cross_entropy_by_hand() -> None:
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    a, b = torch.tensor([0, 2]), torch.tensor([1, 0])
    weight = torch.tensor(0.75)
    expected = 0.75 * F.cross_entropy(logits, a) + 0.25 * F.cross_entropy(logits, b)
    torch.testing.assert_close(cutmix_cross_entropy(logits, a, b, weight), expected)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_symmetric_beta_moments_and_determinism(alpha) -> None:
    generator = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_symmetric_beta(alpha, generator) for _ in range(3000)])
    assert ((draws >= 0) & (draws <= 1)).all()
    assert float(draws.mean()) == pytest.approx(0.5, abs=0.02)
    assert float(draws.var()) == pytest.approx(1 / (4 * (2 * alpha + 1)), rel=0.1)
    one = sample_symmetric_beta(alpha, torch.Generator().manual_seed(7))
    assert float(one) == float(sample_symmetric_beta(alpha, torch.Generator().manual_seed(7)))


# ---------------------------------------------------------------------------------- the state


def test_state_dict_round_trip(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of, batchnorm=True)
    fit(method, stream, TrainingSchedule(epochs=1, batch_size=8, lr=0.1), generator=method.generator)
    clone = build(stream, transforms, tiny_net, setting_of, seed=5, batchnorm=True)  # other init
    clone.load_state_dict(method.state_dict())
    x = transforms.test(stream.test_x)
    method.eval()
    clone.eval()
    torch.testing.assert_close(clone.predict(x), method.predict(x))  # the trained network
    assert torch.equal(clone.buffer.examples, method.buffer.examples)
    assert torch.equal(clone.buffer.labels, method.buffer.labels)
    assert len(clone.buffer) == len(method.buffer) == 10
    assert torch.equal(clone.seen, method.seen)
    clone.reset_network()  # the ORIGINAL initial weights came along
    method.reset_network()
    assert_same_state(cloned_state(clone.net), cloned_state(method.net))


def test_config_validation() -> None:
    config = GDumbConfig()
    assert (config.lr_max, config.lr_min, config.cutmix_alpha, config.epochs_fitting) == (
        0.05,
        5e-4,
        1.0,
        250,
    )
    # CutMix on every batch: the X-DER paper's code never reads its cutmix_prob (GDumb's code: 0.5).
    assert (config.momentum, config.weight_decay, config.cutmix_probability) == (0.9, 1e-6, 1.0)
    with pytest.raises(MethodConfigError, match=r"method\.lr_min"):
        GDumbConfig(lr_min=0.1)
    with pytest.raises(MethodConfigError, match=r"method\.cutmix_probability"):
        GDumbConfig(cutmix_probability=1.5)
    with pytest.raises(MethodConfigError, match=r"method\.fit_after"):
        GDumbConfig(fit_after="never")


# --------------------------------------------------------------------------------------- resume


@pytest.mark.parametrize("stop_after", [2, 3])  # at a task's last epoch (before the fit), mid-task
def test_resume_equals_uninterrupted(
    stop_after, stream, transforms, tiny_net, setting_of, snapshot_after
) -> None:
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1)
    method = build(stream, transforms, tiny_net, setting_of, batchnorm=True)
    full = fit(method, stream, schedule, generator=method.generator)
    method = build(stream, transforms, tiny_net, setting_of, batchnorm=True)
    snapshot = snapshot_after(method, stream, schedule, method.generator, stop_after)
    torch.manual_seed(123)
    method = build(stream, transforms, tiny_net, setting_of, seed=99, batchnorm=True)
    resumed = fit(method, stream, schedule, generator=method.generator, resume=snapshot)
    assert resumed.class_il == full.class_il
    assert resumed.task_il == full.task_il
    assert not math.isnan(full.class_il[-1][0])
