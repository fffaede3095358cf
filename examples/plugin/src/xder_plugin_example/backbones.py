"""``tiny-cnn``: a small two-block CNN behind the backbone interface xder's methods use.

``forward(x) -> logits``, ``forward_features(x) -> (B, num_features)``, ``forward_head``,
``num_features`` and ``gradcam_layer`` (for ``xder-run analyze``). A plugin module: importing it
registers the backbone (``xder.backbones`` entry point, or ``--plugin path/to/backbones.py``).
"""

from __future__ import annotations

from torch import Tensor, nn

from xder_models import register_backbone

__all__ = ["TinyCNN", "tiny_cnn"]


class TinyCNN(nn.Module):
    """conv3x3-BN-ReLU-maxpool, conv3x3-BN-ReLU, global average pooling, a linear head."""

    def __init__(self, num_classes: int, *, width: int = 16, in_channels: int = 3) -> None:
        super().__init__()
        self.block1 = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.block2 = nn.Sequential(
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False), nn.BatchNorm2d(2 * width), nn.ReLU()
        )
        self.num_features = 2 * width
        self.head = nn.Linear(self.num_features, num_classes)
        self.gradcam_layer = self.block2

    def forward_features(self, x: Tensor) -> Tensor:
        return self.block2(self.block1(x)).mean(dim=(2, 3))

    def forward_head(self, features: Tensor) -> Tensor:
        return self.head(features)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


@register_backbone("tiny-cnn")
def tiny_cnn(num_classes: int, *, width: int = 16, in_channels: int = 3) -> TinyCNN:
    """A :class:`TinyCNN`; ``--set backbone.width=8`` and ``backbone.in_channels`` are its options."""
    return TinyCNN(num_classes, width=width, in_channels=in_channels)
