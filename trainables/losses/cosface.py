"""CosFace, the large-margin cosine loss (Wang et al., CVPR 2018), as MemVir wraps it.

    L = −(1/B) Σ_i log( e^{s(cos θ_{i,y_i} − m)} / Σ_c e^{s(cos θ_{i,c} − m·[c = y_i])} )

with cosines of L2-normalised embeddings and class weights (the paper's Eq. 4): the margin m is
subtracted from the target class's cosine only.

Defaults: margin m = 0.35 and scale s = 64, the CosFace paper's (§4: s = 64, m = 0.35); MemVir's
code has no CosFace and its paper (Table 2/4) does not print the values it used. Class-weight lr
1e-2 and initialisation as MemVir's Norm-softmax (``--centerlr`` 1e-2; U(−1/√C, 1/√C)).
"""

from __future__ import annotations

import torch

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss
from dmlsearch.trainables.losses._class_weights import cosines
from dmlsearch.trainables.losses._class_weights import margin_softmax_loss
from dmlsearch.trainables.losses.norm_softmax import NormSoftmaxLoss

__all__ = ["CosFaceLoss"]


class CosFaceLoss(NormSoftmaxLoss):
    """Norm-softmax with ``margin`` subtracted from the target cosine."""

    def __init__(self, *, num_classes: int, embedding_size: int, margin: float,
                 scale: float) -> None:
        super().__init__(num_classes=num_classes, embedding_size=embedding_size, scale=scale)
        self.margin = margin

    def loss_from(
        self, embeddings: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        cos = cosines(embeddings, weights)
        target = cos.gather(1, labels.unsqueeze(1)).squeeze(1) - self.margin
        return margin_softmax_loss(cos, labels, target, scale=self.scale)


@register_loss(
    "cosface",
    defaults={"margin": 0.35, "scale": 64.0, "lr": 1e-2},
    source="Wang et al. CVPR 2018 §4 (m 0.35, s 64); MemVir reference code (lr, init)",
    uses_proxies=True,
    supports_memvir=True,
)
def build(
    *, num_classes: int, embedding_size: int, margin: float, scale: float, lr: float
) -> LossBundle:
    criterion = CosFaceLoss(num_classes=num_classes, embedding_size=embedding_size,
                            margin=margin, scale=scale)
    return LossBundle(criterion=criterion, param_lr=lr)
