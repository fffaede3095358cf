"""What makes each method that method, plus registry-wide checks every method must pass."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from xder_methods import (
    Batch,
    Callback,
    MethodBase,
    MethodConfigError,
    TrainingSchedule,
    UnknownMethodError,
    create_method,
    fit,
    list_methods,
    method_config_class,
    register_method,
)


def build(name, stream, transforms, tiny_net, setting_of, **config):
    torch.manual_seed(0)
    cls = method_config_class(name)
    fields = {f.name for f in dataclasses.fields(cls)}
    defaults = {"buffer_size": 10, "minibatch_size": 4}
    config = {k: v for k, v in defaults.items() if k in fields} | config
    return create_method(
        name,
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=cls(**config),
        generator=torch.Generator().manual_seed(0),
    )


def batch_of(stream, transforms, task, n=6):
    rows = stream.task(task).train[:n]
    x_raw = stream.train_x[rows]
    return Batch(transforms.train(x_raw, torch.Generator()), stream.train_y[rows], x_raw, task)


class CountInputs(nn.Module):
    """Wraps a net and records the batch size of every forward call."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.sizes: list[int] = []
        self.num_features = net.num_features

    def forward(self, x):
        self.sizes.append(x.shape[0])
        return self.net(x)


# --------------------------------------------------------------------------------- every method


@pytest.mark.parametrize("name", list_methods())
def test_every_method_trains_evaluates_and_round_trips(
    name, stream, transforms, tiny_net, setting_of
) -> None:
    def at_chance(num_classes: int) -> nn.Module:
        """TinyNet seed 1: untrained, it gives every test item of task 0 the same class (50%)."""
        torch.manual_seed(1)
        return tiny_net(num_classes)

    method = build(name, stream, transforms, at_chance, setting_of)
    history = fit(
        method,
        stream,
        TrainingSchedule(epochs=6, batch_size=8, lr=0.1),
        generator=torch.Generator(),
    )
    assert [len(row) for row in history.class_il] == [1, 2, 3]
    # Exact counts: each task has 6 test items per class x 2 classes, so every accuracy is k/12.
    for row in (*history.class_il, *history.task_il):
        assert all(a * 12 / 100 == pytest.approx(round(a * 12 / 100), abs=1e-9) for a in row), row
    # Chance on task 0 (two classes seen) is 50%, and the untrained net is right there; trained, it
    # is at least 9 of 12 (18 steps on task 0). JT trains nothing before the last task: its first
    # row is the untrained net's, and task 0 is judged after the last task (over all 6 classes).
    assert history.random_init_task_il[0] == 50.0
    trained = history.class_il[-1 if name == "joint" else 0][0]
    assert trained >= 75.0, history.class_il
    if name == "joint":
        assert history.class_il[0] == [50.0]
    clone = build(name, stream, transforms, at_chance, setting_of)
    clone.load_state_dict(method.state_dict())
    x = transforms.test(stream.test_x)
    method.eval()
    clone.eval()
    torch.testing.assert_close(clone.predict(x), method.predict(x))
    assert clone.current_task == method.current_task == 2


@pytest.mark.parametrize("name", list_methods())
@pytest.mark.parametrize("stop_after", [2, 3])  # a task boundary and mid-task (2 epochs per task)
def test_every_method_resumes_to_the_uninterrupted_run(
    name, stop_after, stream, transforms, tiny_net, setting_of, snapshot_after
) -> None:
    """Fit interrupted after ``stop_after`` epochs (what a checkpoint holds), then resumed by a
    fresh method in a process whose global random state differs: the same accuracy matrices as an
    uninterrupted fit. BatchNorm (running statistics) and momentum (optimiser state) included, so
    everything a method keeps (buffers, teachers, importances, anchors) must be in its state."""
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9)

    def fresh(seed: int = 0):
        method = build(name, stream, transforms, lambda n: tiny_net(n, batchnorm=True), setting_of)
        generator = torch.Generator().manual_seed(seed)
        method.generator = generator
        return method, generator

    method, g = fresh()
    full = fit(method, stream, schedule, generator=g)
    method, g = fresh()
    snapshot = snapshot_after(method, stream, schedule, g, stop_after)
    torch.manual_seed(123)
    method, g = fresh(seed=99)
    resumed = fit(method, stream, schedule, generator=g, resume=snapshot)
    assert (resumed.class_il, resumed.task_il) == (full.class_il, full.task_il)


@pytest.mark.parametrize("name", list_methods())
def test_every_config_documents_paper_defaults_and_is_frozen(name) -> None:
    cls = method_config_class(name)
    config = cls()
    assert dataclasses.is_dataclass(config)
    assert cls.__dataclass_params__.frozen
    if "buffer_size" in {f.name for f in dataclasses.fields(cls)}:
        with pytest.raises(MethodConfigError, match=r"^method\.buffer_size must be >= 0, got -1"):
            cls(buffer_size=-1)


def test_a_new_method_is_at_task_zero_without_an_optimiser(stream, transforms, tiny_net, setting_of) -> None:
    """MethodBase's starting state: task 0 (seen classes: task 0's 2 of the 2 + 2 + 2), no
    optimiser until the loop sets one (step() says so); begin_task moves seen_classes() on, and
    seen_classes(t) counts up to any task t."""
    method = MethodBase(tiny_net(6), setting_of(stream), transforms, None)
    assert method.current_task == 0
    assert method.seen_classes() == 2
    assert method.get_extra_state() == {"current_task": 0}
    assert method.optimizer is None
    with pytest.raises(RuntimeError, match="before the loop set the optimiser"):
        method.step(torch.zeros(()))
    method.begin_task(1)
    assert method.seen_classes() == 4
    assert (method.seen_classes(0), method.seen_classes(2)) == (2, 6)


def test_registry_rejects_duplicates_and_names_choices() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_method("er", method_config_class("er"))(object)
    with pytest.raises(UnknownMethodError, match="derpp"):
        method_config_class("nope")


# ----------------------------------------------------------------------------------------- FT


def test_sgd_leaves_unseen_heads_untouched(stream, transforms, tiny_net, setting_of) -> None:
    method = build("sgd", stream, transforms, tiny_net, setting_of)
    method.begin_task(0)
    out = method.observe(batch_of(stream, transforms, 0))
    out.loss.backward()
    grad = method.net.classifier.weight.grad
    assert torch.count_nonzero(grad[2:]) == 0  # classes of tasks 1 and 2 are not yet seen
    assert torch.count_nonzero(grad[:2]) > 0


# ---------------------------------------------------------------------------------------- JT


def rows_trained_on(method, stream, epochs: int = 2) -> list[list[list[int]]]:
    """Fits ``method`` and returns, per task and epoch, the sorted stream rows of all its training
    batches. Pixel (0, 0) of every training image is first overwritten with the image's row index
    (the 72 rows fit in a uint8), so each batch names its rows; each row's label is checked too."""
    stream.train_x[:, 0, 0, 0] = torch.arange(stream.train_x.shape[0])
    rows: list[list[list[int]]] = []
    current: list[int] = []
    observe = method.observe

    def spy(batch):
        index = batch.x_raw[:, 0, 0, 0].long()
        assert torch.equal(batch.y, index // 12)  # make_stream: 12 rows per class, class by class
        current.extend(index.tolist())
        return observe(batch)

    method.observe = spy  # type: ignore[method-assign]

    class PerEpoch(Callback):
        def on_task_start(self, loop) -> None:
            rows.append([])

        def on_epoch_end(self, loop, record) -> None:
            rows[-1].append(sorted(current))
            current.clear()

    fit(
        method,
        stream,
        TrainingSchedule(epochs=epochs, batch_size=8, lr=0.05),
        generator=torch.Generator(),
        callbacks=[PerEpoch()],
    )
    return rows


def test_joint_final_trains_only_at_the_last_task_on_everything(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = build("joint", stream, transforms, tiny_net, setting_of)
    # Tasks hold rows 0-23, 24-47, 48-71; every epoch of the last task covers all 72 rows once.
    assert rows_trained_on(method, stream) == [[[], []], [[], []], [list(range(72))] * 2]


def test_joint_cumulative_trains_on_every_task_so_far(stream, transforms, tiny_net, setting_of) -> None:
    method = build("joint", stream, transforms, tiny_net, setting_of, mode="cumulative")
    # Task t: the 24 rows of each of tasks 0..t, each once per epoch (batches of 8: none dropped).
    assert rows_trained_on(method, stream) == [
        [list(range(24))] * 2,
        [list(range(48))] * 2,
        [list(range(72))] * 2,
    ]
    with pytest.raises(MethodConfigError):
        method_config_class("joint")(mode="sometimes")


# ---------------------------------------------------------------------------------------- ER


def test_er_replays_a_buffer_batch_and_stores_raw_stream_examples(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = build("er", stream, transforms, tiny_net, setting_of, buffer_size=10, minibatch_size=4)
    method.net = CountInputs(method.net)
    batch = batch_of(stream, transforms, 0, n=6)
    method.observe(batch)  # empty buffer: stream only, then 6 items stored
    assert method.net.sizes == [6]
    assert len(method.buffer) == 6
    assert torch.equal(method.buffer.examples[:6], batch.x_raw)  # unaugmented
    assert method.buffer.task_labels[:6].tolist() == [0] * 6
    method.observe(batch)
    assert method.net.sizes == [6, 10]  # one forward over 6 stream + 4 buffer items


# --------------------------------------------------------------------------------- DER / DER++


def test_der_stores_the_logits_of_the_augmented_stream_view(stream, transforms, tiny_net, setting_of) -> None:
    method = build("der", stream, transforms, tiny_net, setting_of, buffer_size=10)
    batch = batch_of(stream, transforms, 0, n=6)
    with torch.no_grad():
        expected = method.net(batch.x)
    method.observe(batch)
    torch.testing.assert_close(method.buffer.logits[:6], expected)
    assert method.buffer.logits.shape[1] == 6  # every class, future ones included


def test_der_term_is_alpha_times_mse_to_stored_logits(stream, transforms, tiny_net, setting_of) -> None:
    # Capacity 20: the second step's insertions go to fresh rows 6..11, so the six items the
    # replay drew from stay in rows 0..5 and the draw can be repeated afterwards.
    method = build(
        "der", stream, transforms, tiny_net, setting_of, buffer_size=20, minibatch_size=6, alpha=0.7
    )
    method.observe(batch_of(stream, transforms, 0, n=6))
    method.buffer.update_logits(torch.arange(6), torch.zeros(6, 6))
    generator = method.generator
    state = generator.get_state()
    out = method.observe(batch_of(stream, transforms, 0, n=6))
    generator.set_state(state)
    rows = torch.randperm(6, generator=generator)
    replayed = method.net(transforms.train(method.buffer.examples[rows], generator))
    torch.testing.assert_close(out.terms["der"], 0.7 * replayed.pow(2).mean().detach())
    assert set(out.terms) == {"ce", "der"}


def test_derpp_adds_beta_times_buffer_cross_entropy(stream, transforms, tiny_net, setting_of) -> None:
    method = build(
        "derpp",
        stream,
        transforms,
        tiny_net,
        setting_of,
        buffer_size=20,
        minibatch_size=6,
        alpha=0.0,
        beta=2.0,
    )
    method.observe(batch_of(stream, transforms, 0, n=6))
    generator = method.generator
    state = generator.get_state()
    out = method.observe(batch_of(stream, transforms, 0, n=6))
    generator.set_state(state)
    first = torch.randperm(6, generator=generator)  # DER's draw and its augmentation
    transforms.train(method.buffer.examples[first], generator)
    second = torch.randperm(6, generator=generator)
    logits = method.net(transforms.train(method.buffer.examples[second], generator))
    expected = 2.0 * F.cross_entropy(logits, method.buffer.labels[second])
    torch.testing.assert_close(out.terms["buffer_ce"], expected.detach())
    assert float(out.terms["der"]) == 0.0


def test_check_settings_raises_the_first_failed_check() -> None:
    from xder_methods import MethodConfigError, check_settings

    check_settings([(True, "a"), (True, "b")])  # all pass: nothing raised
    with pytest.raises(MethodConfigError, match=r"^train: b$"):
        check_settings([(True, "a"), (False, "b"), (False, "c")], prefix="train: ")
