"""Lifted-structure loss (Song et al., CVPR 2016) in the thesis's per-anchor form, via PML.

Thesis Eq. 2.21, with cosine similarity S and margin λ (SPEC §4 Table 4: 0.5)::

    L = mean_i [ log Σ_{k: y_k = y_i} e^{λ − S_ik} + log Σ_{k: y_k ≠ y_i} e^{S_ik} ]_+

is PML's ``GeneralizedLiftedStructureLoss`` (the per-anchor form of Hermans et al. 2017) with
``CosineSimilarity``, ``pos_margin = λ`` and ``neg_margin = 0``. PML's ``LiftedStructureLoss`` is
the original per-positive-pair, squared-hinge form, which is not what the thesis writes.

Miner (Table 5: "hard"): ``MultiSimilarityMiner(epsilon=0.1)``. The thesis code's lifted loss
mines inside the loss exactly this way: negatives with S_neg + 0.1 > the anchor's weakest
positive, positives with S_pos − 0.1 < its strongest negative. A triplet miner such as
``BatchHardMiner`` would leave one positive and one negative per anchor, and the log-sum-exp over
the batch (the point of the loss) would collapse. This miner gives an anchor either both kinds of
pair or none, so no anchor is left with a one-sided term. (The thesis code's loss itself uses
the MS repository's α 40 / β 2 scales and ignores λ; we follow the thesis's text and Table 4.)
"""

from __future__ import annotations

from pytorch_metric_learning import distances
from pytorch_metric_learning import losses
from pytorch_metric_learning import miners

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss

HARD_EPSILON = 0.1  # the thesis code's hard-mining slack (losses.py, LiftedStructureLoss)


@register_loss(
    "lifted_structure",
    defaults={"margin": 0.5},
    source="Psomas 2020 Eq. 2.21, Table 4/5; Song et al. CVPR 2016",
    needs_m_per_class=True,
)
def build(*, num_classes: int, embedding_size: int, margin: float) -> LossBundle:
    del num_classes, embedding_size  # pair-based: no class parameters
    return LossBundle(
        criterion=losses.GeneralizedLiftedStructureLoss(
            pos_margin=margin, neg_margin=0.0, distance=distances.CosineSimilarity()
        ),
        miner=miners.MultiSimilarityMiner(epsilon=HARD_EPSILON),
    )
