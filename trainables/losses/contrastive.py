"""Contrastive loss (Hadsell, Chopra & LeCun, CVPR 2006), via pytorch-metric-learning.

Defaults: Psomas 2020 Table 4 (margin λ 0.5) and Table 5 (no miner: all pairs of the batch). The
thesis's margin is PML's ``neg_margin`` (negatives are pushed beyond distance λ); ``pos_margin``
stays 0 (positives are pulled together), as in the thesis code
(``losses.ContrastiveLoss(neg_margin=self.margin)``). Distance: PML's default, Euclidean on
L2-normalised embeddings.
"""

from __future__ import annotations

from pytorch_metric_learning import losses

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss


@register_loss(
    "contrastive",
    defaults={"margin": 0.5},
    source="Psomas 2020 Table 4/5; Hadsell et al. CVPR 2006",
    needs_m_per_class=True,
)
def build(*, num_classes: int, embedding_size: int, margin: float) -> LossBundle:
    del num_classes, embedding_size  # pair-based: no class parameters
    return LossBundle(criterion=losses.ContrastiveLoss(pos_margin=0.0, neg_margin=margin))
