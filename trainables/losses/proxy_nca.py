"""ProxyNCA loss (Movshovitz-Attias et al., ICCV 2017), via pytorch-metric-learning.

Defaults: SPEC §4 Table 4 (proxy lr 1e-5), Table 5 (no miner). ``loss.scale`` is PML's
``softmax_scale`` (the NCA softmax's inverse temperature); Table 4 gives none, and the thesis
code used 32 (``class Proxy_NCA: def __init__(self, nb_classes, sz_embed, scale=32)``, built
without a scale in ``train.py``), so 32 is the default. One proxy per class.
"""

from __future__ import annotations

from pytorch_metric_learning import losses

from trainables.losses._base import LossBundle
from trainables.losses._base import register_loss


@register_loss(
    "proxy_nca",
    defaults={"lr": 1e-5, "scale": 32.0},
    source="Psomas 2020 Table 4 and reference code; Movshovitz-Attias et al. ICCV 2017",
    uses_proxies=True,
)
def build(*, num_classes: int, embedding_size: int, lr: float, scale: float) -> LossBundle:
    criterion = losses.ProxyNCALoss(
        num_classes=num_classes, embedding_size=embedding_size, softmax_scale=scale
    )
    return LossBundle(criterion=criterion, param_lr=lr)
