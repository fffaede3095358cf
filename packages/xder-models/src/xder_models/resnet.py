"""ResNet18 for small images, as in the X-DER paper's Split CIFAR-100 experiments.

The layout of the authors' code (mammoth ``backbone/ResNet18.py``, after iCaRL): a 3x3 stride-1
stem without max-pool, BasicBlocks [2, 2, 2, 2] with widths w, 2w, 4w, 8w and first strides
1/2/2/2, 1x1-conv + BN shortcuts where shape changes, global average pooling, one linear layer.
With w = 64 and 100 classes it has 11,220,132 parameters (docs/data-formats.md, "ResNet18").
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from xder_models._registry import register_backbone

__all__ = ["BasicBlock", "ResNet18CIFAR", "resnet18_cifar"]


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with a residual connection (He et al., 2016)."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18CIFAR(nn.Module):
    """CIFAR-style ResNet18 (3x3 stem, no max-pool).

    Args:
        num_classes: size of the classifier output.
        width: filters of the first stage (64 in the paper; the stages use w, 2w, 4w, 8w).
        in_channels: input channels (3 for RGB, 1 for ``seq-digits``).

    Shapes: ``x: (B, in_channels, H, W)`` -> features ``(B, 8 * width)`` -> logits
    ``(B, num_classes)``.
    """

    def __init__(self, num_classes: int, *, width: int = 64, in_channels: int = 3) -> None:
        super().__init__()
        if width < 1 or in_channels < 1 or num_classes < 1:
            raise ValueError("width, in_channels and num_classes must be positive")
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        planes = width
        stages = []
        for i, stride in enumerate((1, 2, 2, 2)):
            out_planes = width * 2**i
            stages.append(
                nn.Sequential(BasicBlock(planes, out_planes, stride), BasicBlock(out_planes, out_planes))
            )
            planes = out_planes
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.num_features = planes
        self.classifier = nn.Linear(planes, num_classes)

    @property
    def gradcam_layer(self) -> nn.Module:
        """The last residual block: Grad-CAM's recommended target for ResNets."""
        return self.layer4[-1]

    def pnn_stages(self) -> tuple[nn.Module, ...]:
        """The network as PNN's chain of stages (``xder_methods.StagedBackbone``): the stem with
        the first residual stage, the second, the third, the fourth with the global average
        pooling, the classifier; its laterals join the outputs of the last four, as the authors'
        PNN ResNet builds them (mammoth ``backbone/ResNet18_PNN.py``: into ``layer2``-``layer4``
        and the logits; a stage's output is after a ReLU, so pooling the fourth stage's sum with
        its lateral equals adding the pooled two)."""
        stem = nn.Sequential(self.conv1, self.bn1, nn.ReLU(), self.layer1)
        return (
            stem,
            self.layer2,
            self.layer3,
            nn.Sequential(self.layer4, nn.AdaptiveAvgPool2d(1), nn.Flatten()),
            self.classifier,
        )

    def forward_features(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return F.adaptive_avg_pool2d(out, 1).flatten(1)

    def forward_head(self, features: Tensor) -> Tensor:
        logits: Tensor = self.classifier(features)
        return logits

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


@register_backbone("resnet18-cifar")
def resnet18_cifar(num_classes: int, *, width: int = 64, in_channels: int = 3) -> ResNet18CIFAR:
    """CIFAR ResNet18 of the paper (Split CIFAR-100); see :class:`ResNet18CIFAR`."""
    return ResNet18CIFAR(num_classes, width=width, in_channels=in_channels)
