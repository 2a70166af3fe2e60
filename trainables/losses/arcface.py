"""ArcFace loss (Deng et al., CVPR 2019), via pytorch-metric-learning.

Defaults: SPEC §4 Table 4 (margin λ 28.6 degrees, scale s 64, weights lr 1e-4), Table 5 (no
miner). PML's ``margin`` is in degrees (converted to radians inside, 28.6° ≈ 0.5 rad, the
paper's m) and ``scale`` is s. The class weights W (d × C) train at ``loss.lr``.
"""

from __future__ import annotations

from pytorch_metric_learning import losses

from trainables.losses._base import LossBundle
from trainables.losses._base import register_loss


@register_loss(
    "arcface",
    defaults={"margin": 28.6, "scale": 64.0, "lr": 1e-4},
    source="Psomas 2020 Table 4/5; Deng et al. CVPR 2019",
    uses_proxies=True,
)
def build(
    *, num_classes: int, embedding_size: int, margin: float, scale: float, lr: float
) -> LossBundle:
    criterion = losses.ArcFaceLoss(
        num_classes=num_classes, embedding_size=embedding_size, margin=margin, scale=scale
    )
    return LossBundle(criterion=criterion, param_lr=lr)
