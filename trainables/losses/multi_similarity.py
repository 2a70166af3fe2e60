"""MultiSimilarity loss with its miner (Wang et al., CVPR 2019), via pytorch-metric-learning.

Defaults: Psomas 2020 Table 4 (margin λ 0.5, α 2, β 50) and Table 5 (MS miner, ε 0.1). The thesis's
"margin" is PML's ``base``; the miner's ε is searched with the loss (Psomas 2020 Table 15).
"""

from __future__ import annotations

from pytorch_metric_learning import losses
from pytorch_metric_learning import miners

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss


@register_loss(
    "multi_similarity",
    defaults={"margin": 0.5, "alpha": 2.0, "beta": 50.0, "epsilon": 0.1},
    source="Psomas 2020 Table 4/5; Wang et al. CVPR 2019",
    needs_m_per_class=True,
)
def build(
    *, num_classes: int, embedding_size: int, margin: float, alpha: float, beta: float,
    epsilon: float,
) -> LossBundle:
    del num_classes, embedding_size  # pair-based: no class parameters
    return LossBundle(
        criterion=losses.MultiSimilarityLoss(alpha=alpha, beta=beta, base=margin),
        miner=miners.MultiSimilarityMiner(epsilon=epsilon),
    )
