"""The thesis's proxy loss (Psomas 2020, ch. 6), one proxy per class, two variants.

Notation: s(w, x) the cosine of proxy w and embedding x; α > 0 a scale, λ a margin; W all C
proxies, W⁺ those with a positive in the batch X (B embeddings), X⁺_w the embeddings of w's class.
Both variants pull like Proxy-Anchor and push *proxies* from each other:

    pull = (1/|W⁺|) Σ_{w∈W⁺} log(1 + Σ_{x∈X⁺_w} e^{−α(s(w,x) − λ)})
    push = (1/|W|)  Σ_{w∈W}  log(1 + Σ_{w⁻∈W, w⁻≠w} e^{α(g(w,w⁻) + λ)})
    L    = pull + push

- variant 1 (Eq. 6.1): g(w, w⁻) = s(w, w⁻), the cosine of the two proxies;
- variant 2 (Eq. 6.2): g(w, w⁻) = Σ_{x∈X} s(w,x)·s(x,w⁻), proxies compared through the batch.

Readings (said here as the thesis's text and code differ):

- Eq. 6.1 prints the push as (1/|W⁻|) Σ_{w∈W⁻}; with W⁻ defined per w that sum is ill-posed. The
  thesis code (``losses.py``, the active ``Proxy_Anchor`` block) averages over all C proxies with
  a 1 − I mask, as Eq. 6.2 does; we do the same for both variants.
- Variant 2 is the thesis code's function: g(w, w⁻) = Σ_{x∈X} s(w,x)·s(x,w⁻), the batch sum
  *unnormalised* (``cos_batch_cnt.T.matmul(cos_batch_cnt)`` in that block). It grows with B, so
  α acts on a spread of about B times a cosine's. (An earlier reading divided the sum by B to
  keep it in [−1, 1]; with α 32 and B 180 that shrank the push exponent's spread from about 5 to
  0.03, and the push all but vanished: not the thesis's loss. Psomas 2020 §6; recipes audit.)
- Every log(1 + Σ e^z) is computed as log-sum-exp over [z…, 0] (``torch.logsumexp`` subtracts
  the maximum first), i.e. softplus(logsumexp z): finite where the thesis code's
  ``log(1 + sum(exp(z)))`` overflows (float32 past e^88), equal to it wherever that is finite.

Defaults: variant 2, the variant the thesis evaluates (§6, Tables 17–19: CUB 65.42, CARS 84.12,
SOP 77.92 R@1) and the one active in its code; margin λ 0.1 and α 32, the defaults of the thesis
code's ``train.py`` (mrg 0.1, alpha 32; ch. 6 prints no values); the proxies learn at
``lr × loss.lr_mult`` with lr_mult 100, the thesis code's ``float(args.lr) * 100`` (``loss.lr``
> 0 fixes their rate instead, as for Proxy-Anchor). Proxies start
as in that code (Proxy-Anchor's), ``kaiming_normal_(mode="fan_out")``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss
from dmlsearch.trainables.losses._class_weights import cosines
from dmlsearch.trainables.losses._class_weights import log1p_sum_exp
from dmlsearch.trainables.losses.proxy_anchor import ProxyAnchorLoss
from dmlsearch.trainables.losses.proxy_anchor import proxies_bundle
from dmlsearch.trainables.losses.proxy_anchor import proxy_pull_term

__all__ = ["ThesisProxyLoss"]

VARIANTS = (1, 2)


class ThesisProxyLoss(ProxyAnchorLoss):
    """The thesis's proxy loss, ``variant`` 1 (Eq. 6.1) or 2 (Eq. 6.2, the batch sum)."""

    def __init__(self, *, num_classes: int, embedding_size: int, variant: int, margin: float,
                 alpha: float) -> None:
        super().__init__(num_classes=num_classes, embedding_size=embedding_size, margin=margin,
                         alpha=alpha)
        if variant not in VARIANTS:
            raise ValueError(f"variant must be 1 or 2, got {variant}")
        self.variant = variant

    def loss_from(
        self, embeddings: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        cos = cosines(embeddings, weights)  # B × C
        if self.variant == 1:
            w = F.normalize(weights.to(cos.dtype), dim=1)
            g = w @ w.t()
        else:
            g = cos.t() @ cos
        others = ~torch.eye(g.shape[0], dtype=torch.bool, device=g.device)
        push = log1p_sum_exp(self.alpha * (g + self.margin), others, dim=1)
        pull = proxy_pull_term(cos, labels, alpha=self.alpha, margin=self.margin)
        return pull + push.mean()


@register_loss(
    "thesis_proxy",
    defaults={"variant": 2.0, "margin": 0.1, "alpha": 32.0, "lr_mult": 100.0, "lr": 0.0},
    source="Psomas 2020 ch. 6 Eqs. 6.1/6.2 and its code (billpsomas/metric-learning)",
    uses_proxies=True,
    supports_memvir=True,
)
def build(
    *, num_classes: int, embedding_size: int, variant: float, margin: float, alpha: float,
    lr_mult: float, lr: float,
) -> LossBundle:
    if variant not in VARIANTS:
        raise UserError(
            f"loss.variant must be 1 (Eq. 6.1: proxies pushed by their cosines) or 2 (Eq. 6.2: "
            f"proxies compared through the batch), got {variant:g}; set loss.variant=1 or 2"
        )
    criterion = ThesisProxyLoss(num_classes=num_classes, embedding_size=embedding_size,
                                variant=int(variant), margin=margin, alpha=alpha)
    return proxies_bundle(criterion, lr_mult=lr_mult, lr=lr)
