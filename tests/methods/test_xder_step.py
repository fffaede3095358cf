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

from xder_methods import Batch, Transforms, XDERConfig, create_method, regular_simplex
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
