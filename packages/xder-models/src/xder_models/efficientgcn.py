"""EfficientGCN-B0/B2/B4 for NTU RGB+D skeletons (Song et al., TPAMI 2022), as in the X-DER paper.

The architecture of the official code (``EfficientGCNv1``; docs/data-formats.md, "EfficientGCN-B0"):

* Input: raw joints ``(N, 3, T, 25, M)``. The model builds the three input streams itself, 6 channels
  each (:func:`skeleton_streams`): joints J, velocities V and bones B. Bodies are folded into the
  batch (``N * M``) and share every weight until the final pooling.
* Three input branches (one per stream, weights not shared): BatchNorm, a stem spatial graph layer
  (6 -> 64), a stem temporal layer (5x1 conv), then blocks 0 and 1. Their outputs are concatenated on
  channels (fusion stage 2) and the main stream runs blocks 2 and 3.
* A block: a spatial graph layer, ``depth`` temporal 'Sep' layers (expand x2, depthwise 5x1 conv
  with the block's stride on the first, pointwise back), then ST-Joint attention ('stja').
* Head: global average pooling over T, V and the M bodies (bodies are averaged only here), dropout
  0.25 and a linear layer.
* Compound scaling (:func:`scale_block_args`) from B0's ``[[48,1,0.5],[24,1,0.5],[64,2,1],[128,2,1]]``:
  channels ``max(round(c * 1.2**x / 16) * 16, 16)``, depths ``round(d * 1.35**x)``, with Python's
  banker's rounding, so B0's first two blocks have no temporal layer.
* The graph: the NTU 25-joint skeleton partitioned by hop distance 0, 1, 2 (:func:`ntu_hop_adjacency`),
  each slice multiplied by a learnable edge mask per layer.

Parameters with 60 classes: B0 345,333 (324,708 without edge masks), B2 814,401, B4 2,055,585.

Differences from the official code:

* ``A`` is a non-persistent buffer; the official code stores it as a frozen ``nn.Parameter``, so
  ``sum(p.numel() for p in model.parameters())`` there includes another 1,875 entries per graph layer.
* The classifier is a ``Linear``, not a 1x1x1 ``Conv3d``: the same parameters and the same function.
* The J/V/B streams are built inside the model from raw joints (the official data feeder builds them in
  numpy); the formulas are the same, so augmentation can run on raw joints on the device.
* Swish is ``nn.SiLU`` (the same function), one instance per layer and not in place; the official code
  shares one in-place instance, which makes a forward hook on it ambiguous. Dropout is not in place, so
  ``forward_head`` leaves its input untouched.
* ``forward`` returns logits only (the official one returns ``(logits, feature map)``); the pooled
  features come from ``forward_features`` and the map from a hook on ``gradcam_layer``.
* torch-geometric (the ``[gcn]`` extra) builds the adjacency once, at construction; the forward pass
  is one dense einsum per graph layer: on a fixed 25-node graph, message passing was about 4x slower
  to train on CPU and changes the operator (the one docs/data-formats.md, "EfficientGCN-B0", describes).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from types import ModuleType

import torch
from torch import Tensor, nn

from xder_models._registry import register_backbone

__all__ = [
    "B0_BLOCK_ARGS",
    "NTU_BONES",
    "NTU_CENTRE",
    "NTU_PARENTS",
    "EfficientGCN",
    "efficientgcn_b0",
    "efficientgcn_b2",
    "efficientgcn_b4",
    "ntu_hop_adjacency",
    "scale_block_args",
    "skeleton_streams",
]

NUM_JOINTS = 25
# The 24 bones of the NTU RGB+D skeleton, 1-based joint numbers as in the dataset's documentation.
NTU_BONES: tuple[tuple[int, int], ...] = (
    (1, 2), (2, 21), (3, 21), (4, 3), (5, 21), (6, 5), (7, 6), (8, 7), (9, 21), (10, 9), (11, 10),
    (12, 11), (13, 1), (14, 13), (15, 14), (16, 15), (17, 1), (18, 17), (19, 18), (20, 19), (22, 23),
    (23, 8), (24, 25), (25, 12),
)  # fmt: skip
# Parent of each joint for the bone stream, 1-based; the mid-spine (2) is its own parent.
NTU_PARENTS: tuple[int, ...] = (
    2, 2, 21, 3, 21, 5, 6, 7, 21, 9, 10, 11, 1, 13, 14, 15, 1, 17, 18, 19, 2, 23, 8, 25, 12,
)  # fmt: skip
# 0-based index of the mid-spine joint: the J stream's second half is relative to it.
NTU_CENTRE = 1

# (channels, temporal stride, depth) of B0 before rounding, and the (width, depth) scaling bases.
B0_BLOCK_ARGS: tuple[tuple[int, int, float], ...] = ((48, 1, 0.5), (24, 1, 0.5), (64, 2, 1), (128, 2, 1))
SCALE_ARGS = (1.2, 1.35)

STEM_CHANNELS = 64
FUSION_STAGE = 2  # the input branches run blocks [0, 2), the main stream the rest
TEMPORAL_WINDOW = 5
MAX_GRAPH_DISTANCE = 2  # partitions: hop 0, 1, 2
MAX_HOP = 10  # the official Graph's default; it sets the column normaliser (see ntu_hop_adjacency)
EXPAND_RATIO = 2
REDUCT_RATIO = 4
BONE_EPS = 1e-4


def scale_block_args(
    scale_factor: int,
    block_args: Sequence[tuple[int, int, float]] = B0_BLOCK_ARGS,
    scale_args: tuple[float, float] = SCALE_ARGS,
) -> list[tuple[int, int, int]]:
    """EfficientGCN's compound scaling of B0's blocks to Bx.

    Args:
        scale_factor: x in Bx.
        block_args: (channels, stride, depth) of B0, before rounding.
        scale_args: the bases of the channel and depth multipliers (1.2, 1.35).

    Returns:
        (channels, stride, depth) per block: channels ``max(round(c * 1.2**x / 16) * 16, 16)`` and depth
        ``round(d * 1.35**x)``. ``round`` is Python's (half to even), as in the official code: B0's
        depth 0.5 rounds to 0 and its 24 channels to 32.
    """
    width, depth = scale_args[0] ** scale_factor, scale_args[1] ** scale_factor
    return [(max(round(c * width / 16) * 16, 16), s, round(d * depth)) for c, s, d in block_args]


def _graph_utils() -> ModuleType:
    try:
        with warnings.catch_warnings():
            # torch-geometric still calls torch.jit.script at import, which recent torch deprecates.
            warnings.filterwarnings(
                "ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning
            )
            import torch_geometric.utils as utils
    except ImportError as error:
        raise ImportError(
            "efficientgcn backbones build their skeleton graph with torch-geometric: "
            "pip install 'xder-models[gcn]'"
        ) from error
    found: ModuleType = utils  # torch-geometric has no type information here
    return found


def ntu_hop_adjacency(num_partitions: int = MAX_GRAPH_DISTANCE + 1, *, max_hop: int = MAX_HOP) -> Tensor:
    """The NTU skeleton's adjacency, partitioned by hop distance, with EfficientGCN's normalisation.

    Slice ``d`` holds the pairs ``d`` hops apart: ``A[d][j, i] = 1 / deg(i)`` if ``hop(j, i) = d``, else 0,
    where ``deg(i)`` counts the joints within ``max_hop`` hops of ``i`` (itself included). With the
    official ``max_hop = 10`` that is 25 for most joints (19-23 at the extremities: the skeleton's
    diameter is 12), so the slices are a hop-partitioned adjacency scaled by about 1/25; the learnable
    edge masks absorb the scale. The einsum ``nkctv,kvw->nctw`` then sends joint v's features to w.

    Args:
        num_partitions: K, the number of slices kept (hops 0 .. K-1); 3 in EfficientGCN.
        max_hop: the hop radius of the normaliser's degree (and the largest slice that could be kept).

    Returns:
        ``A: (K, 25, 25)`` float32.

    Raises:
        ImportError: torch-geometric (the ``[gcn]`` extra) is not installed.
    """
    if not 1 <= num_partitions <= max_hop + 1:
        raise ValueError(f"num_partitions must lie in [1, max_hop + 1 = {max_hop + 1}], got {num_partitions}")
    utils = _graph_utils()
    edge_index = torch.tensor(NTU_BONES).t() - 1
    edge_index = utils.to_undirected(edge_index, num_nodes=NUM_JOINTS)
    edge_index, _ = utils.add_self_loops(edge_index, num_nodes=NUM_JOINTS)
    adjacency = utils.to_dense_adj(edge_index, max_num_nodes=NUM_JOINTS)[0].double()  # (25, 25), with I
    # With self-loops, (A + I)^d [j, i] > 0 iff j is within d hops of i: the hop distance is the first d.
    hop = torch.full((NUM_JOINTS, NUM_JOINTS), float("inf"), dtype=torch.float64)
    for d in range(max_hop, -1, -1):
        hop[torch.linalg.matrix_power(adjacency, d) > 0] = d
    within = (hop <= max_hop).double()
    normalised = within / within.sum(0, keepdim=True)  # A D^-1: column i divided by deg(i)
    partitions = [torch.where(hop == d, normalised, 0.0) for d in range(num_partitions)]
    return torch.stack(partitions).float()


def skeleton_streams(joints: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """EfficientGCN's three input streams from raw NTU joints (one body per row).

    * J = [x; x - x_mid-spine] (the mid-spine is joint index 1, frame by frame).
    * V = [x_{t+1} - x_t; x_{t+2} - x_t], zero where t+1 (or t+2) is past the last frame.
    * B = [x - x_parent; arccos(b_c / (|b| + 1e-4)) for c in x, y, z], parents :data:`NTU_PARENTS`;
      the mid-spine's bone is 0, so its angles are pi/2. Missing bodies (zeros) give J = V = 0 and
      B = [0; pi/2], as in the official data feeder.

    Args:
        joints: ``(B, 3, T, 25)`` coordinates.

    Returns:
        ``(joint, velocity, bone)``, each ``(B, 6, T, 25)``.
    """
    joint = torch.cat([joints, joints - joints[:, :, :, NTU_CENTRE : NTU_CENTRE + 1]], dim=1)
    velocity = joints.new_zeros(joints.shape[0], 6, *joints.shape[2:])
    velocity[:, :3, :-1] = joints[:, :, 1:] - joints[:, :, :-1]
    velocity[:, 3:, :-2] = joints[:, :, 2:] - joints[:, :, :-2]
    parents = [p - 1 for p in NTU_PARENTS]
    bone = joints - joints[:, :, :, parents]
    # |b_c| <= |b| < |b| + eps, so the arccos argument stays inside (-1, 1).
    angle = torch.acos(bone / (torch.linalg.vector_norm(bone, dim=1, keepdim=True) + BONE_EPS))
    return joint, velocity, torch.cat([bone, angle], dim=1)


class SpatialGraphConv(nn.Module):
    """A 1x1 conv to ``K * out_channels`` channels, then graph aggregation per partition (ST-GCN).

    ``out[n, c, t, w] = sum_k sum_v conv(x)[n, k, c, t, v] * (A[k] * edge[k])[v, w]``.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        adjacency: ``(K, V, V)`` fixed partitions, stored as a buffer (not trained, not a parameter).
        edge: learn a ``(K, V, V)`` mask, initialised to ones, that multiplies ``adjacency``.

    Shapes: ``x: (B, in_channels, T, V)`` -> ``(B, out_channels, T, V)``.
    """

    A: Tensor  # the buffer registered in __init__, declared for the type checker

    def __init__(self, in_channels: int, out_channels: int, adjacency: Tensor, *, edge: bool = True) -> None:
        super().__init__()
        self.partitions = adjacency.shape[0]
        self.gcn = nn.Conv2d(in_channels, out_channels * self.partitions, 1)
        # A constant of the graph, rebuilt at construction: a buffer moves with .to() but is not trained,
        # and non-persistent keeps 11+ identical copies out of checkpoints.
        self.register_buffer("A", adjacency, persistent=False)
        self.edge: nn.Parameter | None = nn.Parameter(torch.ones_like(adjacency)) if edge else None

    def forward(self, x: Tensor) -> Tensor:
        y = self.gcn(x)
        n, kc, t, v = y.shape
        y = y.view(n, self.partitions, kc // self.partitions, t, v)
        adjacency = self.A if self.edge is None else self.A * self.edge
        return torch.einsum("nkctv,kvw->nctw", y, adjacency)


class SpatialGraphLayer(nn.Module):
    """``act(BN(graph conv(x)) + residual(x))``; the residual is a 1x1 conv + BN when channels change.

    Shapes: ``x: (B, in_channels, T, V)`` -> ``(B, out_channels, T, V)``.
    """

    def __init__(self, in_channels: int, out_channels: int, adjacency: Tensor, *, edge: bool = True) -> None:
        super().__init__()
        self.conv = SpatialGraphConv(in_channels, out_channels, adjacency, edge=edge)
        self.bn = nn.BatchNorm2d(out_channels)
        self.residual: nn.Module = nn.Identity()
        if in_channels != out_channels:
            self.residual = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1), nn.BatchNorm2d(out_channels)
            )
        self.act = nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.act(self.bn(self.conv(x)) + self.residual(x))
        return out


class TemporalBasicLayer(nn.Module):
    """The stem's temporal layer: ``act(BN(conv_(w x 1)(x)) + x)``, stride 1.

    Shapes: ``x: (B, C, T, V)`` -> ``(B, C, T, V)``.
    """

    def __init__(self, channels: int, window: int = TEMPORAL_WINDOW) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, (window, 1), padding=((window - 1) // 2, 0))
        self.bn = nn.BatchNorm2d(channels)
        self.act = nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.act(self.bn(self.conv(x)) + x)
        return out


class TemporalSepLayer(nn.Module):
    """EfficientGCN's 'Sep' temporal layer: an inverted bottleneck with a depthwise temporal conv.

    Expand (1x1, C -> rC, BN, act), depthwise ((w x 1), stride s, BN, act), pointwise (1x1, rC -> C,
    BN, no act), plus the residual (identity, or a strided 1x1 conv + BN when s > 1); no act after the
    sum.

    Shapes: ``x: (B, C, T, V)`` -> ``(B, C, ceil(T / stride), V)``.
    """

    def __init__(
        self, channels: int, window: int = TEMPORAL_WINDOW, stride: int = 1, expand_ratio: int = EXPAND_RATIO
    ) -> None:
        super().__init__()
        inner = channels * expand_ratio
        self.expand_conv = nn.Sequential(nn.Conv2d(channels, inner, 1), nn.BatchNorm2d(inner))
        self.depth_conv = nn.Sequential(
            nn.Conv2d(inner, inner, (window, 1), (stride, 1), ((window - 1) // 2, 0), groups=inner),
            nn.BatchNorm2d(inner),
        )
        self.point_conv = nn.Sequential(nn.Conv2d(inner, channels, 1), nn.BatchNorm2d(channels))
        self.residual: nn.Module = nn.Identity()
        if stride != 1:
            self.residual = nn.Sequential(
                nn.Conv2d(channels, channels, 1, (stride, 1)), nn.BatchNorm2d(channels)
            )
        self.act = nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        y = self.act(self.depth_conv(self.act(self.expand_conv(x))))
        out: Tensor = self.point_conv(y) + self.residual(x)
        return out


class STJointAttention(nn.Module):
    """ST-Joint attention ('stja'): a (T, V) map per channel, the product of a frame and a joint factor.

    The frame profile (mean over V) and the joint profile (mean over T) go through one shared 1x1 conv
    ``C -> C/r`` + BN + Hardswish, then separate 1x1 convs back to C and sigmoids.

    Shapes: ``x: (B, C, T, V)`` -> attention ``(B, C, T, V)`` in (0, 1).
    """

    def __init__(self, channels: int, reduct_ratio: int = REDUCT_RATIO) -> None:
        super().__init__()
        inner = channels // reduct_ratio
        self.fcn = nn.Sequential(nn.Conv2d(channels, inner, 1), nn.BatchNorm2d(inner), nn.Hardswish())
        self.conv_t = nn.Conv2d(inner, channels, 1)
        self.conv_v = nn.Conv2d(inner, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        t, v = x.shape[2:]
        profile_t = x.mean(3, keepdim=True)  # (B, C, T, 1)
        profile_v = x.mean(2, keepdim=True).transpose(2, 3)  # (B, C, V, 1)
        hidden_t, hidden_v = self.fcn(torch.cat([profile_t, profile_v], dim=2)).split([t, v], dim=2)
        weights: Tensor = self.conv_t(hidden_t).sigmoid() * self.conv_v(hidden_v.transpose(2, 3)).sigmoid()
        return weights


class AttentionLayer(nn.Module):
    """``act(BN(x * attention(x)) + x)``.

    Shapes: ``x: (B, C, T, V)`` -> ``(B, C, T, V)``.
    """

    def __init__(self, channels: int, reduct_ratio: int = REDUCT_RATIO) -> None:
        super().__init__()
        self.att = STJointAttention(channels, reduct_ratio)
        self.bn = nn.BatchNorm2d(channels)
        self.act = nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.act(self.bn(x * self.att(x)) + x)
        return out


class EfficientGCNBlock(nn.Module):
    """A spatial graph layer, ``depth`` 'Sep' temporal layers (the first strided), then attention.

    With ``depth = 0`` (B0's first two blocks) the stride has no layer to act on, as in the official code.

    Shapes: ``x: (B, in_channels, T, V)`` -> ``(B, out_channels, T', V)``, ``T' = ceil(T / stride)``
    when ``depth > 0``.
    """

    def __init__(
        self, in_channels: int, out_channels: int, stride: int, depth: int, adjacency: Tensor, *, edge: bool
    ) -> None:
        super().__init__()
        self.scn = SpatialGraphLayer(in_channels, out_channels, adjacency, edge=edge)
        self.tcn = nn.Sequential(
            *(TemporalSepLayer(out_channels, stride=stride if j == 0 else 1) for j in range(depth))
        )
        self.att = AttentionLayer(out_channels)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.att(self.tcn(self.scn(x)))
        return out


class _InputBranch(nn.Module):
    """One stream's branch: BN over its 6 channels, stem graph and temporal layers, the early blocks."""

    def __init__(self, block_args: Sequence[tuple[int, int, int]], adjacency: Tensor, *, edge: bool) -> None:
        super().__init__()
        self.init_bn = nn.BatchNorm2d(6)
        self.stem_scn = SpatialGraphLayer(6, STEM_CHANNELS, adjacency, edge=edge)
        self.stem_tcn = TemporalBasicLayer(STEM_CHANNELS)
        blocks, channels = [], STEM_CHANNELS
        for out_channels, stride, depth in block_args:
            blocks.append(EfficientGCNBlock(channels, out_channels, stride, depth, adjacency, edge=edge))
            channels = out_channels
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.blocks(self.stem_tcn(self.stem_scn(self.init_bn(x))))
        return out


class EfficientGCN(nn.Module):
    """EfficientGCN on raw NTU joints, with the backbone protocol.

    Args:
        num_classes: size of the classifier output.
        block_args: (channels, temporal stride, depth) of the four blocks, e.g.
            ``scale_block_args(2)`` for B2; blocks 0 and 1 run in each input branch.
        drop_prob: dropout before the classifier (0.25).
        edge: learn a per-layer edge mask over the graph partitions (the official default).

    Shapes: ``x: (N, 3, T, 25, M)`` raw joints (M bodies; missing bodies are zeros and take part in
    the average) -> features ``(N, C)`` with C the last block's channels -> logits
    ``(N, num_classes)``. Inside, bodies are folded into the batch: row ``n * M + m`` is body m of
    sample n, and the last block outputs ``(N * M, C, ceil(T / 4), 25)``.

    Raises:
        ImportError: torch-geometric (the ``[gcn]`` extra) is missing; it builds the graph.
    """

    def __init__(
        self,
        num_classes: int,
        *,
        block_args: Sequence[tuple[int, int, int]],
        drop_prob: float = 0.25,
        edge: bool = True,
    ) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        if len(block_args) <= FUSION_STAGE:
            raise ValueError(f"block_args needs more than {FUSION_STAGE} blocks, got {len(block_args)}")
        if not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"drop_prob must lie in [0, 1), got {drop_prob}")
        adjacency = ntu_hop_adjacency(MAX_GRAPH_DISTANCE + 1)
        early, late = block_args[:FUSION_STAGE], block_args[FUSION_STAGE:]
        self.input_branches = nn.ModuleList(_InputBranch(early, adjacency, edge=edge) for _ in range(3))
        blocks, channels = [], 3 * early[-1][0]  # J, V and B concatenated on channels
        for out_channels, stride, depth in late:
            blocks.append(EfficientGCNBlock(channels, out_channels, stride, depth, adjacency, edge=edge))
            channels = out_channels
        self.main_stream = nn.Sequential(*blocks)
        self.num_features: int = channels
        self.classifier = nn.Sequential(nn.Dropout(drop_prob), nn.Linear(channels, num_classes))
        self._init_parameters()

    def _init_parameters(self) -> None:
        # The official init_param: He init (fan_out, leaky_relu) for convs, 1/0 for BN, N(0, 0.001) for
        # the classifier, zero biases.
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="leaky_relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.001)
                nn.init.zeros_(module.bias)

    @property
    def gradcam_layer(self) -> nn.Module:
        """The last block, whose output is ``(N * M, C, T / 4, 25)`` (bodies folded into the batch)."""
        return self.main_stream[-1]

    def forward_features(self, x: Tensor) -> Tensor:
        """``x: (N, 3, T, 25, M)`` -> features ``(N, C)``, averaged over frames, joints and bodies."""
        if x.ndim != 5 or x.shape[1] != 3 or x.shape[3] != NUM_JOINTS:
            raise ValueError(f"EfficientGCN takes raw joints (N, 3, T, 25, M), got shape {tuple(x.shape)}")
        n, _, t, v, m = x.shape
        bodies = x.permute(0, 4, 1, 2, 3).reshape(n * m, 3, t, v)
        streams = skeleton_streams(bodies)
        fused = torch.cat([branch(s) for branch, s in zip(self.input_branches, streams, strict=True)], dim=1)
        out: Tensor = self.main_stream(fused)
        return out.view(n, m, *out.shape[1:]).mean(dim=(1, 3, 4))

    def forward_head(self, features: Tensor) -> Tensor:
        """``features: (N, C)`` -> logits ``(N, num_classes)`` (dropout, then linear)."""
        logits: Tensor = self.classifier(features)
        return logits

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


@register_backbone("efficientgcn-b0")
def efficientgcn_b0(num_classes: int, *, drop_prob: float = 0.25, edge: bool = True) -> EfficientGCN:
    """EfficientGCN-B0, blocks [[48,1,0],[32,1,0],[64,2,1],[128,2,1]]; see :class:`EfficientGCN`."""
    return EfficientGCN(num_classes, block_args=scale_block_args(0), drop_prob=drop_prob, edge=edge)


@register_backbone("efficientgcn-b2")
def efficientgcn_b2(num_classes: int, *, drop_prob: float = 0.25, edge: bool = True) -> EfficientGCN:
    """EfficientGCN-B2, blocks [[64,1,1],[32,1,1],[96,2,2],[192,2,2]]; see :class:`EfficientGCN`."""
    return EfficientGCN(num_classes, block_args=scale_block_args(2), drop_prob=drop_prob, edge=edge)


@register_backbone("efficientgcn-b4")
def efficientgcn_b4(num_classes: int, *, drop_prob: float = 0.25, edge: bool = True) -> EfficientGCN:
    """EfficientGCN-B4, blocks [[96,1,2],[48,1,2],[128,2,3],[272,2,3]]; see :class:`EfficientGCN`."""
    return EfficientGCN(num_classes, block_args=scale_block_args(4), drop_prob=drop_prob, edge=edge)
