"""The MNIST MLP of the DER paper (Buzzega et al., NeurIPS 2020): ``seq-mnist``'s backbone.

As the authors' code defines it (mammoth ``backbone/MNISTMLP.py``): the image flattened,
``Linear(in_features, 100) -> ReLU -> Linear(100, 100) -> ReLU`` as the features, one
``Linear(100, num_classes)`` as the classifier. Every linear layer is initialised as their
``xavier`` does: weights uniform on ``[-a, a]`` with ``a = sqrt(3) * sqrt(2 / (fan_in + fan_out))``
(Glorot uniform, gain 1), biases zero. With 784 inputs and 10 classes it has
784*100+100 + 100*100+100 + 100*10+10 = 89,610 parameters.
"""

from __future__ import annotations

import math

from torch import Tensor, nn
from torch.nn import functional as F

from xder_models._registry import register_backbone

__all__ = ["MNISTMLP", "mnist_mlp", "xavier_uniform_"]

HIDDEN = 100
"""Units of each of the two hidden layers."""


def xavier_uniform_(layer: nn.Linear) -> None:
    """The authors' ``xavier``: weight ~ U(-a, a), ``a = sqrt(3) * sqrt(2 / (fan_in + fan_out))``,
    bias zero (in place)."""
    fan_out, fan_in = layer.weight.shape
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (fan_in + fan_out))
    nn.init.uniform_(layer.weight, -bound, bound)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


class MNISTMLP(nn.Module):
    """Two hidden layers of 100 ReLU units over the flattened image.

    Args:
        num_classes: size of the classifier output.
        in_features: inputs after flattening (784 for 28x28 MNIST).

    Shapes: ``x: (B, *)`` with ``in_features`` values a row -> features ``(B, 100)`` (after the
    second ReLU, as the authors' ``features``) -> logits ``(B, num_classes)``.
    """

    def __init__(self, num_classes: int, *, in_features: int = 28 * 28) -> None:
        super().__init__()
        if num_classes < 1 or in_features < 1:
            raise ValueError("num_classes and in_features must be positive")
        # Each layer registered once: a module reachable under two names (fc1 and features.0)
        # comes back from torch.func.functional_call with new parameter objects, which the
        # optimiser no longer holds (per-example gradients: GSS's scores, oEWC's Fisher).
        self.fc1 = nn.Linear(in_features, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.classifier = nn.Linear(HIDDEN, num_classes)
        self.num_features = HIDDEN
        for layer in (self.fc1, self.fc2, self.classifier):
            xavier_uniform_(layer)

    @property
    def gradcam_layer(self) -> nn.Module:
        """The second hidden layer (an MLP has no spatial map; Grad-CAM over it is one value)."""
        return self.fc2

    def pnn_stages(self) -> tuple[nn.Module, ...]:
        """The network as PNN's chain of stages (``xder_methods.StagedBackbone``): the first
        hidden layer with its ReLU, the second hidden layer before its ReLU, the classifier; its
        laterals join before the second ReLU and at the logits, as the authors' PNN MLP builds
        them (mammoth ``backbone/MNISTMLP_PNN.py``)."""
        return (nn.Sequential(nn.Flatten(), self.fc1, nn.ReLU()), self.fc2, self.classifier)

    def forward_features(self, x: Tensor) -> Tensor:
        features: Tensor = F.relu(self.fc2(F.relu(self.fc1(x.flatten(1)))))
        return features

    def forward_head(self, features: Tensor) -> Tensor:
        logits: Tensor = self.classifier(features)
        return logits

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


@register_backbone("mnist-mlp")
def mnist_mlp(num_classes: int, *, in_features: int = 28 * 28) -> MNISTMLP:
    """The DER paper's MNIST MLP (``seq-mnist``); see :class:`MNISTMLP`."""
    return MNISTMLP(num_classes, in_features=in_features)
