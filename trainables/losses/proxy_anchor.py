"""Proxy-Anchor loss (Kim et al., CVPR 2020), via pytorch-metric-learning.

Defaults: SPEC §4 Table 4 (margin 0.1, α 32). The proxies get their own learning rate
``loss.lr``; the reference code uses 100× the backbone's (1e-4 × 100 = 1e-2).
"""

from __future__ import annotations

from pytorch_metric_learning import losses

from trainables.losses._base import LossBundle
from trainables.losses._base import register_loss


@register_loss(
    "proxy_anchor",
    defaults={"margin": 0.1, "alpha": 32.0, "lr": 1e-2},
    source="Psomas 2020 Table 4; Kim et al. CVPR 2020",
    uses_proxies=True,
)
def build(
    *, num_classes: int, embedding_size: int, margin: float, alpha: float, lr: float
) -> LossBundle:
    criterion = losses.ProxyAnchorLoss(
        num_classes=num_classes, embedding_size=embedding_size, margin=margin, alpha=alpha
    )
    return LossBundle(criterion=criterion, param_lr=lr)
