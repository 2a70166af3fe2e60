"""Margin loss with distance-weighted sampling (Wu et al., ICCV 2017), via PML.

Defaults: Psomas 2020 Table 4 (margin λ 0.5, β 1.2, β lr 5e-5) and Table 5 (distance weighted).
Thesis Eq. 2.23: pairs are positive below β − λ and negative above β + λ. PML's ``MarginLoss``
with ``margin = λ``, ``beta = β`` (its initial value), ``learn_beta=True`` and ``num_classes``
(one learnable β per class, as in the paper), ``nu = 0`` (no β regulariser, as in the thesis
code). Miner: ``DistanceWeightedMiner(cutoff=0.5, nonzero_loss_cutoff=1.4)``, the thesis code's
values (and the paper's). Distance: Euclidean on L2-normalised embeddings.
"""

from __future__ import annotations

from pytorch_metric_learning import losses
from pytorch_metric_learning import miners

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss


@register_loss(
    "margin",
    defaults={"margin": 0.5, "beta": 1.2, "lr": 5e-5},
    source="Psomas 2020 Table 4/5; Wu et al. ICCV 2017",
    needs_m_per_class=True,
)
def build(
    *, num_classes: int, embedding_size: int, margin: float, beta: float, lr: float
) -> LossBundle:
    del embedding_size
    criterion = losses.MarginLoss(
        margin=margin, nu=0.0, beta=beta, learn_beta=True, num_classes=num_classes
    )
    miner = miners.DistanceWeightedMiner(cutoff=0.5, nonzero_loss_cutoff=1.4)
    return LossBundle(criterion=criterion, miner=miner, param_lr=lr)
