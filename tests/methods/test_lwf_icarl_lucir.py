"""What makes LwF.MC, iCaRL and LUCIR themselves: teacher, targets, herding, NME, cosine head."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods import (
    Batch,
    MethodConfigError,
    OpCounter,
    TaskData,
    TrainingSchedule,
    create_method,
    fit,
    method_config_class,
    shuffled_batches,
)
from xder_methods.methods import icarl as icarl_module
from xder_methods.methods import lucir as lucir_module
from xder_methods.methods import lwf_mc as lwf_module
from xder_methods.methods.lucir import (
    fitting_learning_rate,
    imprinted_weights,
    less_forget_distance,
    margin_ranking_loss,
)
from xder_methods.methods.lwf_mc import distillation_targets
from xder_methods.parts.replay import merged_share
from xder_methods.parts.selection import class_mean_features, herding, nearest_mean_scores

REGISTERED = (lwf_module, icarl_module, lucir_module)  # imported to register the methods


def make(name, stream, transforms, tiny_net, setting_of, *, net=None, seed=0, batchnorm=False, **config):
    torch.manual_seed(seed)
    cls = method_config_class(name)
    base = {} if name == "lwf_mc" else {"buffer_size": 10, "minibatch_size": 4}
    return create_method(
        name,
        net=net if net is not None else tiny_net(sum(stream.classes_per_task), batchnorm=batchnorm),
        setting=setting_of(stream),
        transforms=transforms,
        config=cls(**(base | config)),
        generator=torch.Generator().manual_seed(seed),
    )


def task_data(stream, t) -> TaskData:
    rows = stream.task(t).train
    return TaskData(stream.train_x[rows], stream.train_y[rows], t)


def batch(stream, transforms, t, rows=None) -> Batch:
    split = stream.task(t).train
    rows = split[:6] if rows is None else split[rows]
    x_raw = stream.train_x[rows]
    return Batch(transforms.train(x_raw, torch.Generator().manual_seed(1)), stream.train_y[rows], x_raw, t)


def class_counts(method) -> list[int]:
    return torch.bincount(method.buffer.labels[: len(method.buffer)], minlength=6).tolist()


def perturb(net: nn.Module) -> None:
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(7)))


class IdentityFeatures(nn.Module):
    """Features = the input flattened ((B, 1, 2, 2) -> (B, 4)), so class means can be set by hand."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.classifier = nn.Linear(4, num_classes)
        self.num_features = 4

    def forward_features(self, x: Tensor) -> Tensor:
        return x.float().flatten(1)

    def forward_head(self, features: Tensor) -> Tensor:
        return self.classifier(features)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


# ------------------------------------------------------------------------- the teacher (all three)


@pytest.mark.parametrize("name", ["lwf_mc", "icarl", "lucir"])
def test_teacher_is_frozen_in_eval_mode_and_not_optimised(
    name, stream, transforms, tiny_net, setting_of
) -> None:
    method = make(name, stream, transforms, tiny_net, setting_of, batchnorm=True)
    method.end_task(0, task_data(stream, 0))
    perturb(method.net)
    method.begin_task(1)
    method.train(True)
    assert not method.teacher.training
    assert all(not p.requires_grad for p in method.teacher.parameters())
    for key, value in method.net.state_dict().items():  # a copy of the network at begin_task
        assert torch.equal(method.teacher.state_dict()[key], value)
    teacher_ids = {id(p) for p in method.teacher.parameters()}
    assert not teacher_ids & {id(p) for p in method.optimizer_parameters()}
    before = {k: v.clone() for k, v in method.teacher.state_dict().items()}
    optimizer = torch.optim.SGD(list(method.optimizer_parameters()), lr=0.5)
    for _ in range(2):
        out = method.observe(batch(stream, transforms, 1))
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert all(p.grad is None for p in method.teacher.parameters())
    for key, value in method.teacher.state_dict().items():  # weights and BN statistics untouched
        assert torch.equal(value, before[key])


@pytest.mark.parametrize("name", ["lwf_mc", "icarl", "lucir"])
def test_a_step_has_no_host_synchronisation(name, stream, transforms, tiny_net, setting_of) -> None:
    method = make(name, stream, transforms, tiny_net, setting_of, batchnorm=True)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    step = batch(stream, transforms, 1, rows=torch.tensor([0, 1, 12, 13]))
    with OpCounter() as counter:
        method.observe(step).loss.backward()
    assert counter.host_syncs == 0, counter.syncs


# --------------------------------------------------------------------------------- LwF.MC


def test_distillation_targets_are_teacher_sigmoids_on_old_classes_one_hot_on_new() -> None:
    teacher = torch.tensor([[2.0, -1.0, 5.0, 5.0, 5.0], [0.0, 3.0, -5.0, 5.0, 5.0]])
    labels = torch.tensor([3, 1])  # a new-class stream item and an old-class exemplar
    targets = distillation_targets(labels, teacher, num_old=2, num_seen=4)
    expected = torch.tensor(
        [
            [1 / (1 + math.exp(-2.0)), 1 / (1 + math.exp(1.0)), 0.0, 1.0],
            [0.5, 1 / (1 + math.exp(-3.0)), 0.0, 0.0],
        ]
    )
    torch.testing.assert_close(targets, expected)
    torch.testing.assert_close(distillation_targets(labels[:1], None, 0, 4), torch.tensor([[0.0, 0, 0, 1]]))


def test_lwf_mc_loss_is_bce_against_old_model_targets(stream, transforms, tiny_net, setting_of) -> None:
    method = make("lwf_mc", stream, transforms, tiny_net, setting_of)
    method.begin_task(1)
    teacher = [p.clone() for p in method.net.parameters()]
    perturb(method.net)
    b = batch(stream, transforms, 1)
    out = method.observe(b)
    old_net = tiny_net(6)
    with torch.no_grad():
        for p, value in zip(old_net.parameters(), teacher, strict=True):
            p.copy_(value)
    old = torch.sigmoid(old_net(b.x))[:, :2]
    targets = torch.cat([old, F.one_hot(b.y, 4).float()[:, 2:]], dim=1)
    expected = F.binary_cross_entropy_with_logits(method.net(b.x)[:, :4], targets)
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()
    assert torch.count_nonzero(method.net.classifier.weight.grad[4:]) == 0  # unseen classes


# ---------------------------------------------------------------------------------- herding


def test_herding_balances_the_running_mean_on_a_hand_made_example() -> None:
    # Directions (rows are rescaled: herding normalises them): A = (1, 0), B = (.6, .8),
    # C = (.6, -.8), D = (.8, .6). mu = (.75, .15). With unit rows, step j picks
    # argmax_f f . (j mu - S), S the sum of the chosen rows:
    #   j=1: f . mu        = A .75, B .57, C .33, D .69          -> A
    #   j=2: f . (.5, .3)  = B .54, C .06, D .58                 -> D
    #   j=3: f . (.45,-.15) = B .15, C .39                       -> C (B is nearer to mu than C)
    features = torch.tensor([[2.0, 0.0], [3.0, 4.0], [0.6, -0.8], [8.0, 6.0]])
    assert herding(features, 4).tolist() == [0, 3, 2, 1]
    assert herding(features, 2).tolist() == [0, 3]
    assert herding(features, 9).tolist() == [0, 3, 2, 1]  # at most N
    unit = F.normalize(features, dim=1)
    nearest_first = (unit - unit.mean(0)).norm(dim=1).argsort().tolist()
    assert nearest_first == [0, 3, 1, 2]  # plain nearest-to-mean would differ at the third pick


def test_herding_targets_the_mean_of_unit_features_not_its_direction() -> None:
    # A = (1, 0), B = (.6, .8), C = (.6, -.8), F = (0, 1): mu = (.55, .25), |mu| = .60 < 1.
    # Step j picks argmax_f f . (j mu - S):
    #   j=1: f . (.55, .25)  = A .55, B .53, C .13, F .25   -> A
    #   j=2: f . (.10, .50)  = B .46, C -.34, F .50         -> F
    #   j=3: f . (.65, -.25) = B .19, C .59                 -> C, then B
    # With mu re-normalised to unit length the order would be A, B, F, C.
    features = torch.tensor([[3.0, 0.0], [0.6, 0.8], [1.2, -1.6], [0.0, 0.5]])
    assert herding(features, 4).tolist() == [0, 3, 2, 1]


@pytest.mark.parametrize("name", ["icarl", "lucir"])
def test_memory_is_class_balanced_and_old_classes_keep_their_first_exemplars(
    name, stream, transforms, tiny_net, setting_of
) -> None:
    method = make(name, stream, transforms, tiny_net, setting_of, batchnorm=True, buffer_size=10)
    expected = {0: [5, 5, 0, 0, 0, 0], 1: [2, 2, 2, 2, 0, 0], 2: [1, 1, 1, 1, 1, 1]}  # M // seen
    previous = None
    for t in range(3):
        method.begin_task(t)
        data = task_data(stream, t)
        features = icarl_module.eval_features(method.net, data.x_raw, transforms.test, 256)
        method.end_task(t, data)
        assert class_counts(method) == expected[t]
        items = method.buffer.all()
        m = expected[t][0]
        for c in range(*method.setting.class_range(t)):  # new classes: herding order
            rows = torch.nonzero(data.y == c).flatten()
            assert torch.equal(
                items.examples[items.labels == c], data.x_raw[rows[herding(features[rows], m)]]
            )
        if previous is not None:
            for c in range(method.setting.class_range(t)[0]):  # old classes: cut to the first m
                assert torch.equal(items.examples[items.labels == c], previous[c][:m])
        previous = {c: items.examples[items.labels == c] for c in range(6)}
        perturb(method.net)  # the next task's features differ


def test_icarl_needs_an_exemplar_of_every_class(stream, transforms, tiny_net, setting_of) -> None:
    with pytest.raises(MethodConfigError, match="buffer_size"):
        make("icarl", stream, transforms, tiny_net, setting_of, buffer_size=5)


def test_icarl_replays_exemplars_with_their_distillation_targets(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make("icarl", stream, transforms, tiny_net, setting_of, minibatch_size=3)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    perturb(method.net)
    b = batch(stream, transforms, 1)
    state = method.generator.get_state()
    out = method.observe(b)
    method.generator.set_state(state)
    sample = method.buffer.sample(3, method.generator)
    x = torch.cat([b.x, transforms.train(sample.examples, method.generator)])
    y = torch.cat([b.y, sample.labels])
    with torch.no_grad():
        old = torch.sigmoid(method.teacher(x))[:, :2]
    targets = torch.cat([old, F.one_hot(y, 4).float()[:, 2:]], dim=1)
    per_item = F.binary_cross_entropy_with_logits(method.net(x)[:, :4], targets, reduction="none").mean(1)
    torch.testing.assert_close(out.loss, per_item.mean())
    torch.testing.assert_close(out.groups["stream"], per_item[:6].sum() / 9)
    torch.testing.assert_close(out.groups["buffer"], per_item[6:].sum() / 9)


def test_merged_share_by_hand() -> None:
    # 10 exemplars over 4 steps: floor(s * 10 / 4) .. floor((s + 1) * 10 / 4) -> 2, 3, 2, 3.
    assert [merged_share(10, 4, s) for s in range(4)] == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert [merged_share(2, 4, s) for s in range(4)] == [(0, 0), (0, 1), (1, 1), (1, 2)]
    assert merged_share(0, 4, 3) == (0, 0)


@pytest.mark.parametrize("name", ["icarl", "lucir", "bic"])
def test_merged_replay_shows_every_exemplar_once_an_epoch(
    name, stream, transforms, tiny_net, setting_of
) -> None:
    """The authors' code merges the memory into the task's training set: over an epoch of the
    task's stream batches each exemplar is replayed exactly once, spread evenly over the steps,
    in a new order each epoch."""
    config = {"epochs_fitting": 0} if name == "lucir" else {"epochs_bic": 0} if name == "bic" else {}
    method = make(name, stream, transforms, tiny_net, setting_of, **config)
    assert method.config.replay == "merged"
    method.begin_task(0)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    data = task_data(stream, 1)  # 24 rows: 4 steps of 6 (BiC withholds one: 3 steps of 6)
    method.prepare_task(1, data, TrainingSchedule(epochs=2, batch_size=6, lr=0.1, drop_last=True).budget)
    steps = method.merged.steps_per_epoch
    assert steps == (3 if name == "bic" else 4)
    memory = len(method.buffer)
    drawn: list[list[int]] = []
    gather = method.buffer.gather

    def spy(index):
        drawn.append(index.tolist())
        return gather(index)

    method.buffer.gather = spy  # type: ignore[method-assign]
    for step in range(2 * steps):  # two epochs
        method.observe(batch(stream, transforms, 1, slice(6 * (step % steps), 6 * (step % steps) + 6)))
    assert memory == (9 if name == "bic" else 10)  # BiC holds one of its 10 slots out
    per_epoch = [e - s for s, e in (merged_share(memory, steps, i) for i in range(steps)) if e > s]
    assert [len(d) for d in drawn] == per_epoch * 2  # 2 or 3 beside each stream batch of 6
    half = len(per_epoch)
    epochs = [list(itertools.chain(*drawn[:half])), list(itertools.chain(*drawn[half:]))]
    for rows in epochs:
        assert sorted(rows) == list(range(memory))  # each exemplar once an epoch
    assert epochs[0] != epochs[1]  # a new order each epoch
    state = method.state_dict()
    clone = make(name, stream, transforms, tiny_net, setting_of, **config)
    clone.load_state_dict(state)
    assert (clone.merged.steps_per_epoch, clone.merged.step) == (steps, 2 * steps)


def test_joined_replay_is_an_option(stream, transforms, tiny_net, setting_of) -> None:
    method = make("icarl", stream, transforms, tiny_net, setting_of, minibatch_size=3, replay="joined")
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    method.prepare_task(1, task_data(stream, 1), TrainingSchedule(epochs=1, batch_size=6, lr=0.1).budget)
    out = method.observe(batch(stream, transforms, 1))
    torch.testing.assert_close(out.groups["stream"] + out.groups["buffer"], out.loss)
    assert out.groups["buffer"] > 0
    with pytest.raises(MethodConfigError, match=r"method\.replay"):
        method_config_class("icarl")(replay="ring")


# -------------------------------------------------------------------------------------- NME


def test_nearest_mean_of_exemplars_on_a_hand_made_example(stream, transforms, setting_of) -> None:
    method = make("icarl", stream, transforms, None, setting_of, net=IdentityFeatures(6))
    # Exemplar features (transforms.test divides by 255): class 0 along e1, 1 along e2, 2 along e3.
    exemplars = torch.tensor(
        [
            [255, 0, 0, 0],
            [255, 255, 0, 0],  # class 0: mean of (1,0,0,0) and (.71,.71,0,0)
            [0, 51, 0, 0],
            [0, 255, 0, 51],  # class 1
            [0, 0, 255, 0],
            [0, 0, 102, 0],  # class 2 (the same direction at two scales)
        ],
        dtype=torch.uint8,
    ).view(6, 1, 2, 2)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    method.buffer.write(torch.arange(6), exemplars, labels)
    method.buffer.set_size(6)
    method.update_class_means()

    unit = F.normalize(exemplars.view(6, 4).double() / 255, dim=1)
    for c in range(3):
        mean = F.normalize(unit[labels == c].mean(0), dim=0)
        torch.testing.assert_close(method.class_means[c].double(), mean, rtol=1e-6, atol=1e-6)
    assert method.has_mean.tolist() == [True, True, True, False, False, False]

    # Queries: nearest means are 0, 1, 2, 2 (the norm does not matter; the direction does).
    queries = torch.tensor(
        [[0.9, 0.2, 0.0, 0.0], [0.1, 1.0, 0.1, 0.3], [0.0, 0.1, 3.0, 0.2], [0, 0, 0.01, 0]]
    )
    method.eval()
    scores = method.predict(queries.view(4, 1, 2, 2))
    assert scores.shape == (4, 6)
    assert (scores[:, 3:] == float("-inf")).all()
    assert scores.argmax(dim=1).tolist() == [0, 1, 2, 2]
    distances = torch.cdist(F.normalize(queries.double(), dim=1), method.class_means[:3].double())
    torch.testing.assert_close(-scores[:, :3].double(), distances, rtol=1e-5, atol=1e-5)


def test_pure_class_means_and_scores() -> None:
    features = torch.tensor([[3.0, 0.0], [0.0, 2.0], [1.0, 0.0]])
    means, present = class_mean_features(features, torch.tensor([0, 0, 2]), 3)
    torch.testing.assert_close(means, torch.tensor([[0.5**0.5, 0.5**0.5], [0.0, 0.0], [1.0, 0.0]]))
    assert present.tolist() == [True, False, True]
    scores = nearest_mean_scores(torch.tensor([[0.0, 5.0]]), means, present)
    torch.testing.assert_close(scores[0, [0, 2]], -torch.tensor([(2 - 2**0.5) ** 0.5, 2**0.5]))
    assert scores[0, 1] == float("-inf")


# ------------------------------------------------------------------------------------ LUCIR


def test_margin_ranking_loss_by_hand() -> None:
    # Two old classes (0, 1), two new ones (2, 3), k = 2, m = 0.5.
    cosines = torch.tensor(
        [
            [0.9, 0.0, 0.1, 0.2],  # old item, well separated: 0.5 - 0.9 + 0.2 < 0 -> 0
            [0.1, 0.3, 0.6, 0.1],  # old item (label 1): (0.5-0.3+0.6) + (0.5-0.3+0.1) = 0.8 + 0.3
            [0.0, 0.0, 0.9, 0.9],  # new item: ignored
        ]
    )
    zero = margin_ranking_loss(cosines[:1], torch.tensor([0]), num_old=2, k=2, margin=0.5)
    assert float(zero) == 0.0
    loss = margin_ranking_loss(cosines, torch.tensor([0, 1, 2]), num_old=2, k=2, margin=0.5)
    torch.testing.assert_close(loss, torch.tensor((0.0 + 0.8 + 0.3) / (2 * 2)))
    none_old = margin_ranking_loss(cosines[2:], torch.tensor([2]), num_old=2, k=2, margin=0.5)
    assert float(none_old) == 0.0


def test_less_forget_distance_is_one_minus_cosine() -> None:
    f = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    teacher = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    torch.testing.assert_close(less_forget_distance(f, teacher), torch.tensor([0.0, 1 - 0.5**0.5]))


def test_less_forget_term_is_zero_when_the_model_equals_its_teacher(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make("lucir", stream, transforms, tiny_net, setting_of, epochs_fitting=0)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    out = method.observe(batch(stream, transforms, 1))
    assert abs(float(out.terms["less_forget"])) < 1e-6
    perturb(method.net)
    out = method.observe(batch(stream, transforms, 1))
    assert float(out.terms["less_forget"]) > 1e-3
    assert method.less_forget_weight(1) == 5.0
    assert method.less_forget_weight(2) == pytest.approx(5.0 * math.sqrt(2))  # lambda_base sqrt(t)


def test_imprinted_weights_are_normalised_class_mean_features(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make("lucir", stream, transforms, tiny_net, setting_of, epochs_fitting=0)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    old_norm = torch.cat(list(method.head.weights[:1])).norm(dim=1).mean()
    untouched = method.head.weights[1].detach().clone()
    only_class_2 = batch(stream, transforms, 1, rows=torch.tensor([0, 1, 2]))
    with torch.no_grad():
        f2 = method.net.forward_features(only_class_2.x)
    method.observe(only_class_2)
    expected_2 = F.normalize(F.normalize(f2, dim=1).mean(0), dim=0) * old_norm
    torch.testing.assert_close(method.head.weights[1][0], expected_2)
    torch.testing.assert_close(method.head.weights[1][1], untouched[1])  # class 3 not seen yet
    assert method.imprinted.tolist() == [False, False, True, False, False, False]

    mixed = batch(stream, transforms, 1, rows=torch.tensor([3, 4, 12, 13, 14]))
    with torch.no_grad():
        f3 = method.net.forward_features(mixed.x)[mixed.y == 3]
    method.observe(mixed)
    expected_3 = F.normalize(F.normalize(f3, dim=1).mean(0), dim=0) * old_norm
    torch.testing.assert_close(method.head.weights[1][1], expected_3)
    torch.testing.assert_close(method.head.weights[1][0], expected_2)  # imprinted once only
    torch.testing.assert_close(F.normalize(method.head.weights[1], dim=1)[1], F.normalize(expected_3, dim=0))

    weights, present = imprinted_weights(
        torch.tensor([[2.0, 0.0], [0.0, 1.0], [5.0, 5.0]]), torch.tensor([4, 4, 5]), 4, 7, torch.eye(2) * 3
    )
    torch.testing.assert_close(
        weights, torch.tensor([[3 * 0.5**0.5, 3 * 0.5**0.5], [3 * 0.5**0.5] * 2, [0, 0]])
    )
    assert present.tolist() == [True, True, False]


def test_lucir_logits_are_sigma_times_cosines_and_only_current_weights_train(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make("lucir", stream, transforms, tiny_net, setting_of, epochs_fitting=0)
    with torch.no_grad():
        method.head.sigma.fill_(4.0)
    x = transforms.test(stream.test_x[:5])
    f = method.net.forward_features(x)
    weight = torch.cat(list(method.head.weights))
    expected = 4.0 * F.normalize(f, dim=1) @ F.normalize(weight, dim=1).T
    torch.testing.assert_close(method.predict(x), expected)

    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    chosen = {id(p) for p in method.optimizer_parameters()}
    assert id(method.head.weights[1]) in chosen
    assert id(method.head.sigma) in chosen
    assert id(method.head.weights[0]) not in chosen
    assert id(method.head.weights[2]) not in chosen
    assert not {id(p) for p in method.net.classifier.parameters()} & chosen  # replaced classifier
    out = method.observe(batch(stream, transforms, 1))
    out.loss.backward()
    assert method.head.weights[0].grad is None  # old classes' weights are frozen
    assert method.head.weights[1].grad is not None
    assert set(out.groups) == {"stream", "buffer"}
    torch.testing.assert_close(out.groups["stream"] + out.groups["buffer"], out.loss)


def test_class_balanced_fitting_changes_only_the_current_weights_and_sigma(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = make("lucir", stream, transforms, tiny_net, setting_of, batchnorm=True, epochs_fitting=3)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    net_before = {k: v.clone() for k, v in method.net.state_dict().items()}
    head_before = [p.detach().clone() for p in (*method.head.weights, method.head.sigma)]
    method.end_task(1, task_data(stream, 1))
    for key, value in method.net.state_dict().items():  # backbone and BN statistics unchanged
        assert torch.equal(value, net_before[key])
    w0, w1, w2, sigma = head_before
    assert torch.equal(method.head.weights[0], w0)
    assert torch.equal(method.head.weights[2], w2)
    assert not torch.equal(method.head.weights[1], w1)
    assert not torch.equal(method.head.sigma, sigma)


def test_lucir_step_loss_is_scaled_ce_plus_less_forget_plus_margin_ranking(
    stream, transforms, tiny_net, setting_of
) -> None:
    """A task-1 step's loss recomputed here from its definition: cross-entropy of sigma times the
    cosines over the seen classes, plus ``lambda_base * sqrt(1)`` times the mean of
    ``1 - cos(f, f_teacher)``, plus the hinge ``max(0, m - g + n_j)`` over each old item's top-k
    new-class cosines, averaged over the pairs (written out item by item)."""
    method = make("lucir", stream, transforms, tiny_net, setting_of, epochs_fitting=0, margin=0.5)
    method.end_task(0, task_data(stream, 0))
    method.begin_task(1)
    with torch.no_grad():
        method.head.sigma.fill_(3.0)
        method.net.body[1].weight.add_(0.3)  # the student drifts from its teacher
    b = batch(stream, transforms, 1)
    state = method.generator.get_state()
    out = method.observe(b)

    g = torch.Generator()
    g.set_state(state)
    sample = method.buffer.sample(4, g)
    x = torch.cat([b.x, transforms.train(sample.examples, g)])
    y = torch.cat([b.y, sample.labels])
    with torch.no_grad():
        f = method.net.forward_features(x)
        weights = torch.cat([w.detach() for w in method.head.weights])[:4]  # after imprinting
        cos = F.normalize(f, dim=1) @ F.normalize(weights, dim=1).T
        ce = F.cross_entropy(3.0 * cos, y)
        less_forget = 5.0 * (1 - F.cosine_similarity(f, method.teacher.forward_features(x), dim=1)).mean()
        hinges = []
        for i in range(y.shape[0]):
            if y[i] < 2:
                for negative in cos[i, 2:4].topk(2).values:
                    hinges.append(max(0.0, 0.5 - float(cos[i, y[i]]) + float(negative)))
        ranking = sum(hinges) / len(hinges)
    assert len(hinges) == 8
    assert ranking > 0
    assert float(less_forget) > 0
    torch.testing.assert_close(out.loss.detach(), ce + less_forget + ranking)


def test_lucir_fine_tuning_follows_the_authors_schedule_and_weight_decay(
    stream, transforms, tiny_net, setting_of
) -> None:
    """The class-balanced fine-tuning replayed here from the same draws: 15 batches (3 epochs of
    a 10-item memory in batches of 2), lr 0.01 for the first 10 and 0.001 after (the authors'
    per-batch MultiStepLR([10])), weight decay and momentum of the table, loss ``CE(sigma cos) +
    ranking``: the same current-task weights and sigma."""
    method = make(
        "lucir", stream, transforms, tiny_net, setting_of, epochs_fitting=3, fitting_batch_size=2,
        weight_decay_fitting=0.01,
    )  # fmt: skip
    method.end_task(0, task_data(stream, 0))  # its own fine-tuning included
    method.begin_task(1)
    weights = [w.detach().clone() for w in method.head.weights]
    sigma = method.head.sigma.detach().clone().requires_grad_(True)
    weights[1].requires_grad_(True)
    state = method.generator.get_state()
    method.fit_classifier(1)

    g = torch.Generator()
    g.set_state(state)
    items = method.buffer.all()
    optimizer = torch.optim.SGD([weights[1], sigma], lr=0.01, momentum=0.9, weight_decay=0.01)
    lrs = [0.01] * 10 + [0.001] * 5
    steps = 0
    for _ in range(3):
        for rows in shuffled_batches(10, 2, drop_last=False, generator=g, device=items.labels.device):
            with torch.no_grad():
                f = method.net.forward_features(transforms.train(items.examples[rows], g))
            cos = F.normalize(f, dim=1) @ F.normalize(torch.cat(weights)[:4], dim=1).T
            labels = items.labels[rows]
            loss = F.cross_entropy(sigma * cos, labels) + margin_ranking_loss(
                cos, labels, num_old=2, k=2, margin=0.5
            )
            for group in optimizer.param_groups:
                group["lr"] = lrs[steps]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
    assert steps == 15
    torch.testing.assert_close(method.head.weights[1], weights[1].detach())
    torch.testing.assert_close(method.head.sigma, sigma.detach())
    assert fitting_learning_rate(9, 0.01, (10,), 0.1) == 0.01
    assert fitting_learning_rate(10, 0.01, (10,), 0.1) == pytest.approx(0.001)
    assert fitting_learning_rate(25, 0.01, (), 0.1) == 0.01


def test_lucir_config_validation() -> None:
    cls = method_config_class("lucir")
    assert (cls().lambda_base, cls().k, cls().margin, cls().epochs_fitting, cls().lr_fitting) == (
        5.0,
        2,
        0.5,
        20,
        0.01,
    )
    with pytest.raises(MethodConfigError, match=r"method\.k"):
        cls(k=0)


# ------------------------------------------------------------------------ state and resume


@pytest.mark.parametrize("name", ["lwf_mc", "icarl", "lucir"])
def test_state_dict_round_trips_teacher_means_and_head(
    name, stream, transforms, tiny_net, setting_of
) -> None:
    method = make(name, stream, transforms, tiny_net, setting_of, batchnorm=True)
    fit(method, stream, TrainingSchedule(epochs=1, batch_size=8, lr=0.05), generator=torch.Generator())
    state = method.state_dict()
    assert any(k.startswith("teacher.") for k in state)
    if name == "icarl":
        assert {"class_means", "has_mean"} <= set(state)
    if name == "lucir":
        assert {"head.sigma", "head.weights.0", "imprinted"} <= set(state)
    clone = make(name, stream, transforms, tiny_net, setting_of, batchnorm=True, seed=5)
    clone.load_state_dict(state)
    for key, value in clone.state_dict().items():
        if isinstance(value, Tensor):
            assert torch.equal(value, state[key]), key
        else:  # extra state (current task, buffer size)
            assert value == state[key], key
    method.eval()
    clone.eval()
    x = transforms.test(stream.test_x)
    torch.testing.assert_close(clone.predict(x), method.predict(x))


@pytest.mark.parametrize("name", ["lwf_mc", "icarl", "lucir"])
@pytest.mark.parametrize("stop_after", [2, 3])  # at a task's end and mid-task (2 epochs per task)
def test_resume_equals_uninterrupted(
    name, stop_after, stream, transforms, tiny_net, setting_of, snapshot_after
) -> None:
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9)
    extra = {"epochs_fitting": 2} if name == "lucir" else {}
    method = make(name, stream, transforms, tiny_net, setting_of, batchnorm=True, **extra)
    full = fit(method, stream, schedule, generator=method.generator)

    method = make(name, stream, transforms, tiny_net, setting_of, batchnorm=True, **extra)
    snapshot = snapshot_after(method, stream, schedule, method.generator, stop_after)
    torch.manual_seed(123)
    method = make(name, stream, transforms, tiny_net, setting_of, batchnorm=True, seed=99, **extra)
    resumed = fit(method, stream, schedule, generator=method.generator, resume=snapshot)
    assert resumed.class_il == full.class_il
    assert resumed.task_il == full.task_il
