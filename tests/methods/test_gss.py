"""GSS: the score and the greedy replacement by hand, what makes it GSS (gradient-diverse buffer),
training, resume, and the cost of a step."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from xder_methods import Batch, OpCounter, create_method
from xder_methods.core.errors import MethodConfigError
from xder_methods.methods.gss import (
    EMPTY_BUFFER_SCORE,
    GSS,
    GSSConfig,
    gss_replacement,
    gss_scores,
)
from xder_methods.parts.buffer import Buffer

SQRT2 = math.sqrt(2)


def build(stream, transforms, tiny_net, setting_of, *, num_classes=None, batchnorm=False, seed=0, **config):
    torch.manual_seed(seed)
    defaults = {"buffer_size": 10, "minibatch_size": 4}
    method = create_method(
        "gss",
        net=tiny_net(num_classes or sum(stream.classes_per_task), batchnorm=batchnorm),
        setting=setting_of(stream),
        transforms=transforms,
        config=GSSConfig(**(defaults | config)),
        generator=torch.Generator().manual_seed(seed),
    )
    assert isinstance(method, GSS)
    return method


def batch_of(stream, transforms, rows, task=0):
    x_raw = stream.train_x[rows]
    return Batch(transforms.train(x_raw, torch.Generator()), stream.train_y[rows], x_raw, task)


# ------------------------------------------------------------------------------- pure functions


def test_gss_scores_by_hand() -> None:
    buffer = torch.tensor([[1.0, 1.0], [-1.0, 0.0]])
    candidates = torch.tensor([[1.0, 0.0], [1.0, -1.0], [2.0, 2.0], [0.0, 0.0], [1.0, -2.0]])
    expected = torch.tensor(
        [
            1 + 1 / SQRT2,  # (1,0): cos 1/sqrt2 with (1,1), -1 with (-1,0)
            1.0,  # (1,-1): cos 0 with (1,1), -1/sqrt2 with (-1,0)
            2.0,  # (2,2): parallel to (1,1)
            1.0,  # zero gradient: cosine 0 with everything
            1 - 1 / math.sqrt(10),  # (1,-2): -1/sqrt10 with (1,1), -1/sqrt5 with (-1,0)
        ]
    )
    torch.testing.assert_close(gss_scores(candidates, buffer), expected)
    with pytest.raises(ValueError, match="at least one"):
        gss_scores(candidates, buffer[:0])


def test_gss_scores_match_a_float64_loop() -> None:
    g = torch.Generator().manual_seed(0)
    candidates, buffer = torch.randn(5, 7, generator=g), torch.randn(4, 7, generator=g)
    expected = []
    for c in candidates.double().tolist():
        cosines = []
        for b in buffer.double().tolist():
            dot = sum(ci * bi for ci, bi in zip(c, b, strict=True))
            cosines.append(dot / (math.sqrt(sum(v * v for v in c)) * math.sqrt(sum(v * v for v in b))))
        expected.append(max(cosines) + 1)
    torch.testing.assert_close(
        gss_scores(candidates, buffer).double(), torch.tensor(expected, dtype=torch.float64)
    )


def test_gss_replacement_by_hand() -> None:
    # Buffer scores C = [1, 3]; candidates offered in order, each against the scores left before it.
    scores = torch.tensor([1.0, 3.0])
    c = torch.tensor([0.5, 1.2, 0.2, 0.3, 0.4])
    choice = torch.tensor([0.1, 0.9, 0.5, 0.2, 0.1])
    accept = torch.tensor([0.6, 0.0, 0.95, 0.5, 0.1])
    # 0: cdf [1, 4], 0.1 * 4 = 0.4 -> slot 0; 0.6 < 1 / 1.5 = 0.667 -> enters, C = [0.5, 3]
    # 1: c = 1.2 >= 1: never enters (even with accept draw 0)
    # 2: cdf [0.5, 3.5], 0.5 * 3.5 = 1.75 -> slot 1; 0.95 >= 3 / 3.2 = 0.9375 -> rejected
    # 3: cdf [0.5, 3.5], 0.2 * 3.5 = 0.7 -> slot 1 (with the scores before candidate 0 it would
    #    have been 0.8 < 1: slot 0); 0.5 < 3 / 3.3 -> enters, C = [0.5, 0.3]
    # 4: cdf [0.5, 0.8], 0.1 * 0.8 = 0.08 -> slot 0; 0.1 < 0.5 / 0.9 -> enters, C = [0.4, 0.3],
    #    and candidate 0, whose slot it takes, no longer stays: slot 2 (the scratch row)
    slots, after = gss_replacement(scores, c, choice, accept)
    assert slots.tolist() == [2, 2, 2, 1, 0]
    torch.testing.assert_close(after, torch.tensor([0.4, 0.3]))
    torch.testing.assert_close(scores, torch.tensor([1.0, 3.0]))  # the input is left alone


def test_gss_replacement_gates_on_the_gate_scores_and_accepts_on_the_candidates() -> None:
    # Buffer scores C = [1, 3]; the gate b (the batch's score, as the DER paper's code) decides
    # who may enter, the candidate's own c the acceptance C_i / (C_i + c) and the stored score.
    scores = torch.tensor([1.0, 3.0])
    c = torch.tensor([0.5, 0.2, 1.5])
    gate = torch.tensor([0.9, 1.0, 0.9])
    choice = torch.tensor([0.1, 0.1, 0.9])
    accept = torch.tensor([0.6, 0.0, 0.6])
    # 0: b 0.9 < 1; cdf [1, 4], 0.4 -> slot 0; 0.6 < 1 / 1.5 -> enters, C = [0.5, 3]
    # 1: b = 1: never enters, though its own c = 0.2 < 1 and its accept draw is 0
    # 2: b 0.9 < 1, though its own c = 1.5 >= 1; cdf [0.5, 3.5], 3.15 -> slot 1;
    #    0.6 < 3 / 4.5 = 0.667 -> enters, C = [0.5, 1.5]
    slots, after = gss_replacement(scores, c, choice, accept, gate_scores=gate)
    assert slots.tolist() == [0, 2, 1]
    torch.testing.assert_close(after, torch.tensor([0.5, 1.5]))
    # Without a gate, the candidates' own scores gate: 1 enters (slot 0, C 0.5 -> 0.2), 2 does not.
    slots, after = gss_replacement(scores, c, choice, accept)
    assert slots.tolist() == [2, 0, 2]
    torch.testing.assert_close(after, torch.tensor([0.2, 3.0]))


def test_gss_replacement_never_picks_a_zero_score_and_takes_no_candidates() -> None:
    # cdf [0, 2]: a draw of 0 lands at 0, in slot 1's interval [0, 2); slot 0's is empty.
    slots, after = gss_replacement(
        torch.tensor([0.0, 2.0]), torch.tensor([0.5]), torch.tensor([0.0]), torch.tensor([0.5])
    )
    assert slots.tolist() == [1]  # 0.5 < 2 / 2.5
    torch.testing.assert_close(after, torch.tensor([0.0, 0.5]))
    slots, after = gss_replacement(torch.tensor([1.0, 2.0]), torch.zeros(0), torch.zeros(0), torch.zeros(0))
    assert slots.shape == (0,)
    torch.testing.assert_close(after, torch.tensor([1.0, 2.0]))


def test_config_rejects_bad_values() -> None:
    with pytest.raises(MethodConfigError, match="gss_minibatch_size"):
        GSSConfig(gss_minibatch_size=0)
    with pytest.raises(MethodConfigError, match="batch_num"):
        GSSConfig(batch_num=0)
    with pytest.raises(MethodConfigError, match="candidate_gradient"):
        GSSConfig(candidate_gradient="sample")  # type: ignore[arg-type]
    assert GSSConfig().candidate_gradient == "hybrid"  # the DER paper's code's policy


# ------------------------------------------------------------------------------------ behaviour


def offer(method: GSS, x_raw, y) -> None:
    method.store(Batch(x_raw.float() / 255, y, x_raw, 0))


def test_an_item_aligned_with_the_buffer_stays_out_one_pointing_away_enters(
    stream, transforms, tiny_net, setting_of
) -> None:
    # Two classes, one input x: the gradient of CE(f(x), y) is J(x)^T (p - e_y), and in two classes
    # p - e_0 = p1 (-1, 1) and p - e_1 = p0 (1, -1): label 1 gives exactly the opposite direction.
    # The GSS paper's policy: each item's own score gates it (the hybrid gates by the batch's).
    method = build(
        stream, transforms, tiny_net, setting_of, num_classes=2, buffer_size=4, candidate_gradient="item"
    )
    x = stream.train_x[:1]
    offer(method, x.expand(4, -1, -1, -1), torch.zeros(4, dtype=torch.int64))  # full of (x, 0)
    torch.testing.assert_close(method.buffer.scores[:4], torch.full((4,), EMPTY_BUFFER_SCORE))
    scores = method.candidate_scores(x.expand(2, -1, -1, -1), torch.tensor([0, 1]))
    torch.testing.assert_close(scores, torch.tensor([2.0, 0.0]), atol=1e-5, rtol=0)
    # The aligned copy (score 2 >= 1) never enters; the opposite one (score 0) always does:
    # accepted with probability C_i / (C_i + 0) = 1 whatever the draws.
    for seed in range(5):
        method.generator = torch.Generator().manual_seed(seed)
        before = method.buffer.labels[:4].clone()
        offer(method, x.expand(2, -1, -1, -1), torch.tensor([0, 1]))
        assert sorted(method.buffer.labels[:4].tolist()) == [0, 0, 0, 1], seed
        assert (method.buffer.labels[:4] != before).sum() <= 1
    assert method.buffer.num_seen == 4 + 5 * 2


def test_an_outnumbered_earlier_class_keeps_its_place(stream, transforms, tiny_net, setting_of) -> None:
    # Six items of class 0, then sixty of class 1, two at a time, into six slots, compared with
    # the whole buffer (gss_minibatch_size >= 6). In a two-class TinyNet (ReLU, inputs >= 0) two
    # items' gradients have a positive inner product when they share their label and a negative
    # one otherwise (see the test above: J^T (1, -1) against J'^T (-1, 1)), so a class-1 item
    # scores < 1 only while no class-1 item is in the buffer: after the first class-1 batch that
    # enters, no other does, and class 0 keeps at least 6 - 2 items. Reservoir sampling keeps each
    # class-0 item with probability 6/66: 0.55 of them on average.
    x0, x1 = stream.train_x[:6], stream.train_x[12:72]
    y0, y1 = torch.zeros(6, dtype=torch.int64), torch.ones(60, dtype=torch.int64)
    method = build(
        stream, transforms, tiny_net, setting_of, num_classes=2, buffer_size=6, gss_minibatch_size=6
    )
    reservoir = Buffer(6, x0.shape[1:])
    g = torch.Generator().manual_seed(0)
    offer(method, x0, y0)
    reservoir.add_reservoir(x0, y0, generator=g)
    for start in range(0, 60, 2):
        offer(method, x1[start : start + 2], y1[start : start + 2])
        reservoir.add_reservoir(x1[start : start + 2], y1[start : start + 2], generator=g)
    kept = (method.buffer.labels[:6] == 0).sum().item()
    assert 4 <= kept < 6  # class 1 got in, class 0 stayed
    assert (reservoir.labels[:6] == 0).sum().item() <= 1


def test_batch_scoring_gives_the_batch_one_score(stream, transforms, tiny_net, setting_of) -> None:
    def scores(mode: str) -> torch.Tensor:
        method = build(stream, transforms, tiny_net, setting_of, candidate_gradient=mode)
        offer(method, stream.train_x[:10], stream.train_y[:10])
        return method.candidate_scores(stream.train_x[12:16], stream.train_y[12:16])

    item, batch = scores("item"), scores("batch")
    assert torch.unique(batch).numel() == 1
    assert torch.unique(item).numel() == 4


def test_scoring_leaves_the_network_as_it_was(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of, batchnorm=True)
    offer(method, stream.train_x[:10], stream.train_y[:10])
    state = {k: v.clone() for k, v in method.net.state_dict().items()}
    method.candidate_scores(stream.train_x[12:16], stream.train_y[12:16])
    assert method.net.training
    assert all(p.grad is None for p in method.net.parameters())
    for k, v in method.net.state_dict().items():
        torch.testing.assert_close(v, state[k], rtol=0, atol=0)


def test_extra_iterations_walk_one_permutation_and_step_each_time(
    stream, transforms, tiny_net, setting_of
) -> None:
    method = build(stream, transforms, tiny_net, setting_of, batch_num=3)
    offer(method, stream.train_x[:10], stream.train_y[:10])
    drawn: list[list[int]] = []
    gather = method.buffer.gather

    def spy(index):
        drawn.append(index.tolist())
        return gather(index)

    method.buffer.gather = spy  # type: ignore[method-assign]
    optimizer = torch.optim.SGD(method.net.parameters(), lr=0.1)
    steps = []
    optimizer.register_step_post_hook(lambda *args: steps.append(1))
    method.optimizer = optimizer  # observe takes the steps itself (manual_optimization)
    method.observe(batch_of(stream, transforms, stream.task(0).train[10:16]))
    # Chunks of 4 of one permutation of the 10 rows (the last one shorter), then the scoring
    # subset (the whole buffer: gss_minibatch_size 32 >= 10).
    assert [len(d) for d in drawn] == [4, 4, 2, 10]
    assert sorted(drawn[0] + drawn[1] + drawn[2]) == list(range(10))
    assert len(steps) == 3


# ------------------------------------------------------------------------------- training, resume


def test_a_step_has_no_host_sync(stream, transforms, tiny_net, setting_of) -> None:
    method = build(stream, transforms, tiny_net, setting_of, batchnorm=True)
    offer(method, stream.train_x[:10], stream.train_y[:10])  # full: the step replaces greedily
    method.begin_task(1)
    method.optimizer = torch.optim.SGD(method.net.parameters(), lr=0.1)
    batch = batch_of(stream, transforms, stream.task(1).train[:6], task=1)
    before = method.buffer.labels.clone()
    with OpCounter() as counter:
        method.observe(batch)
    # Scoring, the accept/replace draws and the writes stay on the device: no read-back at all.
    assert counter.host_syncs == 0, counter.syncs
    assert counter.ops["searchsorted"] == 6  # one inverse-CDF draw per offered item
    assert method.buffer.num_seen == 16
    assert not torch.equal(before, method.buffer.labels)  # something of task 1 got in


# ------------------------------------------------------------------------ the policies, item by item


def reference_offer(method: GSS, x_raw: torch.Tensor, y: torch.Tensor, policy: str, state: torch.Tensor):
    """What offering ``(x_raw, y)`` to ``method``'s buffer does under ``policy``, written from the
    policies' descriptions with plain autograd, one item at a time, and the method's random draws
    replayed from generator state ``state`` (the scoring subset, then the replacement draws).

    ``item`` (GSS paper): each item's own score c_k gates (c_k < 1), decides the acceptance
    C_i / (C_i + c_k) and is stored. ``batch``: the score c_B of the batch's mean-loss gradient
    everywhere. ``hybrid`` (the DER paper's code): c_B is stored for the items that fill free
    slots and gates every item; an item past the gate is accepted with its own c_k, stored.

    Returns:
        (examples, labels, scores) of the buffer's rows afterwards, as lists.
    """
    buffer, n = method.buffer, y.shape[0]
    g = torch.Generator()
    g.set_state(state)
    size, capacity = len(buffer), buffer.capacity
    subset = torch.randperm(size, generator=g)[: method.config.gss_minibatch_size]
    net = method.net.eval()
    params = [p for p in net.parameters() if p.requires_grad]

    def gradient(x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(net(x.float() / 255), labels)
        return torch.cat([t.flatten() for t in torch.autograd.grad(loss, params)]).double()

    def score(grad: torch.Tensor) -> float:
        return max(
            float(grad @ other) / max(float(grad.norm() * other.norm()), 1e-8) + 1 for other in compared
        )

    compared = [gradient(buffer.examples[i : i + 1], buffer.labels[i : i + 1]) for i in subset.tolist()]
    batch_score = score(gradient(x_raw, y))
    item_scores = [score(gradient(x_raw[k : k + 1], y[k : k + 1])) for k in range(n)]
    net.train()
    fill = min(n, capacity - size)
    draws = torch.rand(2, n - fill, generator=g).double().tolist() if fill < n else [[], []]
    examples = [buffer.examples[i].clone() for i in range(capacity)]
    labels = buffer.labels[:capacity].tolist()
    scores = buffer.scores[:capacity].double().tolist()
    for k in range(n):
        own = batch_score if policy == "batch" else item_scores[k]
        gate = own if policy == "item" else batch_score
        if k < fill:
            slot, stored = size + k, gate
        elif gate < 1:
            target, cumulative, slot = draws[0][k - fill] * sum(scores), 0.0, capacity - 1
            for i, value in enumerate(scores):
                cumulative += value
                if cumulative > target:
                    slot = i
                    break
            if not draws[1][k - fill] < scores[slot] / (scores[slot] + own):
                continue
            stored = own
        else:
            continue
        examples[slot], labels[slot], scores[slot] = x_raw[k].clone(), int(y[k]), stored
    return examples, labels, scores


@pytest.mark.parametrize("policy", ["hybrid", "item", "batch"])
@pytest.mark.parametrize("stream_labels", [[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]])
def test_each_policy_matches_a_per_item_reference(
    policy, stream_labels, stream, transforms, tiny_net, setting_of
) -> None:
    """A batch of 5 offered to a buffer with 2 free slots of 6 (2 fill, 3 go through the
    replacement), under each policy, against :func:`reference_offer`: the same rows, labels and
    stored scores. Two classes: a batch of the other class points away from the class-0 buffer
    (scores near 0, the gate open); a batch mostly of class 0 points along it (the batch's score
    above 1: the hybrid keeps out even its class-1 items, whose own scores are below 1)."""
    method = build(
        stream,
        transforms,
        tiny_net,
        setting_of,
        num_classes=2,
        buffer_size=6,
        gss_minibatch_size=3,
        candidate_gradient=policy,
    )
    offer(method, stream.train_x[:4], torch.zeros(4, dtype=torch.int64))
    method.buffer.scores[:4] = torch.tensor([0.3, 1.2, 0.6, 0.9])  # unequal: the draws matter
    x_raw, y = stream.train_x[20:25], torch.tensor(stream_labels)
    state = method.generator.get_state()
    examples, labels, scores = reference_offer(method, x_raw, y, policy, state)
    offer(method, x_raw, y)
    assert method.buffer.labels[:6].tolist() == labels
    assert all(torch.equal(method.buffer.examples[i], examples[i]) for i in range(6))
    expected = torch.tensor(scores, dtype=torch.float64)
    torch.testing.assert_close(method.buffer.scores[:6].double(), expected, atol=1e-6, rtol=1e-5)
    if policy == "hybrid" and stream_labels == [0, 0, 0, 1, 1]:
        item_scores = method.candidate_scores(x_raw[3:], y[3:])
        assert labels.count(1) == 0  # gated out by the batch's score ...
        assert bool((item_scores < 1).all())  # ... though the item policy would have let them try
