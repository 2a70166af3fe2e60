"""The common core of losses computed against a class-weight (proxy) matrix.

A *class-weight loss* has one learnable row per class, ``weight`` (C × d): the class weights of a
softmax variant (Norm-softmax, CosFace, ArcFace, CurricularFace) or the proxies of a proxy loss
(Proxy-NCA, Proxy-Anchor, the thesis's proxy loss). Every such loss computes its value in one
place, :meth:`ClassWeightLoss.loss_from`, from the embeddings (B × d), their labels (B,) and a
weight matrix with *any* number of rows C' (labels index its rows). The plain ``forward`` is
``loss_from(embeddings, labels, self.weight)``. MemVir (:mod:`trainables.losses.memvir`) calls
the same ``loss_from`` with the batch extended by past embeddings and ``self.weight`` extended by
past weight matrices (virtual classes), so "MemVir with no virtual class equals the plain loss"
holds by construction: it is the same code.

Everything here works on cosines: the embeddings and the weight rows are L2-normalised inside
``loss_from`` (the model's embeddings already are; normalising again is harmless), and the weights
are cast to the embeddings' dtype (the fit loop computes losses in fp32).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ClassWeightLoss", "cosines", "log1p_sum_exp", "margin_softmax_loss"]


class ClassWeightLoss(nn.Module):
    """Base class: a loss against ``weight`` (one row per class, C × d). Subclasses implement
    :meth:`loss_from`; they may set ``weight``'s initialisation by overriding
    :meth:`reset_parameters` (default: standard normal, pytorch-metric-learning's default)."""

    def __init__(self, *, num_classes: int, embedding_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_classes, embedding_size))
        self.reset_parameters()

    @property
    def num_classes(self) -> int:
        return self.weight.shape[0]

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss_from(embeddings, labels, self.weight)

    def loss_from(
        self, embeddings: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """The loss of ``embeddings`` (B × d) with ``labels`` (B,) against ``weights`` (C' × d)."""
        raise NotImplementedError


def cosines(embeddings: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """B × C' cosines between the embeddings and the weight rows (both L2-normalised here)."""
    weights = weights.to(embeddings.dtype)
    return F.normalize(embeddings, dim=1) @ F.normalize(weights, dim=1).t()


def log1p_sum_exp(x: torch.Tensor, keep: torch.Tensor, *, dim: int) -> torch.Tensor:
    """``log(1 + Σ_{kept} e^x)`` along ``dim``, computed as a log-sum-exp with a 0 appended, so it
    never overflows; an all-dropped slice gives log 1 = 0 (and no gradient)."""
    x = x.masked_fill(~keep, float("-inf"))
    zeros = torch.zeros_like(x.narrow(dim, 0, 1))
    return torch.logsumexp(torch.cat([x, zeros], dim=dim), dim=dim)


def margin_softmax_loss(
    cos: torch.Tensor, labels: torch.Tensor, target_logit: torch.Tensor, *, scale: float
) -> torch.Tensor:
    """Mean cross-entropy of ``scale`` × the cosines whose target entries (``cos[i, y_i]``) are
    replaced by ``target_logit[i]``: the shared last step of the softmax variants."""
    logits = cos.scatter(1, labels.unsqueeze(1), target_logit.unsqueeze(1))
    return F.cross_entropy(scale * logits, labels)
