"""N-pair loss (Sohn, NeurIPS 2016), via pytorch-metric-learning.

Defaults: Psomas 2020 Table 4 (l2 reg 0.02), Table 5 (no miner). PML 2.x has no ``l2_reg_weight``;
the embedding L2 regulariser is ``embedding_regularizer=LpRegularizer()`` (mean L2 norm of the
embeddings) with ``embedding_reg_weight = l2_reg``. Note: this project's embeddings are
L2-normalised (as were the thesis code's, ``is_norm=1``), so the term is the constant
``l2_reg`` and does not change the gradients; it matters only for unnormalised embeddings.
"""

from __future__ import annotations

from pytorch_metric_learning import losses
from pytorch_metric_learning import regularizers

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss


@register_loss(
    "npair",
    defaults={"l2_reg": 0.02},
    source="Psomas 2020 Table 4/5; Sohn NeurIPS 2016",
    needs_m_per_class=True,
)
def build(*, num_classes: int, embedding_size: int, l2_reg: float) -> LossBundle:
    del num_classes, embedding_size  # pair-based: no class parameters
    return LossBundle(
        criterion=losses.NPairsLoss(
            embedding_regularizer=regularizers.LpRegularizer(), embedding_reg_weight=l2_reg
        )
    )
