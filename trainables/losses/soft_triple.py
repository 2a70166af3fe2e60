"""SoftTriple loss (Qian et al., ICCV 2019) with the paper's centre regulariser, via PML.

Defaults: Psomas 2020 Table 4 (margin λ 0.1, scale 20, weights lr 1e-4, gamma 10, tau 0.2), Table 5
(no miner). Mapping to PML's ``SoftTripleLoss``: ``la`` = scale (the paper's λ); ``margin`` = δ;
the thesis's gamma multiplies the similarities inside the softmax over a class's centres (the
thesis code's ``softmax(simStruc * gamma)``, default ``1./0.1``), i.e. it is the paper's 1/γ,
while PML takes the paper's γ and stores ``1/gamma``: we pass ``gamma = 1 / loss.gamma``.
``loss.centers`` is the number of centres per class K: the thesis code hard-codes 2
(``self.centers_per_class = 2``), the paper uses 10.

PML has no centre regulariser, so we add the paper's (and its code's)
``τ · Σ_c Σ_{t<s} sqrt(2 + 1e-5 − 2 ŵ_c^tᵀ ŵ_c^s) / (C K (K − 1))`` over the L2-normalised centres
of each class, which lets similar centres merge (1e-5 keeps the square root differentiable).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss


def centre_regulariser(fc: torch.Tensor, num_classes: int, centers: int) -> torch.Tensor:
    """The SoftTriple regulariser of centres ``fc`` (d × C·K, class-major columns)."""
    w = F.normalize(fc, dim=0).t().reshape(num_classes, centers, -1)
    sim = w @ w.transpose(1, 2)  # C × K × K
    upper = torch.triu(torch.ones(centers, centers, dtype=torch.bool, device=fc.device), 1)
    dist = torch.sqrt(2.0 + 1e-5 - 2.0 * sim[:, upper])
    return dist.sum() / (num_classes * centers * (centers - 1))


class SoftTripleRegularised(losses.SoftTripleLoss):
    """PML's SoftTripleLoss plus ``tau`` × the centre regulariser (skipped when K = 1)."""

    def __init__(self, *, tau: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tau = tau

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, *args: Any,
                **kwargs: Any) -> torch.Tensor:
        loss = super().forward(embeddings, labels, *args, **kwargs)
        if self.tau > 0 and self.centers_per_class > 1:
            reg = centre_regulariser(self.fc, self.num_classes, self.centers_per_class)
            loss = loss + self.tau * reg.to(loss.dtype)
        return loss


@register_loss(
    "soft_triple",
    defaults={"margin": 0.1, "scale": 20.0, "lr": 1e-4, "gamma": 10.0, "tau": 0.2,
              "centers": 2.0},
    source="Psomas 2020 Table 4 and reference code; Qian et al. ICCV 2019",
    uses_proxies=True,
)
def build(
    *, num_classes: int, embedding_size: int, margin: float, scale: float, lr: float,
    gamma: float, tau: float, centers: float,
) -> LossBundle:
    if centers < 1 or centers != int(centers):
        raise UserError(f"loss.centers must be an integer >= 1, got {centers:g}; "
                        "set e.g. loss.centers=2")
    if not gamma > 0:
        raise UserError(f"loss.gamma must be > 0, got {gamma:g}; set e.g. loss.gamma=10")
    criterion = SoftTripleRegularised(
        tau=tau, num_classes=num_classes, embedding_size=embedding_size,
        centers_per_class=int(centers), la=scale, gamma=1.0 / gamma, margin=margin,
    )
    return LossBundle(criterion=criterion, param_lr=lr)
