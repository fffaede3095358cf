"""What makes each method that method, plus registry-wide checks every method must pass."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xder_methods import (
    ER,
    PROTOCOL_METHOD_FIELDS,
    Batch,
    Callback,
    ContinualSetting,
    MethodBase,
    MethodConfig,
    MethodConfigError,
    ReplayConfig,
    TaskData,
    TrainingSchedule,
    Transforms,
    UnknownMethodError,
    check_protocol_fields,
    create_method,
    fit,
    list_methods,
    method_config_class,
    protocol_fields,
    protocol_values,
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
    name, stream, transforms, tiny_net, setting_of, stream_for
) -> None:
    stream = stream_for(name, stream)

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
    name, stop_after, stream, transforms, tiny_net, setting_of, snapshot_after, stream_for
) -> None:
    """Fit interrupted after ``stop_after`` epochs (what a checkpoint holds), then resumed by a
    fresh method in a process whose global random state differs: the same accuracy matrices as an
    uninterrupted fit. BatchNorm (running statistics) and momentum (optimiser state) included, so
    everything a method keeps (buffers, teachers, importances, anchors) must be in its state."""
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9)
    stream = stream_for(name, stream)

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
    if "buffer_size" in protocol_fields(cls):
        message = r"^method\.buffer_size must be >= 0, got -1 \(e\.g\. 200\)$"
        with pytest.raises(MethodConfigError, match=message):
            cls(buffer_size=-1)
    if "minibatch_size" in protocol_fields(cls):
        with pytest.raises(MethodConfigError, match=r"^method\.minibatch_size must be >= 1, got 0$"):
            cls(minibatch_size=0)


REPLAY = ("buffer_size", "minibatch_size")
PROTOCOL_FILLED = {
    "agem": REPLAY, "agem_r": REPLAY, "bic": REPLAY, "der": REPLAY, "derpp": REPLAY, "derpp_ace": REPLAY,
    "er": REPLAY, "er_ace": REPLAY, "er_flat": REPLAY, "fdr": REPLAY, "gem": REPLAY, "gss": REPLAY,
    "hal": REPLAY, "icarl": REPLAY, "lucir": REPLAY, "mer": REPLAY, "rpc": REPLAY, "xder": REPLAY,
    "gdumb": ("buffer_size",),  # its own fitting batch is not the protocol's replay batch
    "ewc_on": (), "joint": (), "lwf": (), "lwf_mc": (), "pnn": (), "sgd": (), "si": (),
}  # fmt: skip
"""Which method fields a benchmark's protocol fills, per method, pinned: a change to a config's
declaration (``FILLED_BY_PROTOCOL``) is a visible change here."""


def test_each_config_declares_the_fields_the_protocol_fills() -> None:
    assert {name: protocol_fields(method_config_class(name)) for name in list_methods()} == PROTOCOL_FILLED
    for name, filled in PROTOCOL_FILLED.items():
        config = method_config_class(name)()
        assert protocol_fields(config) == filled  # an instance reads as its class
        assert set(protocol_values(config)) == set(filled)
    assert protocol_values(method_config_class("er")(buffer_size=7, minibatch_size=3)) == {
        "buffer_size": 7,
        "minibatch_size": 3,
    }


def test_a_wrong_declaration_is_refused() -> None:
    """A declared name the protocol does not fill, or one the config has no field of, is a
    mistake in the method's code: TypeError, whatever the values."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Unfillable(MethodConfig):
        FILLED_BY_PROTOCOL = ("buffer_size", "alpha")
        buffer_size: int = 10
        alpha: float = 0.1

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Missing(MethodConfig):
        FILLED_BY_PROTOCOL = ("minibatch_size",)
        buffer_size: int = 10

    with pytest.raises(TypeError, match=r"Unfillable\.FILLED_BY_PROTOCOL names 'alpha'"):
        protocol_fields(Unfillable)
    with pytest.raises(TypeError, match=r"Missing\.FILLED_BY_PROTOCOL names 'minibatch_size'"):
        check_protocol_fields(Missing())
    assert set(PROTOCOL_METHOD_FIELDS) == {"buffer_size", "minibatch_size"}


def test_only_a_method_config_declares_protocol_fields() -> None:
    """The declaration is MethodConfig's: a dataclass that does not subclass it takes nothing from
    the protocol, even with a class variable of that name; a subclass inherits its base's."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Plain:
        FILLED_BY_PROTOCOL: ClassVar[tuple[str, ...]] = ("buffer_size",)
        buffer_size: int = 10

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Declared(MethodConfig):
        FILLED_BY_PROTOCOL = ("buffer_size",)
        buffer_size: int = 10

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Inherited(Declared):
        beta: float = 0.5

    assert protocol_fields(Plain) == ()
    assert protocol_fields(Declared) == ("buffer_size",)
    assert protocol_fields(Inherited(buffer_size=3)) == ("buffer_size",)


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


class LookupNet(nn.Module):
    """Returns ``table[id]`` for an example whose first pixel is ``id / 255``: every output of a step
    is known in advance."""

    def __init__(self, table: Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table.clone())

    def forward(self, x: Tensor) -> Tensor:
        return self.table[(x[:, 0, 0, 0] * 255).round().long()]


def exact(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """A transform without randomness (uint8 -> [0, 1])."""
    return x.float() / 255


def items(ids: list[int]) -> Tensor:
    x = torch.full((len(ids), 1, 2, 2), 7, dtype=torch.uint8)
    x[:, 0, 0, 0] = torch.tensor(ids, dtype=torch.uint8)
    return x


def cross_entropy(row: list[float], label: int) -> float:
    """Over every output (ER, DER and DER++ take it over all classes, future ones included)."""
    top = max(row)
    return top + math.log(sum(math.exp(v - top) for v in row)) - row[label]


STORED_LABELS = [0, 1, 1, 0]  # the buffer: items 0-3, of task 0
STREAM_LABELS = [2, 3, 2, 3, 3, 2]  # the stream batch: items 4-9, of task 1


@pytest.mark.parametrize(
    ("name", "config"), [("er", {}), ("der", {"alpha": 0.4}), ("derpp", {"alpha": 0.4, "beta": 0.7})]
)
def test_replay_step_against_float64_references(name, config) -> None:
    """A step of task 1 of ER, DER and DER++, every output planted (a lookup network, exact
    transforms) and the replay batch (4) taking every stored item, so that no value depends on a
    draw. ER: one cross-entropy over the 6 stream and 4 buffer items; its groups split that mean
    into the stream's and the buffer's shares. DER: the stream cross-entropy plus alpha x the mean
    squared error to the stored logits (over items and classes); DER++ adds beta x the buffer
    items' cross-entropy. Then the stream items enter the free rows 4-9 (reservoir: n < M), as they
    are, with task label 1 and (DER, DER++) their outputs; the stored items stay."""
    g = torch.Generator().manual_seed(7)
    table = 2.0 * torch.randn(10, 6, generator=g)
    stored = 2.0 * torch.randn(4, 6, generator=g)
    method = create_method(
        name,
        net=LookupNet(table),
        setting=ContinualSetting((2, 2, 2), (1, 2, 2)),
        transforms=Transforms(train=exact, test=exact),
        config=method_config_class(name)(buffer_size=10, minibatch_size=4, **config),
        generator=torch.Generator().manual_seed(0),
    )
    keeps_logits = method.buffer.logits is not None
    method.buffer.write(
        torch.arange(4), items([0, 1, 2, 3]), torch.tensor(STORED_LABELS), stored if keeps_logits else None, 0
    )
    method.buffer.set_size(4)
    method.buffer.num_seen = 4
    method.begin_task(1)
    x_raw = items(list(range(4, 10)))
    outputs, z = table.double().tolist(), stored.double().tolist()

    stream = [cross_entropy(outputs[4 + i], y) for i, y in enumerate(STREAM_LABELS)]
    replayed = [cross_entropy(outputs[j], y) for j, y in enumerate(STORED_LABELS)]
    if name == "er":
        ce = (sum(stream) + sum(replayed)) / 10
        expected = {"ce": ce}
        groups = {"stream": sum(stream) / 10, "buffer": sum(replayed) / 10}
    else:
        squares = [(outputs[j][k] - z[j][k]) ** 2 for j in range(4) for k in range(6)]
        expected = {"ce": sum(stream) / 6, "der": config["alpha"] * sum(squares) / 24}
        if name == "derpp":
            expected["buffer_ce"] = config["beta"] * sum(replayed) / 4
        groups = {"stream": expected["ce"], "buffer": sum(expected.values()) - expected["ce"]}

    out = method.observe(Batch(exact(x_raw), torch.tensor(STREAM_LABELS), x_raw, 1))

    assert set(out.terms) == set(expected)
    for term, value in expected.items():
        assert float(out.terms[term]) == pytest.approx(value, rel=1e-5), term
    assert float(out.loss.detach()) == pytest.approx(sum(expected.values()), rel=1e-5)
    assert set(out.groups) == set(groups)
    for group, value in groups.items():
        assert float(out.groups[group].detach()) == pytest.approx(value, rel=1e-5), group
    assert len(method.buffer) == method.buffer.num_seen == 10
    assert torch.equal(method.buffer.examples[:10], torch.cat([items([0, 1, 2, 3]), x_raw]))
    assert method.buffer.labels[:10].tolist() == STORED_LABELS + STREAM_LABELS
    assert method.buffer.task_labels[:10].tolist() == [0] * 4 + [1] * 6
    if keeps_logits:
        torch.testing.assert_close(method.buffer.logits[:4], stored)
        torch.testing.assert_close(method.buffer.logits[4:10], table[4:10])


@pytest.mark.parametrize("name", ["er", "der", "derpp"])
def test_replay_draws_come_from_the_methods_generator(name, stream, transforms, tiny_net, setting_of) -> None:
    """ "Every random draw goes through ``self.generator``" (MethodBase): runs with the same
    generator seed and different global seeds are identical, through prefill (24 rows offered to 5
    slots by reservoir sampling) and three steps of task 1 (the buffer draws, their augmented
    views, the stream's reservoir insertion into a full buffer). Another generator seed changes
    them, so that the draws show."""

    def run(generator_seed: int, global_seed: int) -> list[Tensor]:
        method = build(name, stream, transforms, tiny_net, setting_of, buffer_size=5, minibatch_size=3)
        method.generator = torch.Generator().manual_seed(generator_seed)
        torch.manual_seed(global_seed)
        rows = stream.task(0).train
        method.prefill(0, TaskData(stream.train_x[rows], stream.train_y[rows], 0))
        stages = [method.buffer.examples.clone()]
        method.begin_task(1)
        for _ in range(3):
            out = method.observe(batch_of(stream, transforms, 1))
            stages.extend(value.detach() for value in out.terms.values())
        return [*stages, method.buffer.examples, method.buffer.labels, method.buffer.task_labels]

    first, again, other = run(0, 1), run(0, 2), run(5, 1)
    assert len(first) == len(again) == len(other)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(first[0], other[0])  # prefill's reservoir
    assert any(
        not torch.equal(a, b) for a, b in zip(first[1:-3], other[1:-3], strict=True)
    )  # the steps' terms


def test_er_prefill_offers_the_rows_as_the_stream_would_then_ends_the_task(
    stream, transforms, tiny_net, setting_of
) -> None:
    """ER.prefill (``xder-run bench``): the task's rows go into the buffer as a stream of them would
    (24 rows and room for 30: rows 0-23 in order, unaugmented, with their labels and the task's
    label), then :meth:`end_task` runs with the task and its data, so that a subclass that keeps
    something at a task's end gets it."""

    class EndRecorder(ER):
        def end_task(self, task: int, data: TaskData) -> None:
            self.ended.append((task, data))

    method = EndRecorder(
        tiny_net(6),
        setting_of(stream),
        transforms,
        ReplayConfig(buffer_size=30),
        torch.Generator().manual_seed(0),
    )
    method.ended = []
    rows = stream.task(1).train
    data = TaskData(stream.train_x[rows], stream.train_y[rows], 1)
    method.prefill(1, data)
    assert method.ended == [(1, data)]
    assert len(method.buffer) == method.buffer.num_seen == 24
    assert torch.equal(method.buffer.examples[:24], data.x_raw)
    assert torch.equal(method.buffer.labels[:24], data.y)
    assert method.buffer.task_labels[:24].tolist() == [1] * 24


def test_der_prefill_stores_eval_mode_outputs_of_the_test_view(
    stream, transforms, tiny_net, setting_of
) -> None:
    """DER's buffer keeps logits: prefill stores, for each row it keeps, the network's output on the
    row's test view in eval mode (BatchNorm by its running statistics), the mode restored; with 5
    slots for 24 rows, 5 distinct rows of the data, all 24 counted as offered."""
    method = build(
        "der", stream, transforms, lambda n: tiny_net(n, batchnorm=True), setting_of, buffer_size=5
    )
    method.train()
    reference = copy.deepcopy(method.net).eval()
    rows = stream.task(0).train
    data = TaskData(stream.train_x[rows], stream.train_y[rows], 0)
    method.prefill(0, data)
    kept = method.buffer.all()
    assert len(method.buffer) == 5
    assert method.buffer.num_seen == 24
    found = [next(i for i in range(24) if torch.equal(x, data.x_raw[i])) for x in kept.examples]
    assert len(set(found)) == 5
    assert kept.labels.tolist() == data.y[found].tolist()
    assert kept.task_labels.tolist() == [0] * 5
    with torch.no_grad():
        torch.testing.assert_close(kept.logits, reference(transforms.test(kept.examples)))
    assert method.net.training


def test_check_settings_raises_the_first_failed_check() -> None:
    from xder_methods import MethodConfigError, check_settings

    check_settings([(True, "a"), (True, "b")])  # all pass: nothing raised
    with pytest.raises(MethodConfigError, match=r"^train: b$"):
        check_settings([(True, "a"), (False, "b"), (False, "c")], prefix="train: ")
