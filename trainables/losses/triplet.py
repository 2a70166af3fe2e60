"""Triplet margin loss (Schroff et al., CVPR 2015 / Weinberger & Saul 2009), via PML.

Defaults: Psomas 2020 Table 4 (margin λ 0.1) and Table 5 (semi-hard mining). As in the thesis code,
the miner is PML's ``TripletMarginMiner(margin, type_of_triplets="semihard")`` with the loss's
own margin: it keeps triplets whose negative is farther than the positive but inside the margin
(FaceNet's semi-hard negatives, thesis Eq. 2.20). Distance: Euclidean on L2-normalised embeddings.
"""

from __future__ import annotations

from pytorch_metric_learning import losses
from pytorch_metric_learning import miners

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss


@register_loss(
    "triplet",
    defaults={"margin": 0.1},
    source="Psomas 2020 Table 4/5; Schroff et al. CVPR 2015",
    needs_m_per_class=True,
)
def build(*, num_classes: int, embedding_size: int, margin: float) -> LossBundle:
    del num_classes, embedding_size  # triplet-based: no class parameters
    return LossBundle(
        criterion=losses.TripletMarginLoss(margin=margin),
        miner=miners.TripletMarginMiner(margin=margin, type_of_triplets="semihard"),
    )
