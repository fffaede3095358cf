"""EfficientNet-B2, as in the X-DER paper's Split miniImageNet experiments (84x84, trained from scratch).

The network is torchvision's ``efficientnet_b2``, which matches the paper's table channel for channel
(docs/data-formats.md, "EfficientNet-B2 at 84x84"): a stride-2 3x3 stem of 32 channels, 23 MBConv
blocks in seven stages (16, 24, 48, 88, 120, 208, 352 channels; repeats 2, 3, 3, 4, 4, 5, 2), a 1x1
head conv to 1408 channels, global average pooling, dropout 0.3 and a linear layer: 7,841,894
parameters with 100 classes. At 84x84 the maps are 42, 42, 21, 11, 6, 6, 3, 3 and 3 pixels wide
(stem, stages 1-7, head).

Differences from the port in the X-DER authors' code (mammoth ``backbone/EfficientNet.py``, after
lukemelas/EfficientNet-PyTorch):

* Padding: torchvision pads symmetrically by (k - 1) // 2; the authors' port uses TensorFlow's "same"
  padding, computed statically for 260 px (e.g. ZeroPad2d (0, 1, 0, 1) before the stem). The extra
  pixel depends only on the parity of the input, so every map size at 84x84 is the same; only the
  pixel alignment shifts by one.
* BatchNorm: torchvision uses eps 1e-5 and momentum 0.1; the port uses TensorFlow's eps 1e-3 and
  momentum 0.01 (decay 0.99). The ``batchnorm_eps`` and ``batchnorm_momentum`` options select either.
* Stochastic depth: torchvision's ``StochasticDepth`` ("row" mode) with probability 0.2 * i / 23 for
  block i; the port's ``drop_connect`` uses 0.2 * i / 23 too. Same effect.
* Dropout before the classifier is not in place here (torchvision's is), so that ``forward_head``
  leaves the features it is given untouched.
* Names follow torchvision (``features.0`` ... ``features.8``, ``classifier.1``), not the port's
  (``_conv_stem``, ``_blocks``, ``_conv_head``), so torchvision state dicts load.
"""

from __future__ import annotations

import functools

from torch import Tensor, nn

from xder_models._registry import register_backbone

__all__ = ["EfficientNetB2", "efficientnet_b2"]


class EfficientNetB2(nn.Module):
    """torchvision's EfficientNet-B2 with the backbone protocol.

    Args:
        num_classes: size of the classifier output.
        dropout: dropout probability before the classifier (0.3 for B2).
        stochastic_depth_prob: stochastic depth probability of the last block (0.2); block i of 23
            drops its residual branch with probability ``stochastic_depth_prob * i / 23``.
        batchnorm_eps: BatchNorm epsilon (torchvision 1e-5; the authors' port 1e-3).
        batchnorm_momentum: BatchNorm momentum (torchvision 0.1; the authors' port 0.01).

    Shapes: ``x: (B, 3, H, W)`` -> features ``(B, 1408)`` -> logits ``(B, num_classes)``.
    """

    def __init__(
        self,
        num_classes: int,
        *,
        dropout: float = 0.3,
        stochastic_depth_prob: float = 0.2,
        batchnorm_eps: float = 1e-5,
        batchnorm_momentum: float = 0.1,
    ) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        if not 0.0 <= dropout < 1.0 or not 0.0 <= stochastic_depth_prob < 1.0:
            raise ValueError("dropout and stochastic_depth_prob must lie in [0, 1)")
        # Imported here: torchvision.models takes seconds to import, and only this constructor needs it.
        from torchvision.models import efficientnet_b2 as torchvision_efficientnet_b2

        net = torchvision_efficientnet_b2(
            weights=None,
            num_classes=num_classes,
            dropout=dropout,
            stochastic_depth_prob=stochastic_depth_prob,
            norm_layer=functools.partial(nn.BatchNorm2d, eps=batchnorm_eps, momentum=batchnorm_momentum),
        )
        # Adopt torchvision's modules under torchvision's names (its state dicts load unchanged).
        self.features = net.features
        self.avgpool = net.avgpool
        linear = net.classifier[1]
        self.classifier = nn.Sequential(nn.Dropout(dropout), linear)
        self.num_features: int = linear.in_features

    @property
    def gradcam_layer(self) -> nn.Module:
        """The head conv block (1x1 conv 352 -> 1408, BN, SiLU): 1408 x 3 x 3 at 84 px."""
        block: nn.Module = self.features[-1]
        return block

    def forward_features(self, x: Tensor) -> Tensor:
        """``x: (B, 3, H, W)`` -> pooled features ``(B, 1408)``."""
        pooled: Tensor = self.avgpool(self.features(x))
        return pooled.flatten(1)

    def forward_head(self, features: Tensor) -> Tensor:
        """``features: (B, 1408)`` -> logits ``(B, num_classes)`` (dropout, then linear)."""
        logits: Tensor = self.classifier(features)
        return logits

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


@register_backbone("efficientnet-b2")
def efficientnet_b2(
    num_classes: int,
    *,
    dropout: float = 0.3,
    stochastic_depth_prob: float = 0.2,
    batchnorm_eps: float = 1e-5,
    batchnorm_momentum: float = 0.1,
) -> EfficientNetB2:
    """EfficientNet-B2 of the paper (Split miniImageNet, from scratch); see :class:`EfficientNetB2`."""
    return EfficientNetB2(
        num_classes,
        dropout=dropout,
        stochastic_depth_prob=stochastic_depth_prob,
        batchnorm_eps=batchnorm_eps,
        batchnorm_momentum=batchnorm_momentum,
    )
