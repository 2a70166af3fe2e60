"""ArcFace loss (Deng et al., CVPR 2019): additive angular margin on the target class.

    L = −(1/B) Σ_i log( e^{s ψ(θ_{i,y_i})} / (e^{s ψ(θ_{i,y_i})} + Σ_{c≠y_i} e^{s cos θ_{i,c}}) )

with θ_{i,c} the angle between the L2-normalised embedding x̂_i and class weight ŵ_c, and
ψ(θ) = cos(θ + m) while θ ≤ π − m, else cos θ − m·sin m (keeps ψ decreasing past π − m, the
form of the paper's code and of pytorch-metric-learning's ``ArcFaceLoss``, which the thesis used
and which this module reproduces to rounding; see tests/trainables/test_losses.py).

Defaults: Psomas 2020 Table 4 (margin λ 28.6 degrees, scale s 64, weights lr 1e-4), Table 5 (no
miner). ``loss.margin`` is in degrees, as in the thesis and PML (28.6° ≈ 0.5 rad, the paper's
m); ``loss.scale`` is s. The class weights (C × d, i.i.d. N(0, 1) as PML's default
initialisation) train at ``loss.lr``.
"""

from __future__ import annotations

import math

import torch

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss
from dmlsearch.trainables.losses._class_weights import ClassWeightLoss
from dmlsearch.trainables.losses._class_weights import cosines
from dmlsearch.trainables.losses._class_weights import margin_softmax_loss

__all__ = ["ArcFaceLoss"]


class ArcFaceLoss(ClassWeightLoss):
    """ArcFace with ``margin`` in degrees (stored in radians as ``margin_rad``)."""

    def __init__(self, *, num_classes: int, embedding_size: int, margin: float,
                 scale: float) -> None:
        super().__init__(num_classes=num_classes, embedding_size=embedding_size)
        self.margin = margin
        self.margin_rad = math.radians(margin)
        self.scale = scale

    def loss_from(
        self, embeddings: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        cos = cosines(embeddings, weights)
        m = self.margin_rad
        angle = torch.acos(cos.gather(1, labels.unsqueeze(1)).squeeze(1).clamp(-1, 1))
        target = torch.where(angle <= math.pi - m, torch.cos(angle + m),
                             torch.cos(angle) - m * math.sin(m))
        return margin_softmax_loss(cos, labels, target, scale=self.scale)


@register_loss(
    "arcface",
    defaults={"margin": 28.6, "scale": 64.0, "lr": 1e-4},
    source="Psomas 2020 Table 4/5; Deng et al. CVPR 2019",
    uses_proxies=True,
    supports_memvir=True,
)
def build(
    *, num_classes: int, embedding_size: int, margin: float, scale: float, lr: float
) -> LossBundle:
    criterion = ArcFaceLoss(num_classes=num_classes, embedding_size=embedding_size,
                            margin=margin, scale=scale)
    return LossBundle(criterion=criterion, param_lr=lr)
