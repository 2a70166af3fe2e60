"""ProxyNCA loss (Movshovitz-Attias et al., ICCV 2017), one proxy per class.

    L = −(1/B) Σ_i log( e^{−s d(x_i, p_{y_i})} / Σ_c e^{−s d(x_i, p_c)} ),   d(x, p) = ‖x̂ − p̂‖²

with x̂, p̂ L2-normalised (so d = 2 − 2 cos). The positive proxy is in the denominator, as in
pytorch-metric-learning's ``ProxyNCALoss`` (which the thesis used) and MemVir's ``ProxyNCA``.
This module equals PML's (same proxies) to rounding; one deliberate difference: PML drops a row
whose softmax probability underflows to 0 in the working precision, we compute the log-softmax
directly and keep it (tests/trainables/test_losses.py).

Defaults: Psomas 2020 Table 4 (proxy lr 1e-5), Table 5 (no miner). ``loss.scale`` is s, PML's
``softmax_scale`` (the NCA softmax's inverse temperature); Table 4 gives none, and the thesis
code used 32 (``class Proxy_NCA: def __init__(self, nb_classes, sz_embed, scale=32)``, built
without a scale in ``train.py``), so 32 is the default. Proxies (C × d) start i.i.d.
N(0, ``init_std``²): 1 by default, PML's initialisation (the thesis code's). MemVir's code draws
``kaiming_normal_(mode="fan_out")`` on its d × C weight, std sqrt(2/d) (``loss/softmax_variants.py``,
``ProxyNCA``; ``--init_type normal``), 0.0625 at d 512, so its spaces set that: under Adam with
eps 0.01 the scale of the proxies sets how fast they turn (16x slower at N(0, 1)).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss
from dmlsearch.trainables.losses._class_weights import ClassWeightLoss
from dmlsearch.trainables.losses._class_weights import cosines

__all__ = ["ProxyNCALoss"]


class ProxyNCALoss(ClassWeightLoss):
    """NCA over proxies with squared distances of normalised vectors, scaled by ``scale``."""

    def __init__(self, *, num_classes: int, embedding_size: int, scale: float,
                 init_std: float = 1.0) -> None:
        self.init_std = init_std  # read by reset_parameters, which the base __init__ calls
        super().__init__(num_classes=num_classes, embedding_size=embedding_size)
        self.scale = scale

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=self.init_std)

    def loss_from(
        self, embeddings: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        dist = (2.0 - 2.0 * cosines(embeddings, weights)).clamp_min(0)
        return F.cross_entropy(-self.scale * dist, labels)


@register_loss(
    "proxy_nca",
    defaults={"lr": 1e-5, "scale": 32.0, "init_std": 1.0},
    source="Psomas 2020 Table 4 and reference code; Movshovitz-Attias et al. ICCV 2017",
    uses_proxies=True,
    supports_memvir=True,
)
def build(*, num_classes: int, embedding_size: int, lr: float, scale: float,
          init_std: float) -> LossBundle:
    if not init_std > 0:
        raise UserError(f"loss.init_std must be a number > 0 (the proxies' starting std; 1: "
                        f"PML's, 0.0625: MemVir's at 512-d), got {init_std:g}; fix loss.init_std")
    criterion = ProxyNCALoss(num_classes=num_classes, embedding_size=embedding_size, scale=scale,
                             init_std=init_std)
    return LossBundle(criterion=criterion, param_lr=lr)
