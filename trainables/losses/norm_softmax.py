"""Normalised softmax (Norm-softmax, cosine softmax): Wang et al. ACM MM 2017 (NormFace), the DML
baseline of Zhai & Wu BMVC 2019, and MemVir's main loss (Ko et al. ICCV 2021, Eq. 3).

    L = −(1/B) Σ_i log( e^{s cos θ_{i,y_i}} / Σ_c e^{s cos θ_{i,c}} ),   cos θ_{i,c} = x̂_iᵀ ŵ_c

with x̂, ŵ the L2-normalised embedding and class weight, no bias and no margin (MemVir's
``NormSoftmax`` has none: its ``scatter_`` of the positive logits is a no-op).

Defaults: scale s = 23 and class-weight lr 1e-2, MemVir's published CARS196 recipe (README
command ``--scale 23``; ``--centerlr`` 1e-2 in its ``main.py``). Initialisation as MemVir's code,
``kaiming_uniform_(a=√5)`` on its d × C matrix: i.i.d. U(−1/√C, 1/√C).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss
from dmlsearch.trainables.losses._class_weights import ClassWeightLoss
from dmlsearch.trainables.losses._class_weights import cosines
from dmlsearch.trainables.losses._class_weights import margin_softmax_loss

__all__ = ["NormSoftmaxLoss"]


class NormSoftmaxLoss(ClassWeightLoss):
    """Cross-entropy of ``scale`` × cosines to the class weights."""

    def __init__(self, *, num_classes: int, embedding_size: int, scale: float) -> None:
        super().__init__(num_classes=num_classes, embedding_size=embedding_size)
        self.scale = scale

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[0])
        nn.init.uniform_(self.weight, -bound, bound)

    def loss_from(
        self, embeddings: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        cos = cosines(embeddings, weights)
        target = cos.gather(1, labels.unsqueeze(1)).squeeze(1)
        return margin_softmax_loss(cos, labels, target, scale=self.scale)


@register_loss(
    "norm_softmax",
    defaults={"scale": 23.0, "lr": 1e-2},
    source="Ko et al. ICCV 2021 (MemVir) Eq. 3 and reference recipe; Zhai & Wu BMVC 2019",
    uses_proxies=True,
    supports_memvir=True,
)
def build(*, num_classes: int, embedding_size: int, scale: float, lr: float) -> LossBundle:
    criterion = NormSoftmaxLoss(num_classes=num_classes, embedding_size=embedding_size,
                                scale=scale)
    return LossBundle(criterion=criterion, param_lr=lr)
