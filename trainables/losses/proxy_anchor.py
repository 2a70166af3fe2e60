"""Proxy-Anchor loss (Kim et al., CVPR 2020), one proxy per class.

With s(x, p) the cosine of embedding x and proxy p, α the scale, δ the margin, P⁺ the proxies
with at least one positive in the batch, X⁺_p / X⁻_p the batch embeddings of p's class / of the
other classes, and C the number of proxies:

    L = (1/|P⁺|) Σ_{p∈P⁺} log(1 + Σ_{x∈X⁺_p} e^{−α(s(x,p) − δ)})
      + (1/C)    Σ_p      log(1 + Σ_{x∈X⁻_p} e^{ α(s(x,p) + δ)})

Both log(1 + Σ e^…) are computed as log-sum-exp with a 0 appended (no overflow). Equals
pytorch-metric-learning's ``ProxyAnchorLoss`` (same proxies) to rounding, classes absent from the
batch included (tests/trainables/test_losses.py).

Defaults: Psomas 2020 Table 4 (margin 0.1, α 32). The proxies learn at ``lr × loss.lr_mult``,
100 by default: the authors' code and the thesis code give them ``float(args.lr) * 100``
(Proxy-Anchor ``code/train.py``, ``param_groups``; thesis ``train.py``, same place), so a space
that raises ``lr`` (SOP: 6e-4) raises the proxies' too (6e-2). ``loss.lr`` > 0 fixes the
proxies' rate whatever ``lr`` is (0, the default: ``lr × loss.lr_mult``); configurations exported
before ``lr_mult`` existed hold such a fixed ``loss.lr`` and train as they did. Proxies start as
the paper's code (and PML) initialise them: ``kaiming_normal_(mode="fan_out")``.
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
from dmlsearch.trainables.losses._class_weights import log1p_sum_exp

__all__ = ["ProxyAnchorLoss", "proxies_bundle", "proxy_pull_term"]


def proxy_pull_term(
    cos: torch.Tensor, labels: torch.Tensor, *, alpha: float, margin: float
) -> torch.Tensor:
    """(1/|P⁺|) Σ_{p∈P⁺} log(1 + Σ_{x∈X⁺_p} e^{−α(s(x,p) − δ)}) from the B × C cosines."""
    positive = F.one_hot(labels, cos.shape[1]).bool()
    per_proxy = log1p_sum_exp(-alpha * (cos - margin), positive, dim=0)
    return per_proxy.sum() / positive.any(dim=0).sum().clamp_min(1)


class ProxyAnchorLoss(ClassWeightLoss):
    """Proxy-Anchor with margin δ = ``margin`` and scale α = ``alpha``."""

    def __init__(self, *, num_classes: int, embedding_size: int, margin: float,
                 alpha: float) -> None:
        super().__init__(num_classes=num_classes, embedding_size=embedding_size)
        self.margin, self.alpha = margin, alpha

    def reset_parameters(self) -> None:
        nn.init.kaiming_normal_(self.weight, mode="fan_out")

    def loss_from(
        self, embeddings: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        cos = cosines(embeddings, weights)
        negative = F.one_hot(labels, cos.shape[1]) == 0
        push = log1p_sum_exp(self.alpha * (cos + self.margin), negative, dim=0)
        pull = proxy_pull_term(cos, labels, alpha=self.alpha, margin=self.margin)
        return pull + push.sum() / cos.shape[1]


@register_loss(
    "proxy_anchor",
    defaults={"margin": 0.1, "alpha": 32.0, "lr_mult": 100.0, "lr": 0.0},
    source="Psomas 2020 Table 4; Kim et al. CVPR 2020 and its code (proxies at lr x 100)",
    uses_proxies=True,
    supports_memvir=True,
)
def build(
    *, num_classes: int, embedding_size: int, margin: float, alpha: float, lr_mult: float,
    lr: float,
) -> LossBundle:
    criterion = ProxyAnchorLoss(num_classes=num_classes, embedding_size=embedding_size,
                                margin=margin, alpha=alpha)
    return proxies_bundle(criterion, lr_mult=lr_mult, lr=lr)


def proxies_bundle(criterion: nn.Module, *, lr_mult: float, lr: float) -> LossBundle:
    """The bundle of a proxy loss whose proxies learn at ``lr × lr_mult``, or at a fixed ``lr``
    when it is > 0."""
    if lr < 0:
        raise UserError(f"loss.lr must be >= 0 (0: the proxies learn at lr x loss.lr_mult), "
                        f"got {lr:g}; fix loss.lr")
    if lr > 0:
        return LossBundle(criterion=criterion, param_lr=lr)
    if not lr_mult > 0:
        raise UserError(
            f"loss.lr_mult must be a number > 0 (the proxies learn at lr x loss.lr_mult; the "
            f"authors' code: 100), got {lr_mult:g}; fix loss.lr_mult"
        )
    return LossBundle(criterion=criterion, param_lr_mult=lr_mult)
