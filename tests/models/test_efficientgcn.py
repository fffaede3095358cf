"""EfficientGCN: scaling, the hop-partitioned NTU graph, input streams, graph conv, bodies, layout.

The expected figures are those of docs/data-formats.md ("EfficientGCN-B0"); the graph and the
streams are checked against independent plain-Python computations (a BFS over the edge list, loops
over joints).
"""

from __future__ import annotations

import math
import sys
from collections import deque

import pytest
import torch
from torch import nn

from xder_models import EfficientGCN, create_backbone
from xder_models.efficientgcn import (
    SpatialGraphConv,
    STJointAttention,
    TemporalSepLayer,
    ntu_hop_adjacency,
    scale_block_args,
    skeleton_streams,
)

# Copied from docs/data-formats.md (the bones of "NTU RGB+D 60", the parents of "EfficientGCN-B0";
# 1-based), not from the module under test.
EDGES = [
    (1, 2), (2, 21), (3, 21), (4, 3), (5, 21), (6, 5), (7, 6), (8, 7), (9, 21), (10, 9), (11, 10),
    (12, 11), (13, 1), (14, 13), (15, 14), (16, 15), (17, 1), (18, 17), (19, 18), (20, 19), (22, 23),
    (23, 8), (24, 25), (25, 12),
]  # fmt: skip
PARENTS = [2, 2, 21, 3, 21, 5, 6, 7, 21, 9, 10, 11, 1, 13, 14, 15, 1, 17, 18, 19, 2, 23, 8, 25, 12]


@pytest.fixture(scope="module")
def b0() -> EfficientGCN:
    torch.manual_seed(0)
    return create_backbone("efficientgcn-b0", 60).eval()


def _hops() -> list[list[float]]:
    """All-pairs hop distances of the NTU skeleton, by BFS from every joint (0-based)."""
    neighbours: dict[int, set[int]] = {v: set() for v in range(25)}
    for a, b in EDGES:
        neighbours[a - 1].add(b - 1)
        neighbours[b - 1].add(a - 1)
    hops = [[math.inf] * 25 for _ in range(25)]
    for source in range(25):
        hops[source][source] = 0
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for w in neighbours[u]:
                if hops[source][w] == math.inf:
                    hops[source][w] = hops[source][u] + 1
                    queue.append(w)
    return hops


def test_compound_scaling() -> None:
    assert scale_block_args(0) == [(48, 1, 0), (32, 1, 0), (64, 2, 1), (128, 2, 1)]
    assert scale_block_args(2) == [(64, 1, 1), (32, 1, 1), (96, 2, 2), (192, 2, 2)]
    assert scale_block_args(4) == [(96, 1, 2), (48, 1, 2), (128, 2, 3), (272, 2, 3)]


def test_adjacency_matches_a_bfs_with_the_max_hop_10_normaliser() -> None:
    hops = _hops()
    # The skeleton's diameter is 12: 30 ordered pairs lie beyond 10 hops.
    assert max(max(row) for row in hops) == 12
    assert sum(h > 10 for row in hops for h in row) == 30
    degree = [sum(hops[j][i] <= 10 for j in range(25)) for i in range(25)]
    assert max(degree) == 25
    assert min(degree) == 19
    expected = torch.zeros(3, 25, 25, dtype=torch.float64)
    for d in range(3):
        for j in range(25):
            for i in range(25):
                if hops[j][i] == d:
                    expected[d, j, i] = 1.0 / degree[i]
    adjacency = ntu_hop_adjacency(3)
    assert adjacency.shape == (3, 25, 25)
    assert adjacency.dtype == torch.float32
    torch.testing.assert_close(adjacency.double(), expected, rtol=0, atol=1e-7)
    # Hop 0 is the identity scaled by 1/25 for central joints; every slice is symmetric in its pattern.
    assert adjacency[0, 0, 0].item() == pytest.approx(1 / 25)
    assert torch.equal(adjacency > 0, (adjacency > 0).transpose(1, 2))


def test_adjacency_needs_torch_geometric(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    monkeypatch.setitem(sys.modules, "torch_geometric.utils", None)
    with pytest.raises(ImportError, match=r"pip install 'xder-models\[gcn\]'"):
        ntu_hop_adjacency()


def test_skeleton_streams_against_loops() -> None:
    generator = torch.Generator().manual_seed(0)
    joints = torch.randn(2, 3, 4, 25, generator=generator, dtype=torch.float64)
    joints[1] = 0.0  # a missing body
    joint, velocity, bone = skeleton_streams(joints)
    assert joint.shape == velocity.shape == bone.shape == (2, 6, 4, 25)
    for b in range(2):
        for t in range(4):
            for v in range(25):
                x = joints[b, :, t, v]
                torch.testing.assert_close(joint[b, :3, t, v], x)
                torch.testing.assert_close(joint[b, 3:, t, v], x - joints[b, :, t, 1])
                first = joints[b, :, t + 1, v] - x if t + 1 < 4 else torch.zeros(3, dtype=x.dtype)
                second = joints[b, :, t + 2, v] - x if t + 2 < 4 else torch.zeros(3, dtype=x.dtype)
                torch.testing.assert_close(velocity[b, :3, t, v], first)
                torch.testing.assert_close(velocity[b, 3:, t, v], second)
                vector = x - joints[b, :, t, PARENTS[v] - 1]
                length = math.sqrt(sum(c.item() ** 2 for c in vector)) + 1e-4
                torch.testing.assert_close(bone[b, :3, t, v], vector)
                angles = torch.tensor([math.acos(c.item() / length) for c in vector], dtype=x.dtype)
                torch.testing.assert_close(bone[b, 3:, t, v], angles)
    # The mid-spine (joint 2) is its own parent: zero bone, angles pi/2; a missing body likewise.
    torch.testing.assert_close(bone[0, 3:, :, 1], torch.full((3, 4), math.pi / 2, dtype=torch.float64))
    torch.testing.assert_close(bone[1, 3:], torch.full((3, 4, 25), math.pi / 2, dtype=torch.float64))


def test_spatial_graph_conv_aggregates_each_partition() -> None:
    torch.manual_seed(0)
    adjacency = ntu_hop_adjacency(3)
    layer = SpatialGraphConv(4, 5, adjacency)
    with torch.no_grad():
        layer.edge.uniform_(0.5, 1.5)
    x = torch.randn(2, 4, 3, 25)
    y = layer.gcn(x).view(2, 3, 5, 3, 25)
    expected = sum(y[:, k] @ (adjacency[k] * layer.edge[k]) for k in range(3))
    torch.testing.assert_close(layer(x), expected)


def test_graph_is_a_buffer_and_edges_are_parameters(b0: EfficientGCN) -> None:
    convs = [m for m in b0.modules() if isinstance(m, SpatialGraphConv)]
    assert len(convs) == 11  # 3 x (stem + 2 blocks) + 2 main-stream blocks
    adjacency = ntu_hop_adjacency(3)
    for conv in convs:
        assert dict(conv.named_buffers())["A"] is conv.A
        assert "A" not in dict(conv.named_parameters())
        torch.testing.assert_close(conv.A, adjacency)
        assert conv.edge.shape == (3, 25, 25)
        assert conv.edge.requires_grad
        assert torch.equal(conv.edge, torch.ones(3, 25, 25))
    assert sum(conv.edge.numel() for conv in convs) == 20_625
    assert sum(p.numel() for p in b0.classifier.parameters()) == 7_740
    no_edges = create_backbone("efficientgcn-b0", 60, edge=False)
    assert sum(p.numel() for p in no_edges.parameters()) == 324_708


def test_temporal_downsampling_by_four(b0: EfficientGCN) -> None:
    maps: list[tuple[int, ...]] = []
    hook = b0.gradcam_layer.register_forward_hook(lambda _m, _i, out: maps.append(tuple(out.shape)))
    try:
        with torch.no_grad():
            logits = b0(torch.randn(1, 3, 80, 25, 2))
    finally:
        hook.remove()
    assert maps == [(2, 128, 20, 25)]  # N * M rows: bodies are folded into the batch
    assert logits.shape == (1, 60)
    assert TemporalSepLayer(8, stride=2)(torch.randn(1, 8, 16, 25)).shape == (1, 8, 8, 25)


def test_bodies_share_weights_and_are_averaged_at_the_end(b0: EfficientGCN) -> None:
    generator = torch.Generator().manual_seed(1)
    first = torch.randn(1, 3, 8, 25, 1, generator=generator)
    second = torch.randn(1, 3, 8, 25, 1, generator=generator)
    missing = torch.zeros_like(first)
    maps: list[torch.Tensor] = []
    hook = b0.gradcam_layer.register_forward_hook(lambda _m, _i, out: maps.append(out))
    with torch.no_grad():
        f1, f2, f0 = (b0.forward_features(body) for body in (first, second, missing))
        pair = torch.cat([first, second], -1)
        b0.forward_features(torch.cat([pair, pair.flip(-1)]))  # N = 2 samples of M = 2 bodies
    hook.remove()
    # Bodies are folded into the batch, row n * M + m being body m of sample n.
    map1, map2, _, folded = maps
    assert folded.shape == (4, 128, 2, 25)
    torch.testing.assert_close(folded, torch.cat([map1, map2, map2, map1]))
    with torch.no_grad():
        torch.testing.assert_close(b0.forward_features(pair), (f1 + f2) / 2)
        torch.testing.assert_close(b0.forward_features(torch.cat([second, first], -1)), (f1 + f2) / 2)
        # A missing body counts in the average, as in the official code.
        torch.testing.assert_close(b0.forward_features(torch.cat([first, missing], -1)), (f1 + f0) / 2)


def test_attention_is_a_frame_times_joint_map() -> None:
    torch.manual_seed(0)
    attention = STJointAttention(8).eval()
    att = attention(torch.randn(2, 8, 6, 25))
    assert att.shape == (2, 8, 6, 25)
    assert bool((att > 0).all() and (att < 1).all())
    # rank one per (sample, channel): att[t, v] * att[0, 0] == att[t, 0] * att[0, v]
    torch.testing.assert_close(att * att[:, :, :1, :1], att[:, :, :, :1] * att[:, :, :1, :])


def test_initialisation(b0: EfficientGCN) -> None:
    norms = [m for m in b0.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(torch.equal(m.weight, torch.ones_like(m.weight)) for m in norms)
    assert all(torch.equal(m.bias, torch.zeros_like(m.bias)) for m in norms)
    convs = [m for m in b0.modules() if isinstance(m, nn.Conv2d)]
    assert all(m.bias is not None and not m.bias.any() for m in convs)
    linear = b0.classifier[1]
    assert not linear.bias.any()
    assert linear.weight.std().item() == pytest.approx(0.001, rel=0.1)
    # He init, fan_out, leaky_relu (slope 0.01): std = sqrt(2 / (1 + 0.01^2)) / sqrt(fan_out).
    expand = b0.main_stream[1].tcn[0].expand_conv[0]  # 128 -> 256, 1x1: fan_out 256
    assert expand.weight.std().item() == pytest.approx(math.sqrt(2 / 1.0001) / 16, rel=0.05)
    assert b0.classifier[0].p == 0.25


def test_layout_of_b0(b0: EfficientGCN) -> None:
    branch = b0.input_branches[0]
    assert branch.init_bn.num_features == 6
    assert branch.stem_tcn.conv.kernel_size == (5, 1)
    assert [len(block.tcn) for block in branch.blocks] == [0, 0]
    assert [block.att.bn.num_features for block in branch.blocks] == [48, 32]
    assert [len(block.tcn) for block in b0.main_stream] == [1, 1]
    assert b0.main_stream[0].scn.conv.gcn.in_channels == 96  # three branches of 32 concatenated
    assert b0.gradcam_layer is b0.main_stream[1]
    assert b0.num_features == 128


def test_wrong_input_shape(b0: EfficientGCN) -> None:
    with pytest.raises(ValueError, match=r"raw joints \(N, 3, T, 25, M\)"):
        b0(torch.zeros(2, 6, 16, 25))
