"""ResNet18 in the ImageNet layout, for the X-DER paper's CUB-200 experiments (224x224, pretrained).

This is torchvision's ``resnet18``: a 7x7 stride-2 stem and a 3x3 stride-2 max-pool before the four
stages of BasicBlocks, so ImageNet checkpoints load (a CIFAR-style 3x3 stem cannot take their 7x7
``conv1``; docs/data-formats.md, "ResNet18"). Parameter and buffer names are torchvision's (``conv1``,
``bn1``, ``layer1.0.conv1``, ``layer2.0.downsample.0``, ``fc``), those of ``resnet18-f37072fd.pth``.
With a 200-class head it has 11,279,112 parameters.

``weights`` names a local state_dict file: every tensor but the head is loaded, and ``fc`` stays a
freshly initialised ``512 -> num_classes`` layer, as when the ImageNet head is replaced for CUB-200.
Nothing is downloaded.
"""

from __future__ import annotations

from torch import Tensor, nn

from xder_models._registry import register_backbone
from xder_models._weights import load_weights

__all__ = ["ResNet18", "resnet18"]


class ResNet18(nn.Module):
    """torchvision's ResNet18 (ImageNet layout) with the backbone protocol.

    Args:
        num_classes: size of the classifier ``fc``.
        weights: path of a state_dict with torchvision's key names (e.g. ``resnet18-f37072fd.pth``);
            all but ``fc.*`` is loaded. ``None`` keeps torchvision's random initialisation.

    Shapes: ``x: (B, 3, H, W)`` -> features ``(B, 512)`` -> logits ``(B, num_classes)``; layer4 is
    ``(B, 512, H/32, W/32)`` (7x7 at 224 px).

    Raises:
        BackboneWeightsError: ``weights`` is missing, unreadable, or not a ResNet18 state_dict.
    """

    def __init__(self, num_classes: int, *, weights: str | None = None) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        # Imported here: torchvision.models takes seconds to import, and only this constructor needs it.
        from torchvision.models import resnet18 as torchvision_resnet18

        net = torchvision_resnet18(weights=None, num_classes=num_classes)
        # Adopt torchvision's modules under torchvision's names, so its checkpoints' keys match ours.
        self.conv1, self.bn1, self.relu, self.maxpool = net.conv1, net.bn1, net.relu, net.maxpool
        self.layer1, self.layer2, self.layer3, self.layer4 = net.layer1, net.layer2, net.layer3, net.layer4
        self.avgpool, self.fc = net.avgpool, net.fc
        self.num_features: int = net.fc.in_features
        if weights is not None:
            # The checkpoint's head (1000 ImageNet classes) is dropped: fc keeps its fresh initialisation.
            load_weights(self, weights, skip=("fc.",))

    @property
    def gradcam_layer(self) -> nn.Module:
        """The last residual block: Grad-CAM's recommended target for ResNets."""
        block: nn.Module = self.layer4[-1]
        return block

    def forward_features(self, x: Tensor) -> Tensor:
        """``x: (B, 3, H, W)`` -> pooled features ``(B, 512)``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        pooled: Tensor = self.avgpool(x)
        return pooled.flatten(1)

    def forward_head(self, features: Tensor) -> Tensor:
        """``features: (B, 512)`` -> logits ``(B, num_classes)``."""
        logits: Tensor = self.fc(features)
        return logits

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


@register_backbone("resnet18")
def resnet18(num_classes: int, *, weights: str | None = None) -> ResNet18:
    """ImageNet-layout ResNet18 of the paper (CUB-200), from local weights if given; see :class:`ResNet18`."""
    return ResNet18(num_classes, weights=weights)
