"""The training loop: schedules, batching, evaluation by hand, callbacks, resume, NaN guard."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest
import torch
from torch import Tensor, nn

from xder_methods import (
    Callback,
    ContinualSetting,
    MethodBase,
    MethodConfigError,
    NonFiniteLossError,
    StepOutput,
    TrainingSchedule,
    autocast,
    batch_bounds,
    create_method,
    evaluate,
    fit,
    learning_rate,
    shuffled_batches,
)


def test_multistep_matches_torch_scheduler() -> None:
    schedule = TrainingSchedule(
        epochs=50, lr=0.03, lr_schedule="multistep", milestones=(35, 45), lr_gamma=0.1
    )
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.03)
    torch_schedule = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[35, 45], gamma=0.1)
    for epoch in range(50):
        assert learning_rate(schedule, epoch) == pytest.approx(opt.param_groups[0]["lr"])
        opt.step()
        torch_schedule.step()


def test_fractional_milestones_per_step_by_hand() -> None:
    """Milestones at 70% and 90% of a 2-epoch task (1.4, 1.8), 10 steps per epoch: the lr of step
    s of epoch e counts the milestones m <= e + s / 10."""
    schedule = TrainingSchedule(epochs=2, lr=0.03, lr_schedule="multistep", milestones=(1.4, 1.8))
    got = [learning_rate(schedule, epoch, step, 10) for epoch in range(2) for step in range(10)]
    expected = [0.03] * 10  # epoch 0: no milestone reached
    expected += [0.03] * 4  # epoch 1, steps 0-3: positions 1.0 .. 1.3
    expected += [0.003] * 4  # steps 4-7: 1.4 .. 1.7, past 1.4
    expected += [0.0003] * 2  # steps 8-9: 1.8, 1.9, past 1.8
    assert got == pytest.approx(expected, rel=1e-12)
    assert learning_rate(schedule, 1) == 0.03  # the epoch's first step, as before steps were counted
    # A milestone on a step boundary takes effect at that step: 1 + 9/25 == 1.36 exactly, although
    # in floats 1 + 9 / 25 < 1.36.
    late = TrainingSchedule(epochs=2, lr=1.0, lr_schedule="multistep", milestones=(1.36,))
    assert [learning_rate(late, 1, step, 25) for step in (8, 9)] == [1.0, pytest.approx(0.1)]


def test_integer_milestones_per_step_match_torch_and_the_per_epoch_rule() -> None:
    """With integer milestones every step of an epoch has the epoch's lr: the same as MultiStepLR
    stepped once per epoch, and exactly the per-epoch rule (lr * gamma ** #{m <= epoch})."""
    schedule = TrainingSchedule(
        epochs=50, lr=0.03, lr_schedule="multistep", milestones=(35, 45), lr_gamma=0.1
    )
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.03)
    torch_schedule = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[35, 45], gamma=0.1)
    steps = 7
    for epoch in range(50):
        per_epoch = 0.03 * 0.1 ** sum(1 for m in (35, 45) if m <= epoch)
        for step in range(steps):
            lr = learning_rate(schedule, epoch, step, steps)
            assert lr == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12), (epoch, step)
            assert lr == per_epoch, (epoch, step)  # bit for bit: earlier runs are unchanged
        opt.step()
        torch_schedule.step()


def test_cosine_with_warmup_by_hand() -> None:
    schedule = TrainingSchedule(epochs=10, lr=0.1, lr_schedule="cosine", warmup_epochs=2)
    assert learning_rate(schedule, 0) == pytest.approx(0.05)
    assert learning_rate(schedule, 1) == pytest.approx(0.1)
    assert learning_rate(schedule, 2) == pytest.approx(0.1)  # cos(0)
    assert learning_rate(schedule, 6) == pytest.approx(0.05)  # half way: (1 + cos(pi/2)) / 2
    assert learning_rate(TrainingSchedule(lr=0.2), 7) == 0.2


def test_whole_float_milestones_follow_the_per_epoch_rule_past_float_precision() -> None:
    """A float milestone that is a whole number acts as that integer, as MultiStepLR's per-epoch
    rule (``m <= epoch``, compared exactly) takes it, at every step of the epoch, even past 2**53
    where its shortest decimal is another integer: 2.0**60 prints as 1.152921504606847e+18, 24 above
    it, and 2.0**65 as 3.6893488147419103e+19, 232 below it."""
    milestones = (2.0**60, 2.0**65)
    schedule = TrainingSchedule(
        epochs=2**66, lr=1.0, lr_schedule="multistep", milestones=milestones, lr_gamma=0.5
    )
    for epoch in (2**60 - 1, 2**60, 2**65 - 1, 2**65):
        per_epoch = 0.5 ** sum(1 for m in milestones if m <= epoch)  # 1, .5, .5, .25: exact in floats
        assert [learning_rate(schedule, epoch, step, 10) for step in (0, 9)] == [per_epoch] * 2, epoch


def test_lr_changes_inside_an_epoch_only() -> None:
    """_lr_changes lists the steps after an epoch's first where a fractional milestone takes effect,
    with the lr from there (gamma .5). At 10 steps per epoch, in epoch 1: milestone 1 acts at the
    epoch's start (the lr of its step 0), not inside; 1.5 at step 5 (lr 1 * .5 * .5); 1.95 would
    act at step 9.5, after the last step (1.9): not in this epoch. 2.0**65 is a whole number, never
    inside an epoch, although its shortest decimal is 232 below it (within epoch 2**65 - 1)."""
    from xder_methods.core.schedule import _lr_changes

    schedule = TrainingSchedule(
        epochs=3, lr=1.0, lr_schedule="multistep", milestones=(1, 1.5, 1.95), lr_gamma=0.5
    )
    assert _lr_changes(schedule, 1, 10) == {5: 0.25}
    assert _lr_changes(schedule, 0, 10) == {}
    assert _lr_changes(schedule, 1, 20) == {10: 0.25, 19: 0.125}  # 1.95 at step 19 of 20
    huge = TrainingSchedule(epochs=2**66, lr_schedule="multistep", milestones=(2.0**65,))
    assert _lr_changes(huge, 2**65 - 1, 10) == {}


def test_a_milestone_reads_as_written() -> None:
    """A float milestone is its shortest decimal (1.4 is 7/5, not the binary 1.399999999999999911...),
    an int exactly, even past float precision (2**53 + 1 has no float: float() gives 2**53)."""
    from xder_methods.core.schedule import _written

    assert _written(1.4) == Fraction(7, 5)
    assert _written(3) == 3
    assert _written(2**53 + 1) == 2**53 + 1


def test_batch_bounds() -> None:
    assert batch_bounds(10, 4, drop_last=True) == [(0, 4), (4, 8)]
    assert batch_bounds(3, 4, drop_last=True) == [(0, 3)]  # the only batch stays
    assert batch_bounds(0, 4, drop_last=True) == []
    assert batch_bounds(10, 4, drop_last=False) == [(0, 4), (4, 8), (8, 10)]
    assert batch_bounds(9, 4, drop_last=False) == [(0, 4), (4, 9)]  # a last batch of one joins
    assert batch_bounds(1, 4, drop_last=False) == [(0, 1)]
    # With two batches only: the partial one is dropped, or a single row joins the first.
    assert batch_bounds(6, 4, drop_last=True) == [(0, 4)]
    assert batch_bounds(5, 4, drop_last=False) == [(0, 5)]


def test_shuffled_batches_cut_one_permutation_and_draw_it_before_the_first_batch() -> None:
    cpu = torch.device("cpu")
    generator = torch.Generator().manual_seed(5)
    batches = shuffled_batches(9, 4, drop_last=False, generator=generator, device=cpu)
    untouched = generator.get_state()
    first = next(batches)
    # Drawn when the first batch is asked for: a draw made now (augmentation) comes after it.
    assert not torch.equal(generator.get_state(), untouched)
    after = torch.rand(1, generator=generator)
    rest = list(batches)
    expected = torch.randperm(9, generator=torch.Generator().manual_seed(5))
    assert [b.tolist() for b in [first, *rest]] == [expected[:4].tolist(), expected[4:].tolist()]
    reference = torch.Generator().manual_seed(5)
    torch.randperm(9, generator=reference)
    assert torch.equal(after, torch.rand(1, generator=reference))
    # drop_last drops the partial batch; no rows, no batch.
    dropped = list(shuffled_batches(9, 4, drop_last=True, generator=generator, device=cpu))
    assert [b.shape[0] for b in dropped] == [4, 4]
    assert list(shuffled_batches(0, 4, drop_last=False, generator=generator, device=cpu)) == []


def test_shuffled_batches_on_the_given_device() -> None:
    """The permutation is drawn on ``device``: every batch is there (the meta device: no data)."""
    meta = torch.device("meta")
    batches = list(shuffled_batches(9, 4, drop_last=False, generator=None, device=meta))
    assert [(b.device, b.shape[0]) for b in batches] == [(meta, 4), (meta, 5)]


def test_autocast_is_bf16_on_the_device_for_bf16_only() -> None:
    """bf16 autocast on the device's type, whatever torch's default autocast dtype for it (CUDA's is
    float16; set so here for the CPU), keeping the weights' casts unless told not to; fp32: none."""
    a = torch.ones(2, 2)
    default_dtype = torch.get_autocast_dtype("cpu")
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        with autocast("bf16", torch.device("cpu")):
            assert (a @ a).dtype == torch.bfloat16
            assert torch.is_autocast_cache_enabled()
        with autocast("bf16", torch.device("cpu"), cache=False):
            assert (a @ a).dtype == torch.bfloat16
            assert not torch.is_autocast_cache_enabled()
    finally:
        torch.set_autocast_dtype("cpu", default_dtype)
    with autocast("fp32", torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")
        assert (a @ a).dtype == torch.float32


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"epochs": 0}, "epochs must be >= 1 (with none, a task trains nothing)"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"lr": 0}, "lr must be > 0"),
        ({"momentum": -0.1}, "momentum must be >= 0"),
        ({"weight_decay": -1e-4}, "weight_decay must be >= 0"),
        ({"warmup_epochs": -1}, "warmup_epochs must be >= 0"),
        ({"lr_schedule": "step"}, "lr_schedule must be none, multistep or cosine"),
        ({"optimizer": "adam"}, "optimizer must be sgd or radam"),
        ({"milestones": (0, 1)}, "milestones must be > 0 (positions within the task, in epochs)"),
        ({"milestones": (-0.5,)}, "milestones must be > 0 (positions within the task, in epochs)"),
        ({"milestones": (math.inf,)}, "milestones must be > 0 (positions within the task, in epochs)"),
        ({"milestones": (math.nan,)}, "milestones must be > 0 (positions within the task, in epochs)"),
        ({"milestones": (1.8, 1.4)}, "milestones must be increasing"),
        ({"eval_batch_size": 0}, "eval_batch_size must be >= 1"),
        ({"record_every": -1}, "record_every must be >= 0"),
        ({"precision": "fp16"}, "precision must be fp32 or bf16"),
        ({"class_il_outputs": "none"}, "class_il_outputs must be seen or all"),
        ({"compile_mode": "max-autotune"}, "compile_mode must be default or reduce-overhead"),
        ({"step_graph": True, "compile": True}, "step_graph records eager steps: leave compile off with it"),
        (
            {"step_graph": True, "optimizer": "radam"},
            "step_graph records SGD's step only (radam keeps a step count on the host)",
        ),
        ({"tasks": 0}, "tasks must be >= 1 (or unset: every task)"),
    ],
)
def test_schedule_validation_says_what_is_wrong(settings, message) -> None:
    """Each setting out of range is refused with its own message, prefixed by the section."""
    with pytest.raises(MethodConfigError, match=f"^{re.escape('train: ' + message)}$"):
        TrainingSchedule(**settings)


def test_schedule_validation_takes_every_value_at_its_bounds() -> None:
    """The smallest values allowed, and each choice of every option."""
    TrainingSchedule(
        epochs=1,
        batch_size=1,
        eval_batch_size=1,
        momentum=0,
        weight_decay=0,
        warmup_epochs=0,
        record_every=0,
        tasks=1,
        milestones=(0.5,),
        lr_schedule="multistep",
        precision="bf16",
        class_il_outputs="all",
        step_graph=True,  # with SGD, the default
    )
    TrainingSchedule(lr_schedule="cosine", optimizer="radam", compile=True, compile_mode="reduce-overhead")
    # Past the epochs is allowed (never reached): ``epochs`` alone shortens a protocol.
    assert TrainingSchedule(epochs=1, milestones=(35, 45)).milestones == (35, 45)


@pytest.mark.parametrize(
    ("compile", "mode", "marks"),
    [(True, "reduce-overhead", 9), (True, "default", 0), (False, "reduce-overhead", 0)],
)
def test_the_loop_marks_every_step_for_cuda_graphs_only(
    compile, mode, marks, stream, transforms, tiny_net, setting_of, monkeypatch
) -> None:
    """3 tasks x 1 epoch x 3 steps (24 rows, batch 8): a step mark per training step, only for a
    network compiled into CUDA graphs (the net itself is not compiled here: the loop reads only the
    schedule)."""
    calls = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append(1))
    method, g = _method("sgd", stream, transforms, tiny_net, setting_of)
    schedule = TrainingSchedule(epochs=1, batch_size=8, lr=0.1, compile=compile, compile_mode=mode)
    fit(method, stream, schedule, generator=g)
    assert len(calls) == marks


class FixedLogits(nn.Module):
    """A 'method' whose predictions are given by hand, for evaluation tests."""

    def __init__(self, table: Tensor) -> None:
        super().__init__()
        self.table = table

    def predict(self, x: Tensor) -> Tensor:
        return self.table[x.long().flatten()]


def test_evaluate_by_hand() -> None:
    setting = ContinualSetting((2, 2), (1,))
    # Rows: (true label, logits over 4 classes).
    labels = torch.tensor([0, 1, 2, 3])
    table = torch.tensor(
        [
            [
                5.0,
                1.0,
                9.0,
                0.0,
            ],  # label 0: class-IL over seen {0,1} -> 0 (right); all outputs -> 2 (wrong)
            [0.0, 1.0, 0.0, 3.0],  # label 1: seen {0,1} -> 1 (right); all outputs -> 3 (wrong)
            [0.0, 8.0, 1.0, 2.0],  # label 2: class-IL -> 1 (wrong); task-IL in {2,3} -> 3 (wrong)
            [0.0, 0.0, 1.0, 2.0],  # label 3: class-IL -> 3 (right); task-IL -> 3 (right)
        ]
    )
    method = FixedLogits(table)
    x = torch.arange(4)
    identity = lambda v, g=None: v  # noqa: E731
    cil, til, heads = evaluate(method, x, labels, setting, seen_tasks=1, transform=identity)
    assert cil == [100.0]
    assert til == [100.0, 50.0]
    assert heads == [[0, 0]]
    # Once all four classes are seen, labels 0 and 1 lose to classes 2 and 3; label 3 stays right.
    cil, til, heads = evaluate(method, x, labels, setting, seen_tasks=2, transform=identity, batch_size=3)
    assert cil == [0.0, 50.0]
    assert til == [100.0, 50.0]
    # Task 0's two mistakes went to task 1's classes (2 and 3); task 1's one (label 2 -> 1) to task 0.
    assert heads == [[0, 2], [1, 0]]
    cil, _, heads = evaluate(
        method, x, labels, setting, seen_tasks=1, transform=identity, class_il_outputs="all"
    )
    assert cil == [0.0]
    assert heads == [[0, 2]]


class PlainPredictor:
    """A predictor that is not an nn.Module (no parameters): logits by row, batch sizes recorded."""

    def __init__(self, table: Tensor) -> None:
        self.table = table
        self.sizes: list[int] = []

    def predict(self, x: Tensor) -> Tensor:
        self.sizes.append(x.shape[0])
        return self.table[x.long().flatten()]


def test_evaluate_a_plain_predictor_in_batches_of_512() -> None:
    """A predictor that is not an nn.Module is evaluated on the data's device, by default in
    batches of 512: 513 rows, labels 0, 1, 2, 3, 0, ... (129 of label 0, 128 of each other)."""
    setting = ContinualSetting((2, 2), (1,))
    table = torch.tensor(
        [
            [1.0, 0.0, 0.0, 0.0],  # label 0: right
            [0.0, 0.0, 1.0, 0.0],  # label 1: class 2 in Class-IL (task 1's head), 0 in Task-IL (tie)
            [0.0, 0.0, 1.0, 0.0],  # label 2: right
            [0.0, 0.0, 0.0, 1.0],  # label 3: right
        ]
    )
    method = PlainPredictor(table)
    labels = torch.arange(513) % 4
    cil, til, heads = evaluate(method, labels, labels, setting, seen_tasks=2, transform=lambda v, g=None: v)
    assert method.sizes == [512, 1]
    assert cil == pytest.approx([100 * 129 / 257, 100.0])
    assert til == pytest.approx([100 * 129 / 257, 100.0])
    assert heads == [[0, 128], [0, 0]]  # task 0's 128 mistakes went to task 1's classes


class MetaLogits(nn.Module):
    """Logits by row from a table held on the meta device (shapes, no data); records the device of
    each batch it is given."""

    def __init__(self, table: Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table.to("meta"), requires_grad=False)
        self.devices: list[torch.device] = []

    def predict(self, x: Tensor) -> Tensor:
        self.devices.append(x.device)
        return self.table[x.long().flatten()]


def test_evaluate_runs_on_the_methods_device(monkeypatch) -> None:
    """Every tensor of an evaluation is on the method's device (its parameters'), here the meta
    device, with the data on the CPU: each batch reaches predict there, and no op mixes devices.
    The one read-back (.tolist() of the counts) cannot read meta tensors: it gives zeros here."""
    real_tolist = torch.Tensor.tolist

    def tolist(tensor: Tensor):
        return real_tolist(torch.zeros(tensor.shape, dtype=tensor.dtype) if tensor.is_meta else tensor)

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    method = MetaLogits(torch.randn(4, 4))
    setting = ContinualSetting((2, 2), (1,))
    x = labels = torch.tensor([0, 1, 2, 3, 3])
    identity = lambda v, g=None: v  # noqa: E731
    cil, til, heads = evaluate(method, x, labels, setting, seen_tasks=2, transform=identity, batch_size=3)
    assert method.devices == [torch.device("meta")] * 2
    assert (len(cil), len(til), heads) == (2, 2, [[0, 0], [0, 0]])


class Recorder(Callback):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_task_start(self, loop) -> None:
        self.calls.append(("task_start", loop.task, loop.epoch))

    def on_epoch_end(self, loop, record) -> None:
        self.calls.append(("epoch", record.task, record.epoch, record.steps))

    def on_task_end(self, loop, record) -> None:
        self.calls.append(("task_end", record.task, len(record.class_il)))


def _method(name, stream, transforms, tiny_net, setting_of, seed=0, **config):
    from xder_methods import method_config_class

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    m = create_method(
        name,
        net=tiny_net(sum(stream.classes_per_task)),
        setting=setting_of(stream),
        transforms=transforms,
        config=method_config_class(name)(**config),
        generator=g,
    )
    return m, g


def test_fit_order_of_hooks_and_history_shape(stream, transforms, tiny_net, setting_of) -> None:
    method, g = _method("sgd", stream, transforms, tiny_net, setting_of)
    recorder = Recorder()
    history = fit(
        method,
        stream,
        TrainingSchedule(epochs=2, batch_size=8, lr=0.1),
        generator=g,
        callbacks=[recorder],
    )
    assert [len(r) for r in history.class_il] == [1, 2, 3]
    assert [len(r) for r in history.task_il] == [3, 3, 3]
    assert len(history.random_init_task_il) == 3
    # 24 training rows per task, batch 8: 3 steps per epoch.
    assert recorder.calls[:4] == [
        ("task_start", 0, 0),
        ("epoch", 0, 0, 3),
        ("epoch", 0, 1, 3),
        ("task_end", 0, 1),
    ]
    assert len(recorder.calls) == 3 * 4


@pytest.mark.parametrize("name", ["er", "derpp"])
@pytest.mark.parametrize("stop_after", [2, 3])  # mid-task and at a task boundary (2 epochs/task)
def test_resume_equals_uninterrupted(
    name, stop_after, stream, transforms, tiny_net, setting_of, snapshot_after
) -> None:
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9)
    config = {"buffer_size": 10, "minibatch_size": 4}
    method, g = _method(name, stream, transforms, tiny_net, setting_of, **config)
    full = fit(method, stream, schedule, generator=g)

    method, g = _method(name, stream, transforms, tiny_net, setting_of, **config)
    snapshot = snapshot_after(method, stream, schedule, g, stop_after)
    torch.manual_seed(123)  # the resumed process starts from a different global RNG state
    method, g = _method(name, stream, transforms, tiny_net, setting_of, seed=99, **config)
    resumed = fit(method, stream, schedule, generator=g, resume=snapshot)
    assert resumed.class_il == full.class_il
    assert resumed.task_il == full.task_il


def test_non_finite_loss_stops_the_run(stream, transforms, tiny_net, setting_of) -> None:
    method, g = _method("sgd", stream, transforms, tiny_net, setting_of)
    original = method.observe

    def poisoned(batch):
        out = original(batch)
        return StepOutput(out.loss * math.nan, out.terms)

    method.observe = poisoned  # type: ignore[method-assign]
    epochs: list[int] = []

    class Count(Callback):
        def on_epoch_end(self, loop, record) -> None:
            epochs.append(record.epoch)

    with pytest.raises(NonFiniteLossError, match="task 0 epoch 0"):
        fit(
            method,
            stream,
            TrainingSchedule(epochs=2, batch_size=8, lr=0.1),
            generator=g,
            callbacks=[Count()],
        )
    assert epochs == []  # no callback (hence no checkpoint) saw the bad epoch


@pytest.mark.parametrize(("name", "kind"), [("sgd", torch.optim.SGD), ("radam", torch.optim.RAdam)])
def test_optimizer_choice(name, kind, stream, transforms, tiny_net, setting_of) -> None:
    method, g = _method("sgd", stream, transforms, tiny_net, setting_of)
    seen = []

    class Spy(Callback):
        def on_epoch_end(self, loop, record) -> None:
            seen.append(type(loop.optimizer))

    schedule = TrainingSchedule(epochs=1, batch_size=8, lr=0.01, optimizer=name)
    fit(method, stream, schedule, generator=g, callbacks=[Spy()])
    assert seen == [kind] * 3
    with pytest.raises(ValueError, match="optimizer"):
        TrainingSchedule(optimizer="adam")  # type: ignore[arg-type]


def test_group_gradient_norms_by_hand() -> None:
    from xder_methods.core.loop import _group_grad_norms

    w = nn.Parameter(torch.tensor([1.0, 0.0]))
    optimizer = torch.optim.SGD([w], lr=0.1)
    groups = {"stream": (w * torch.tensor([3.0, 4.0])).sum(), "buffer": w.pow(2).sum()}
    norms = _group_grad_norms(groups, optimizer)
    assert float(norms["stream"]) == pytest.approx(5.0)
    assert float(norms["buffer"]) == pytest.approx(2.0)
    assert w.grad is None  # recording leaves the optimiser's gradients alone


def test_fit_records_stream_and_buffer_gradient_norms(stream, transforms, tiny_net, setting_of) -> None:
    method, g = _method("derpp", stream, transforms, tiny_net, setting_of, buffer_size=10, minibatch_size=4)
    records = []

    class Keep(Callback):
        def on_epoch_end(self, loop, record) -> None:
            records.append(record)

    fit(
        method,
        stream,
        TrainingSchedule(epochs=1, batch_size=8, lr=0.05, record_every=1),
        generator=g,
        callbacks=[Keep()],
    )
    assert set(records[0].grad_norms) == {"stream", "buffer"}
    assert all(v > 0 for r in records for v in r.grad_norms.values())
    records.clear()
    method, g = _method("derpp", stream, transforms, tiny_net, setting_of, buffer_size=10, minibatch_size=4)
    fit(
        method,
        stream,
        TrainingSchedule(epochs=1, batch_size=8, lr=0.05, record_every=0),
        generator=g,
        callbacks=[Keep()],
    )
    assert all(r.grad_norms == {} for r in records)


def test_training_only_the_first_tasks(stream, transforms, tiny_net, setting_of, snapshot_after) -> None:
    """``tasks=2`` on a 3-task stream trains and evaluates tasks 0 and 1 only: the same matrices
    as a full fit on the stream with task 2's rows removed (same generator draws), cut to two
    columns, and resuming mid-way ends where the uninterrupted run does."""
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9, tasks=2)
    config = {"buffer_size": 10, "minibatch_size": 4}
    method, g = _method("er", stream, transforms, tiny_net, setting_of, **config)
    recorder = Recorder()
    history = fit(method, stream, schedule, generator=g, callbacks=[recorder])
    assert [len(r) for r in history.class_il] == [1, 2]
    assert [len(r) for r in history.task_il] == [2, 2]
    assert len(history.random_init_task_il) == 2
    assert [len(r) for r in history.head_counts] == [1, 2]
    assert all(len(row) == 2 for rows in history.head_counts for row in rows)
    assert [c for c in recorder.calls if c[0] == "task_end"] == [("task_end", 0, 1), ("task_end", 1, 2)]

    def first_two(y):
        return y < 4

    keep_train, keep_test = first_two(stream.train_y), first_two(stream.test_y)
    truncated = type(stream)(
        stream.classes_per_task,
        stream.train_x[keep_train],
        stream.train_y[keep_train],
        stream.test_x[keep_test],
        stream.test_y[keep_test],
    )
    method, g = _method("er", truncated, transforms, tiny_net, setting_of, **config)
    full = fit(method, truncated, TrainingSchedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9), generator=g)
    assert history.class_il == full.class_il[:2]
    assert history.task_il == [row[:2] for row in full.task_il[:2]]
    assert history.random_init_task_il == full.random_init_task_il[:2]

    method, g = _method("er", stream, transforms, tiny_net, setting_of, **config)
    snapshot = snapshot_after(method, stream, schedule, g, 3)  # mid-way through task 1
    method, g = _method("er", stream, transforms, tiny_net, setting_of, seed=99, **config)
    resumed = fit(method, stream, schedule, generator=g, resume=snapshot)
    assert resumed.class_il == history.class_il
    assert resumed.task_il == history.task_il

    with pytest.raises(MethodConfigError, match=r"^train\.tasks = 4 is out of range: .* 3 tasks"):
        fit(method, stream, TrainingSchedule(tasks=4), generator=g)
    with pytest.raises(ValueError, match="tasks must be >= 1"):
        TrainingSchedule(tasks=0)


class LrLog(Callback):
    """The optimiser's lr at every step (on_step runs after the step's optimizer.step)."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, int, float]] = []
        self.epochs: list[tuple[float, float | None]] = []

    def on_step(self, loop) -> None:
        lrs = {group["lr"] for group in loop.optimizer.param_groups}
        assert len(lrs) == 1
        self.steps.append((loop.task, loop.epoch, lrs.pop()))

    def on_epoch_end(self, loop, record) -> None:
        self.epochs.append((record.lr, record.last_lr))


def test_fit_sets_fractional_milestones_on_the_optimizer(stream, transforms, tiny_net, setting_of) -> None:
    """24 rows per task in batches of 4: 6 steps per epoch, at positions e + s/6. With milestones
    1.4 and 1.8 the second epoch runs steps 0-2 (1.0 .. 1.33) at lr, 3-4 (1.5, 1.67) at lr/10 and
    step 5 (1.83) at lr/100; every task restarts the schedule."""
    method, g = _method("sgd", stream, transforms, tiny_net, setting_of)
    schedule = TrainingSchedule(
        epochs=2, batch_size=4, lr=0.05, lr_schedule="multistep", milestones=(1.4, 1.8)
    )
    log = LrLog()
    fit(method, stream, schedule, generator=g, callbacks=[log])
    per_task = [0.05] * 6 + [0.05] * 3 + [0.005] * 2 + [0.0005]
    assert [lr for _, _, lr in log.steps] == pytest.approx(per_task * 3, rel=1e-12)
    assert [(t, e) for t, e, _ in log.steps] == [(t, e) for t in range(3) for e in range(2) for _ in range(6)]
    # EpochRecord: the first and the last step's lr of each epoch.
    firsts_and_lasts = [lr for pair in log.epochs for lr in pair]
    assert firsts_and_lasts == pytest.approx([0.05, 0.05, 0.05, 0.0005] * 3, rel=1e-12)


def test_resume_mid_task_sets_the_same_per_step_lrs(
    stream, transforms, tiny_net, setting_of, snapshot_after
) -> None:
    schedule = TrainingSchedule(
        epochs=3, batch_size=4, lr=0.1, momentum=0.9, lr_schedule="multistep", milestones=(1.5, 2.25)
    )
    config = {"buffer_size": 10, "minibatch_size": 4}
    method, g = _method("er", stream, transforms, tiny_net, setting_of, **config)
    full_log = LrLog()
    full = fit(method, stream, schedule, generator=g, callbacks=[full_log])

    method, g = _method("er", stream, transforms, tiny_net, setting_of, **config)
    snapshot = snapshot_after(method, stream, schedule, g, 4)  # task 1, after its first epoch
    method, g = _method("er", stream, transforms, tiny_net, setting_of, seed=99, **config)
    resumed_log = LrLog()
    resumed = fit(method, stream, schedule, generator=g, resume=snapshot, callbacks=[resumed_log])
    assert resumed_log.steps == full_log.steps[-len(resumed_log.steps) :]
    assert len(resumed_log.steps) == 5 * 6  # task 1's last two epochs and task 2's three
    assert {lr for _, _, lr in resumed_log.steps} == {lr for _, _, lr in full_log.steps}  # all 3 lrs
    assert resumed.class_il == full.class_il


def test_step_hooks_see_gradients_around_the_step(stream, transforms, tiny_net, setting_of) -> None:
    """after_backward runs between backward and the step (zeroing the gradients there leaves the
    network unchanged); after_step runs after the step, once per step, with the loop's optimiser."""
    method, g = _method("sgd", stream, transforms, tiny_net, setting_of)
    calls: list[tuple[str, bool]] = []
    before = [p.detach().clone() for p in method.net.parameters()]

    def after_backward() -> None:
        grads = [p.grad for p in method.net.parameters()]
        calls.append(("backward", all(gr is not None and bool(gr.abs().sum() > 0) for gr in grads[-1:])))
        for gr in grads:
            if gr is not None:
                gr.zero_()

    def after_step(optimizer: torch.optim.Optimizer) -> None:
        unchanged = all(torch.equal(p, b) for p, b in zip(method.net.parameters(), before, strict=True))
        calls.append(("step", unchanged and optimizer.param_groups[0]["lr"] == 0.1))

    method.after_backward = after_backward  # type: ignore[method-assign]
    method.after_step = after_step  # type: ignore[method-assign]
    fit(method, stream, TrainingSchedule(epochs=1, batch_size=8, lr=0.1, tasks=1), generator=g)
    # 24 rows, batch 8: 3 steps, each backward -> step; plain SGD on zero gradients moves nothing.
    assert calls == [("backward", True), ("step", True)] * 3


def test_the_terms_after_step_returns_are_logged_with_the_step(
    stream, transforms, tiny_net, setting_of
) -> None:
    """What after_step returns joins the step's terms: the epoch's mean holds it (2.0 on every step)."""
    method, g = _method("sgd", stream, transforms, tiny_net, setting_of)
    method.after_step = lambda optimizer: {"extra": torch.tensor(2.0)}  # type: ignore[method-assign]
    recorder = Recorder()
    records = []
    recorder.on_epoch_end = lambda loop, record: records.append(record)  # type: ignore[method-assign]
    fit(
        method,
        stream,
        TrainingSchedule(epochs=1, batch_size=8, lr=0.1, tasks=1),
        generator=g,
        callbacks=[recorder],
    )
    assert records[0].losses["extra"] == pytest.approx(2.0)


def test_a_manual_step_is_left_to_the_method(stream, transforms, tiny_net, setting_of) -> None:
    """With ``manual_optimization`` the loop hands the method its optimiser and does nothing
    around observe: no backward pass, no step, no after_backward or after_step; the method's own
    step moves the network, and the loss observe returns is logged."""
    method, g = _method("sgd", stream, transforms, tiny_net, setting_of)
    observe, calls = method.observe, []

    def observed(batch):
        out = observe(batch)
        assert method.optimizer is not None
        calls.append("observe")
        method.step(out.loss)
        return type(out)(out.loss.detach(), out.terms)

    method.manual_optimization = True
    method.observe = observed  # type: ignore[method-assign]
    method.after_backward = lambda: calls.append("after_backward")  # type: ignore[method-assign]
    method.after_step = lambda optimizer: calls.append("after_step")  # type: ignore[method-assign]
    before = [p.detach().clone() for p in method.net.parameters()]
    fit(method, stream, TrainingSchedule(epochs=1, batch_size=8, lr=0.1, tasks=1), generator=g)
    # 24 rows, batch 8: 3 steps; after_backward only from the method's own step (MethodBase.step).
    assert calls == ["observe", "after_backward"] * 3
    assert not all(torch.equal(p, b) for p, b in zip(method.net.parameters(), before, strict=True))


def test_a_manual_step_drops_earlier_gradients_as_the_loop_does() -> None:
    """MethodBase.step zeroes the gradients as the loop does, to None: a parameter its loss does
    not reach has no gradient, so SGD's weight decay leaves it alone (a zero gradient would
    still decay it: b - lr * wd * b = 1.9), and an earlier gradient does not add up."""
    net = nn.Linear(1, 1)
    with torch.no_grad():
        net.weight.fill_(1.0)
        net.bias.fill_(2.0)
    method = MethodBase(net, ContinualSetting((1,), (1,)), None, None)
    method.optimizer = torch.optim.SGD(net.parameters(), lr=0.5, weight_decay=0.1)
    net.weight.grad, net.bias.grad = torch.full((1, 1), 3.0), torch.full((1,), 3.0)  # a step's leftovers
    calls = []
    method.after_backward = lambda: calls.append(net.weight.grad.item())  # type: ignore[method-assign]
    method.step((2 * net.weight).sum())  # d/dw = 2; the bias is not in the loss
    assert calls == [2.0]  # after the backward pass, before the optimiser's step
    assert net.bias.grad is None
    assert net.bias.item() == 2.0
    assert net.weight.item() == pytest.approx(1.0 - 0.5 * (2.0 + 0.1 * 1.0))  # w - lr * (grad + wd * w)


class _StopAtTaskEnd(Callback):
    """Snapshots the loop at the end of task 0 (position: task 1, epoch 0) and stops the run."""

    def __init__(self) -> None:
        self.snapshot: dict | None = None

    def on_task_end(self, loop, record) -> None:
        self.snapshot = loop.snapshot()
        raise KeyboardInterrupt


@pytest.mark.parametrize("stop", [None, "mid-task", "after-epochs", "task-end"])
def test_prepare_task_runs_once_per_task_before_its_first_step(
    stop, stream, transforms, tiny_net, setting_of, snapshot_after
) -> None:
    """After begin_task, before the task's first observe, with the task's own training rows and the
    task's budget (the schedule's epochs, batch size, lr and drop_last). A run resumed inside a
    task (2 epochs per task: 3 epochs done, or 4, when only task 1's end is left) does not prepare
    that task again: its work is in the checkpoint; one resumed from a snapshot at a task's end
    prepares the next task as the uninterrupted run."""
    schedule = TrainingSchedule(epochs=2, batch_size=8, lr=0.1)

    def recording(seed: int):
        method, g = _method("sgd", stream, transforms, tiny_net, setting_of, seed=seed)
        calls: list[tuple] = []
        begin, observe = method.begin_task, method.observe

        def begin_task(task: int) -> None:
            calls.append(("begin", task))
            begin(task)

        def prepare_task(task: int, data, given) -> None:
            rows = stream.task(task).train
            same = torch.equal(data.x_raw, stream.train_x[rows]) and torch.equal(data.y, stream.train_y[rows])
            calls.append(("prepare", task, data.task, same, given == schedule.budget))

        def observed(batch):
            if not calls or calls[-1][0] != "observe":
                calls.append(("observe", batch.task))
            return observe(batch)

        method.begin_task = begin_task  # type: ignore[method-assign]
        method.prepare_task = prepare_task  # type: ignore[method-assign]
        method.observe = observed  # type: ignore[method-assign]
        return method, g, calls

    def task_calls(task: int) -> list[tuple]:
        return [("begin", task), ("prepare", task, task, True, True), ("observe", task)]

    if stop is None:
        method, g, calls = recording(0)
        fit(method, stream, schedule, generator=g)
        assert calls == task_calls(0) + task_calls(1) + task_calls(2)
        return
    method, g = _method("sgd", stream, transforms, tiny_net, setting_of)
    if stop == "task-end":
        stopper = _StopAtTaskEnd()
        with pytest.raises(KeyboardInterrupt):
            fit(method, stream, schedule, generator=g, callbacks=[stopper])
        assert stopper.snapshot is not None
        assert stopper.snapshot["position"] == {"task": 1, "epoch": 0}
        snapshot = stopper.snapshot
    else:
        snapshot = snapshot_after(method, stream, schedule, g, 3 if stop == "mid-task" else 4)
    method, g, calls = recording(99)
    fit(method, stream, schedule, generator=g, resume=snapshot)
    expected = {
        "mid-task": [("begin", 1), ("observe", 1), *task_calls(2)],
        "after-epochs": [("begin", 1), *task_calls(2)],
        "task-end": task_calls(1) + task_calls(2),
    }
    assert calls == expected[stop]
