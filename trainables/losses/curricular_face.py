"""CurricularFace (Huang et al., CVPR 2020): ArcFace's target logit plus an adaptive curriculum
on the hard negatives. pytorch-metric-learning has no CurricularFace; this follows the paper
(Eqs. 6–10, Algorithm 1) and the authors' code (github.com/HuangYG123/CurricularFace).

With cos θ_{i,c} the cosine of the L2-normalised embedding x̂_i and class weight ŵ_c:

- target logit T(cos θ_y) = cos(θ_y + m) while cos θ_y > cos(π − m), else cos θ_y − m·sin m
  (the ArcFace fallback that keeps T monotonic);
- a negative c is *hard* when cos θ_c > cos(θ_y + m) (misclassified under the margin); its logit
  becomes N(t, cos θ_c) = cos θ_c (t + cos θ_c); easy negatives keep cos θ_c;
- t is the curriculum: an exponential moving average of r = the batch's mean target cosine
  (before the margin, no gradient), t ← 0.01·r + 0.99·t, t₀ = 0. As in Algorithm 1 and the code,
  t is updated from the current batch *before* it modulates this batch's hard negatives. Early in
  training r (so t) is small and hard negatives are down-weighted; later t grows and they count
  more. t is a buffer: saved in ``state_dict`` and restored on resume. It is updated only in
  training mode (``module.train()``).
- L = mean_i cross-entropy(s · logits_i, y_i).

Under MemVir the batch is [current ∪ virtual] rows, so r is their mean target cosine.

Defaults: m = 0.5 (radians; the paper's) and s = 64, the paper's §4.1 settings, and its momentum
0.01 on r (the authors' code: ``t = target_logit.mean() * 0.01 + (1 - 0.01) * t``). Class-weight
lr 1e-2 as MemVir's reference code for its class weights (``--centerlr``); initialisation as the
authors' code, ``normal_(std=0.01)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss
from dmlsearch.trainables.losses._class_weights import ClassWeightLoss
from dmlsearch.trainables.losses._class_weights import cosines
from dmlsearch.trainables.losses._class_weights import margin_softmax_loss

__all__ = ["CurricularFaceLoss"]

MOMENTUM = 0.01  # weight of the new batch statistic r in t's moving average (authors' code)


class CurricularFaceLoss(ClassWeightLoss):
    """CurricularFace with margin ``margin`` (radians) and scale ``scale``; buffer ``t``."""

    t: torch.Tensor

    def __init__(self, *, num_classes: int, embedding_size: int, margin: float,
                 scale: float) -> None:
        super().__init__(num_classes=num_classes, embedding_size=embedding_size)
        self.margin, self.scale = margin, scale
        self.register_buffer("t", torch.zeros(()))

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.01)

    def loss_from(
        self, embeddings: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        m = self.margin
        cos = cosines(embeddings, weights).clamp(-1, 1)
        target = cos.gather(1, labels.unsqueeze(1))  # B × 1
        sin = (1.0 - target * target).clamp_min(0).sqrt()
        cos_target_m = target * math.cos(m) - sin * math.sin(m)  # cos(θ_y + m)
        final_target = torch.where(target > math.cos(math.pi - m), cos_target_m,
                                   target - m * math.sin(m))
        if self.training:
            with torch.no_grad():
                r = target.mean().to(self.t.dtype)
                self.t.mul_(1.0 - MOMENTUM).add_(MOMENTUM * r)
        t = self.t.to(cos.dtype)
        hard = cos > cos_target_m.detach()
        logits = torch.where(hard, cos * (t + cos), cos)
        return margin_softmax_loss(logits, labels, final_target.squeeze(1), scale=self.scale)


@register_loss(
    "curricular_face",
    defaults={"margin": 0.5, "scale": 64.0, "lr": 1e-2},
    source="Huang et al. CVPR 2020 §4.1 (m 0.5, s 64) and code; MemVir reference code (lr)",
    uses_proxies=True,
    supports_memvir=True,
)
def build(
    *, num_classes: int, embedding_size: int, margin: float, scale: float, lr: float
) -> LossBundle:
    criterion = CurricularFaceLoss(num_classes=num_classes, embedding_size=embedding_size,
                                   margin=margin, scale=scale)
    return LossBundle(criterion=criterion, param_lr=lr)
