"""EfficientNet-B2 at 84x84: the stage sizes and layout of docs/data-formats.md (its section of that name)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from xder_models import EfficientNetB2, create_backbone

# docs/data-formats.md: (channels, map side) of stem, stages 1-7 and head at 84x84.
STAGES_AT_84 = [(32, 42), (16, 42), (24, 21), (48, 11), (88, 6), (120, 6), (208, 3), (352, 3), (1408, 3)]


@pytest.fixture(scope="module")
def net() -> EfficientNetB2:
    torch.manual_seed(0)
    return create_backbone("efficientnet-b2", 100).eval()


def test_stage_sizes_at_84(net: EfficientNetB2) -> None:
    shapes: list[tuple[int, ...]] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: shapes.append(tuple(out.shape))) for m in net.features
    ]
    try:
        with torch.no_grad():
            logits = net(torch.randn(1, 3, 84, 84))
    finally:
        for hook in hooks:
            hook.remove()
    assert shapes == [(1, c, side, side) for c, side in STAGES_AT_84]
    assert logits.shape == (1, 100)


def test_gradcam_layer_is_the_1408_channel_head_conv(net: EfficientNetB2) -> None:
    assert net.gradcam_layer is net.features[8]
    conv = net.gradcam_layer[0]
    assert isinstance(conv, nn.Conv2d)
    assert (conv.in_channels, conv.out_channels, conv.kernel_size) == (352, 1408, (1, 1))
    assert net.num_features == 1408


def test_blocks_kernels_strides_and_stochastic_depth(net: EfficientNetB2) -> None:
    stages = list(net.features[1:8])
    assert [len(stage) for stage in stages] == [2, 3, 3, 4, 4, 5, 2]  # 23 MBConv blocks
    depthwise = [
        next(m for m in stage[0].modules() if isinstance(m, nn.Conv2d) and m.groups > 1) for stage in stages
    ]
    assert [conv.kernel_size[0] for conv in depthwise] == [3, 3, 5, 3, 5, 5, 3]
    assert [conv.stride[0] for conv in depthwise] == [1, 2, 2, 2, 1, 2, 1]
    assert net.features[0][0].stride == (2, 2)  # the stem
    blocks = [block for stage in stages for block in stage]
    probabilities = [block.stochastic_depth.p for block in blocks]
    assert probabilities == pytest.approx([0.2 * i / 23 for i in range(23)])


def test_names_and_count_match_torchvision(net: EfficientNetB2) -> None:
    reference = torchvision.models.efficientnet_b2(weights=None, num_classes=100)
    assert net.state_dict().keys() == reference.state_dict().keys()
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in reference.parameters())


def test_head_dropout_does_not_touch_the_features(net: EfficientNetB2) -> None:
    features = torch.randn(4, 1408)
    before = features.clone()
    net.train()
    try:
        net.forward_head(features)
    finally:
        net.eval()
    torch.testing.assert_close(features, before)
    assert net.classifier[0].p == 0.3


def test_batchnorm_of_the_authors_port() -> None:
    net = create_backbone("efficientnet-b2", 10, batchnorm_eps=1e-3, batchnorm_momentum=0.01)
    norms = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms
    assert all(m.eps == 1e-3 and m.momentum == 0.01 for m in norms)
    default = create_backbone("efficientnet-b2", 10)
    assert all(
        m.eps == 1e-5 and m.momentum == 0.1 for m in default.modules() if isinstance(m, nn.BatchNorm2d)
    )
