"""DER++-ACE (``derpp_ace``): DER++ whose stream cross-entropy is ER-ACE's asymmetric one (X-DER
paper, App. "Experimental Illustration of L1", footnote: "we equip DER++ with Asymmetric
Cross-Entropy (ACE) [Caccia et al., ICLR 2022], as it compensates for the bias issue").

One step: ``CE(mask(f(x)), y)`` on the stream (:func:`~xder_methods.parts.losses.asymmetric_mask`: from
task 1 on only the classes present in the batch, during task 0 the classes seen so far), plus
DER++'s unchanged replay terms: ``alpha`` x MSE between the outputs of a weakly augmented buffer
batch and its stored logits, and ``beta`` x the cross-entropy of an independent buffer batch over
all outputs. The reservoir buffer stores each stream example unaugmented with the RAW (unmasked)
logits of its augmented view, as DER++ does.

Defaults: the paper gives no grid for DER++-ACE (it only appears in the secondary-information
analysis on Split CIFAR-100), so they are DER++'s (App. "Hyperparameter Choice", Split CIFAR-100,
M = 500 and 2000): alpha 0.1, beta 0.5 (lr 0.03, momentum 0, weight decay 0 are the benchmark
protocol, not this config).

Deviations: those of ER-ACE's stream term (see :mod:`xder_methods.methods.er_ace`: absent classes,
future ones included, are masked; task 0 uses its own classes), and those of DER/DER++ in this
project (replay from the first step the buffer holds items; cross-entropy and logit matching over
all outputs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from xder_methods.core.protocols import Batch, Scenario
from xder_methods.core.registry import register_method
from xder_methods.methods.derpp import DERpp, DERppConfig
from xder_methods.parts.losses import asymmetric_mask, asymmetric_refusals, masked_cross_entropy

__all__ = ["DERppACE", "DERppACEConfig"]


@dataclass(frozen=True, kw_only=True)
class DERppACEConfig(DERppConfig):
    """Attributes:
    alpha: logit-matching weight (0.1: DER++'s value, paper App. "Hyperparameter Choice", Split
        CIFAR-100; the paper lists no DER++-ACE grid).
    beta: weight of the cross-entropy on a second, independent buffer batch (0.5, same source).
    """


@register_method("derpp_ace", DERppACEConfig)
class DERppACE(DERpp[DERppACEConfig]):
    """DER++ with ER-ACE's masked stream cross-entropy (see the module docstring).

    Scenarios: it runs class-il and task-il, and refuses domain-il and general
    (:attr:`refused_scenarios`): ER-ACE's, for the same reasons (a general stream would make it
    plain DER++).
    """

    refused_scenarios: ClassVar[Mapping[Scenario, str]] = asymmetric_refusals("DER++")

    def stream_loss(self, logits: Tensor, batch: Batch) -> Tensor:
        """ER-ACE's masked cross-entropy (the buffer still stores the raw logits)."""
        mask = asymmetric_mask(
            batch.y, logits.shape[1], task=batch.task, num_seen=self.seen_classes(batch.task)
        )
        return masked_cross_entropy(logits, batch.y, mask)
