"""X-DER's step as a whole: the total loss is the sum of its weighted terms, each against an
independent float64 reference written as plain loops over planted logits.

The network is a lookup table: every example carries its item id in its first pixel and the
"network" returns that item's planted row, and the transforms only scale to [0, 1], so every
output of the step is known in advance. The buffer holds as many items as a replay batch draws
(and no more than future preparation takes), so each draw takes every item and the expected
values do not depend on the order of a draw.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from xder_methods import Batch, TaskData, Transforms, XDERConfig, create_method, regular_simplex
from xder_methods.core.protocols import ContinualSetting
from xder_methods.parts.losses import logit_matching_loss

HEAD = 2  # classes per task


class PlantedNet(nn.Module):
    """Returns ``table[id]`` for an example whose first pixel is ``id / 255``."""

    def __init__(self, table: Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table.clone())

    def forward(self, x: Tensor) -> Tensor:
        ids = (x[:, 0, 0, 0] * 255).round().long()
        return self.table[ids]


def scale(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
    return x.float() / 255


def examples(ids: list[int]) -> Tensor:
    x = torch.full((len(ids), 1, 2, 2), 7, dtype=torch.uint8)
    x[:, 0, 0, 0] = torch.tensor(ids, dtype=torch.uint8)
    return x


# ----------------------------------------------------------------- the independent reference


def log_sum_exp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def cross_entropy(row: list[float], label: int, start: int, end: int) -> float:
    return log_sum_exp(row[start:end]) - row[label]


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def rescaled(
    stored: list[float], fresh: list[float], label: int, start: int, end: int, gamma: float
) -> list[float]:
    """The rescale rule of docs/xder.md: ``fresh[start:end]`` implanted into ``stored``, scaled
    so that its maximum is at most ``gamma`` times the stored ground truth; rows whose ground
    truth is not positive are left as stored."""
    g = stored[label]
    if g <= 0:
        return list(stored)
    top = max(fresh[start:end])
    factor = gamma * g / top if top > gamma * g else 1.0
    return stored[:start] + [v * factor for v in fresh[start:end]] + stored[end:]


def mean_of_positive(values: list[float]) -> float:
    positive = [v for v in values if v > 0]
    return sum(positive) / len(positive) if positive else 0.0


def softmax(row: list[float]) -> list[float]:
    total = log_sum_exp(row)
    return [math.exp(v - total) for v in row]


def supcon(rows: list[list[float]], labels: list[int], tau: float) -> float:
    """Khosla et al.'s loss over the given rows (views already expanded), mean over anchors."""
    unit = [[v / math.sqrt(sum(u * u for u in row)) for v in row] for row in rows]
    n = len(rows)
    per_anchor = []
    for a in range(n):
        sims = [sum(p * q for p, q in zip(unit[a], unit[k], strict=True)) / tau for k in range(n)]
        denominator = log_sum_exp([sims[k] for k in range(n) if k != a])
        positives = [k for k in range(n) if k != a and labels[k] == labels[a]]
        if positives:
            per_anchor.append(-mean([sims[p] - denominator for p in positives]))
    return mean(per_anchor)


def expected_step(
    cfg: XDERConfig,
    task: int,
    n_tasks: int,
    stream: tuple[list[list[float]], list[int]],
    buffer: tuple[list[list[float]], list[int], list[list[float]], list[int]],
) -> dict[str, float]:
    """Every term of one X-DER step, weighted, from the outputs of each item (float64 loops).

    ``stream``: outputs and labels; ``buffer``: outputs, labels, stored logits, task labels.
    """
    extra = 0 if cfg.future_heads == "none" else cfg.preallocated_heads
    heads = n_tasks if extra is None else min(n_tasks, task + 1 + extra)
    available, past, seen = heads * HEAD, task * HEAD, (task + 1) * HEAD
    out, y = ([row[:available] for row in stream[0]], stream[1])
    ce_end = available if cfg.future_heads == "ce" else seen
    terms = {"ce": mean([cross_entropy(row, label, past, ce_end) for row, label in zip(out, y, strict=True)])}
    b_out, b_y, b_stored, b_task = buffer
    b_out = [row[:available] for row in b_out]
    if b_y:
        squares = []
        for row, stored, item_task in zip(b_out, b_stored, b_task, strict=True):
            valid = n_tasks if extra is None else min(n_tasks, item_task + 1 + extra)
            squares += [(row[j] - stored[j]) ** 2 for j in range(min(valid * HEAD, available))]
        terms["der"] = cfg.alpha * mean(squares)
        terms["buffer_ce"] = cfg.beta * mean(
            [cross_entropy(row, label, 0, past) for row, label in zip(b_out, b_y, strict=True)]
        )
    if available > seen and cfg.future_heads == "supcon":
        rows = [row for row in out + b_out for _ in range(cfg.n_views)]  # identical views
        labels = [label for label in y + b_y for _ in range(cfg.n_views)]
        per_head = [
            supcon([row[h * HEAD : (h + 1) * HEAD] for row in rows], labels, cfg.tau)
            for h in range(task + 1, heads)
        ]
        terms["future_preparation"] = cfg.lambda_ * mean(per_head)
    m = cfg.margin
    if task >= 1:
        if cfg.constraint_form == "reference":
            violations = []
            for row in out:
                p = softmax(row[:seen])
                violations.append(max(p[:past]) + m - max(p[past:seen]))
            pc = mean_of_positive(violations)
        else:
            pc = mean([max(0.0, max(row[:past]) - row[label] + m) for row, label in zip(out, y, strict=True)])
        terms["past_constraint"] = cfg.eta * pc
    if available > seen:
        rows, labels = out + b_out, y + b_y  # every buffer item once (duplicates are dropped)
        if cfg.constraint_form == "reference":
            fc = mean_of_positive(
                [
                    max(row[seen:]) + m - max(row[(label // HEAD) * HEAD : (label // HEAD + 1) * HEAD])
                    for row, label in zip(rows, labels, strict=True)
                ]
            )
        else:
            fc = mean(
                [max(0.0, max(row[seen:]) - row[label] + m) for row, label in zip(rows, labels, strict=True)]
            )
        terms["future_constraint"] = cfg.eta * fc
    return terms


# --------------------------------------------------------------------------------- the scenes


def scene(
    n_tasks: int, task: int, buffer_labels: list[int], buffer_tasks: list[int], **config
) -> tuple[object, Batch, XDERConfig, dict]:
    """X-DER at the start of a step of ``task``, its buffer planted, its outputs planted."""
    classes = n_tasks * HEAD
    n_stream, n_buffer = 4, len(buffer_labels)
    cfg = XDERConfig(
        buffer_size=n_buffer,
        minibatch_size=n_buffer,
        simclr_batch_size=8,
        alpha=0.3,
        beta=0.7,
        lambda_=0.11,
        eta=0.5,
        margin=0.6,
        tau=2.0,
        **config,
    )
    width = classes - 1 if cfg.future_heads == "rpc" else classes
    g = torch.Generator().manual_seed(task * 10 + n_tasks)
    table = 2.0 * torch.randn(n_stream + n_buffer, width, generator=g)
    stored = 2.0 * torch.randn(n_buffer, classes, generator=g)
    setting = ContinualSetting((HEAD,) * n_tasks, (1, 2, 2))
    method = create_method(
        "xder",
        net=PlantedNet(table),
        setting=setting,
        transforms=Transforms(train=scale, test=scale, strong=scale),
        config=cfg,
        generator=torch.Generator().manual_seed(0),
    )
    buffer_ids = list(range(n_stream, n_stream + n_buffer))
    method.buffer.write(
        torch.arange(n_buffer),
        examples(buffer_ids),
        torch.tensor(buffer_labels),
        stored,
        torch.tensor(buffer_tasks),
    )
    method.buffer.set_size(n_buffer)
    method.begin_task(task)
    stream_y = [task * HEAD, task * HEAD + 1, task * HEAD, task * HEAD + 1]
    x_raw = examples(list(range(n_stream)))
    batch = Batch(scale(x_raw), torch.tensor(stream_y), x_raw, task)

    outputs = table.double()
    if cfg.future_heads == "rpc":  # logits through the fixed polytope, worked out here
        vertices = regular_simplex(classes, torch.float64)
        outputs = torch.tensor(
            [
                [sum(f * v for f, v in zip(row, vertex, strict=True)) for vertex in vertices.tolist()]
                for row in outputs.tolist()
            ],
            dtype=torch.float64,
        )
    rows = outputs.tolist()
    data = {
        "stream": (rows[:n_stream], stream_y),
        "buffer": (rows[n_stream:], buffer_labels, stored.double().tolist(), buffer_tasks),
    }
    return method, batch, cfg, data


PAST = [0, 0, 0, 1, 1, 1]  # the buffer at task 1: task 0's two classes, stored at its end

SCENES = {
    # name: (tasks, task, buffer labels, buffer task labels, config, terms present)
    "xder": (3, 1, PAST, [0] * 6, {}, "all"),
    "paper constraints": (3, 1, PAST, [0] * 6, {"constraint_form": "paper"}, "all"),
    "w/o memory update": (3, 1, PAST, [0] * 6, {"memory_update": False}, "all"),
    "joint forward": (3, 1, PAST, [0] * 6, {"replay_forward": "joint"}, "all"),
    "ce future heads": (3, 1, PAST, [0] * 6, {"future_heads": "ce"}, "no supcon"),
    "rpc future heads": (3, 1, PAST, [0] * 6, {"future_heads": "rpc"}, "no supcon"),
    # Heads appear with their task: no future term; task 0's items are valid on head 0 only.
    "w/o future heads": (3, 1, PAST, [0] * 6, {"future_heads": "none"}, "no future"),
    # One head allocated ahead: columns 0-5 exist at task 1, task 0's items are valid on 0-3.
    "preallocated 1": (4, 1, PAST, [0] * 6, {"preallocated_heads": 1}, "all"),
    # The last task: nothing in the future, past items updated during task 1 or stored at task 0.
    "last task": (3, 2, [0, 0, 1, 2, 2, 3], [0, 1, 1, 1, 1, 1], {}, "no future"),
}

EVERY_TERM = {"ce", "der", "buffer_ce", "future_preparation", "past_constraint", "future_constraint"}
PRESENT = {
    "all": EVERY_TERM,
    "no supcon": EVERY_TERM - {"future_preparation"},
    "no future": EVERY_TERM - {"future_preparation", "future_constraint"},
}


@pytest.mark.parametrize("name", list(SCENES))
def test_the_step_is_the_sum_of_its_weighted_terms(name: str) -> None:
    n_tasks, task, labels, tasks, config, present = SCENES[name]
    method, batch, cfg, data = scene(n_tasks, task, labels, tasks, **config)
    expected = expected_step(cfg, task, n_tasks, data["stream"], data["buffer"])
    assert set(expected) == PRESENT[present]
    for term, value in expected.items():
        assert abs(value) > 1e-3, f"{term} is zero here: the scene would not test it"

    out = method.observe(batch)

    assert set(out.terms) == PRESENT[present]
    for term, value in expected.items():
        assert float(out.terms[term]) == pytest.approx(value, rel=1e-5, abs=1e-6), term
    assert float(out.loss.detach()) == pytest.approx(sum(expected.values()), rel=1e-5)
    # The loop's gradient-norm groups (StepOutput.groups): the stream cross-entropy alone, and the
    # two buffer terms together.
    assert set(out.groups) == {"stream", "buffer"}
    assert float(out.groups["stream"].detach()) == pytest.approx(expected["ce"], rel=1e-5)
    buffer_terms = expected["der"] + expected["buffer_ce"]
    assert float(out.groups["buffer"].detach()) == pytest.approx(buffer_terms, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name", list(SCENES))
def test_the_step_implants_the_present_and_future_heads_of_every_drawn_item(name: str) -> None:
    """docs/xder.md step 4: both draws take every buffer item, so each row is drawn twice and
    counts once (first visit: updated with probability 1). Its columns ``[t c, end of the existing
    heads)`` become the step's output for it, rescaled below gamma times its stored ground truth;
    the other columns keep their stored values (the scenes store values beyond the existing heads
    too, where a real buffer holds zeros, so that writing there shows); its task label becomes t.
    Off with ``memory_update = False``."""
    n_tasks, task, labels, tasks, config, _ = SCENES[name]
    method, batch, cfg, data = scene(n_tasks, task, labels, tasks, **config)
    extra = 0 if cfg.future_heads == "none" else cfg.preallocated_heads
    available = HEAD * (n_tasks if extra is None else min(n_tasks, task + 1 + extra))
    outputs, _, stored, _ = data["buffer"]
    if cfg.memory_update:
        expected = [
            rescaled(z, o[:available], y, task * HEAD, available, cfg.gamma)
            for o, y, z in zip(outputs, labels, stored, strict=True)
        ]
        expected_tasks = [task] * len(labels)
    else:
        expected, expected_tasks = stored, tasks
    assert expected != stored or not cfg.memory_update  # the update shows

    method.observe(batch)

    n = len(labels)
    torch.testing.assert_close(
        method.buffer.logits[:n].double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-6
    )
    assert method.buffer.task_labels[:n].tolist() == expected_tasks
    visits = 1.0 if cfg.memory_update else 0.0  # drawn twice, visited once (counted by the update)
    assert method.visits[:n].tolist() == [visits] * n


def test_the_logit_term_counts_only_the_columns_valid_for_each_item() -> None:
    # Task 0's items were stored when only heads 0-1 existed (one head pre-allocated): their
    # columns 4-5 hold nothing and must not count. Worked out by hand from the planted numbers.
    method, *_ = scene(4, 1, PAST, [0] * 6, preallocated_heads=1)
    assert method._valid_columns(torch.tensor([0, 1, 2, 3])).tolist() == [4, 6, 8, 8]
    outputs = torch.tensor([[1.0, 2.0, 0.0, -1.0, 5.0, 5.0], [0.0, 0.0, 3.0, 1.0, -2.0, 4.0]])
    targets = torch.tensor([[0.0, 1.0, 2.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    valid = torch.tensor([[True] * 4 + [False] * 2, [True] * 6])
    # Row 0: 1 + 1 + 4 + 4 over four columns; row 1: 1 + 1 + 4 + 0 + 9 + 9 over six.
    assert float(logit_matching_loss(outputs, targets, valid)) == pytest.approx(34 / 10)
    assert float(logit_matching_loss(outputs, targets)) == pytest.approx((10 + 50 + 24) / 12)
    assert float(logit_matching_loss(outputs, targets, torch.zeros_like(valid))) == 0.0


def test_without_preallocation_every_stored_column_is_valid() -> None:
    method, *_ = scene(3, 1, PAST, [0] * 6)
    assert method._valid_columns(torch.tensor([0, 1, 2])).tolist() == [6, 6, 6]
    method, *_ = scene(3, 1, PAST, [0] * 6, future_heads="none")
    assert method._valid_columns(torch.tensor([0, 1, 2])).tolist() == [2, 4, 6]


# ----------------------------------------------------------------------- the end of a task


def end_of_task_scene(
    n_tasks: int, task: int, stored_labels: list[int], stored_tasks: list[int], new_per_class: int, **config
) -> tuple[object, TaskData, XDERConfig, list[list[float]], list[list[float]]]:
    """X-DER at the end of ``task``: its (full) buffer planted with items 0 .. M-1, the task's
    data the items M, M+1, ... (``new_per_class`` of each class, class by class); every output
    planted. Returns the method, the data, the config, the planted outputs of every item and the
    stored logits (float64 lists)."""
    classes, m = n_tasks * HEAD, len(stored_labels)
    new_labels = [task * HEAD + j for j in range(HEAD) for _ in range(new_per_class)]
    cfg = XDERConfig(buffer_size=m, minibatch_size=m, simclr_batch_size=8, **config)
    g = torch.Generator().manual_seed(100 * n_tasks + task)
    table = 2.0 * torch.randn(m + len(new_labels), classes, generator=g)
    stored = 2.0 * torch.randn(m, classes, generator=g)
    method = create_method(
        "xder",
        net=PlantedNet(table),
        setting=ContinualSetting((HEAD,) * n_tasks, (1, 2, 2)),
        transforms=Transforms(train=scale, test=scale, strong=scale),
        config=cfg,
        generator=torch.Generator().manual_seed(0),
    )
    method.buffer.write(
        torch.arange(m),
        examples(list(range(m))),
        torch.tensor(stored_labels),
        stored,
        torch.tensor(stored_tasks),
    )
    method.buffer.set_size(m)
    method.buffer.num_seen = m
    method.begin_task(task)
    data = TaskData(examples(list(range(m, m + len(new_labels)))), torch.tensor(new_labels), task)
    return method, data, cfg, table.double().tolist(), stored.double().tolist()


# Stored labels at task 2: each class of tasks 0-1 three times, interleaved, so that the shrink to
# the earliest two of each class drops rows 5 (class 0), 9 (3), 10 (1) and 11 (2).
TWO_TASKS = [0, 2, 1, 3, 0, 0, 2, 1, 3, 3, 1, 2]
TWO_TASKS_STORED_AT = [1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 0, 1]  # task labels: task 0's items, some updated at 1

END_SCENES = {
    # name: (tasks, task, stored labels, stored task labels, new items per class, config)
    # Task 1, M = 8: the earliest 8 // 4 = 2 items of classes 0 and 1 stay (rows 0-3), the 4 free
    # slots take 2 of the 3 items of classes 2 and 3.
    "xder": (3, 1, [0, 1, 0, 1, 1, 0, 0, 1], [0] * 8, 3, {}),
    # Heads 0-2 exist at task 1 (of 4): columns 6-7 are neither implanted nor stored for new items.
    "preallocated 1": (4, 1, [0, 1, 0, 1, 1, 0, 0, 1], [0] * 8, 3, {"preallocated_heads": 1}),
    "w/o future heads": (3, 1, [0, 1, 0, 1, 1, 0, 0, 1], [0] * 8, 3, {"future_heads": "none"}),
    # Task 2, M = 12: 12 // 6 = 2 items of each of classes 0-3 stay, 2 + 2 of classes 4 and 5 enter.
    "last task": (3, 2, TWO_TASKS, TWO_TASKS_STORED_AT, 3, {}),
    "w/o memory update": (3, 2, TWO_TASKS, TWO_TASKS_STORED_AT, 3, {"memory_update": False}),
    # Task 0 with a buffer that holds items (of an earlier run): nothing of it stays (the shrink is
    # from task 1 on); the 8 slots take 4 of the 5 items of classes 0 and 1.
    "first task": (3, 0, [0, 1, 0, 1, 1, 0, 0, 1], [0] * 8, 5, {}),
}


@pytest.mark.parametrize("name", list(END_SCENES))
def test_the_end_of_a_task_shrinks_inserts_and_implants(name: str) -> None:
    """docs/xder.md, "At the end of a task", point by point against plain-Python rules: (1) every
    stored class keeps its earliest M // ((t+1) c) items, packed to the front in row order; (2-3)
    the free slots, shared equally among the task's classes, take items of the task's data, stored
    unaugmented with their output, the heads that do not exist yet set to 0, the past heads rescaled
    against their own ground truth (t >= 1); (4) every kept past item has its present and future
    heads ``[t c, end of the existing heads)`` implanted by the rescale rule (its other columns
    keep their stored values: the scenes store values beyond the existing heads, where a real
    buffer holds zeros, so that writing there shows) and its task label set to t; the buffer is
    full and has seen M items."""
    n_tasks, task, labels, tasks, per_class, config = END_SCENES[name]
    method, data, cfg, outputs, stored = end_of_task_scene(n_tasks, task, labels, tasks, per_class, **config)
    m, c = len(labels), HEAD
    extra = 0 if cfg.future_heads == "none" else cfg.preallocated_heads
    available = c * (n_tasks if extra is None else min(n_tasks, task + 1 + extra))

    # (1) The rows that stay, in row order, and what they must hold afterwards.
    kept = [r for r in range(m) if task >= 1 and labels[:r].count(labels[r]) < m // ((task + 1) * c)]
    expected_kept = []
    for r in kept:
        if cfg.memory_update and task >= 1:
            row = rescaled(stored[r], outputs[r], labels[r], task * c, available, cfg.gamma)
            expected_kept.append((r, labels[r], row, task))
        else:
            expected_kept.append((r, labels[r], stored[r], tasks[r]))
    rescales = [row != stored[r] for r, _, row, _ in expected_kept]
    assert not cfg.memory_update or not kept or (any(rescales) and not all(rescales))  # g <= 0 rows too

    method.end_task(task, data)

    items = method.buffer.all()
    ids = [int(x) for x in items.examples[:, 0, 0, 0]]
    assert len(method.buffer) == m
    assert method.buffer.num_seen == m
    assert ids[: len(kept)] == kept
    for j, (r, label, row, stored_at) in enumerate(expected_kept):
        assert int(items.labels[j]) == label
        assert int(items.task_labels[j]) == stored_at, r
        torch.testing.assert_close(items.logits[j].double(), torch.tensor(row, dtype=torch.float64))
    # (2-3) The new items: distinct items of the data, (M - kept) / c of each class.
    new_ids, new_labels = ids[len(kept) :], items.labels[len(kept) :].tolist()
    assert len(set(new_ids)) == len(new_ids) == m - len(kept)
    for x, label in zip(new_ids, new_labels, strict=True):
        assert label == int(data.y[x - m])
    assert sorted(new_labels) == [task * c + j for j in range(c) for _ in range((m - len(kept)) // c)]
    assert items.task_labels[len(kept) :].tolist() == [task] * len(new_ids)
    for j, (x, label) in enumerate(zip(new_ids, new_labels, strict=True), start=len(kept)):
        row = outputs[x][:available] + [0.0] * (len(outputs[x]) - available)
        if task >= 1:
            row = rescaled(row, row, label, 0, task * c, cfg.gamma)
        torch.testing.assert_close(items.logits[j].double(), torch.tensor(row, dtype=torch.float64))
