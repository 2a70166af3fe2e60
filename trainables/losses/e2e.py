"""E2E: a learned pseudo-distance D trained jointly with the encoder.

Monteiro et al., ICML 2020: a parametric pseudo-distance trained jointly with the encoder
(reference code ``joaomonteirof/e2e_verification``).

**D** (paper App. A.1; code ``make_bin_layers``): an MLP on the concatenation [E(a), E(b)]:
Linear(2d → h), LeakyReLU(0.1), then ``d_layers`` − 1 × [Linear(h → h), LeakyReLU(0.1)],
Dropout(``d_dropout``), Linear(h → 1), sigmoid. Not forced to be symmetric: D(a, b) ≠ D(b, a) in
general. Here D sees the L2-normalised embedding the model outputs, scaled (``d_input_norm``,
below; the reference feeds it the raw, unnormalised one). The sigmoid is folded into BCE-with-logits when training (the same
function, numerically stable) and applied by :meth:`E2ELoss.pair_scores`.

**Pairs** (paper Alg. 1, "GetAllPositivePairs / GetAllNegativePairs"): every *ordered* pair
(i, j), i ≠ j, of the batch, so each unordered pair enters in both orders. D is asymmetric, so
(a, b) and (b, a) are different inputs; training on both orders teaches D to score a trial
whichever item comes first (evaluation scores pairs i < j in dataset order, which may be sorted
by class), and costs nothing extra in embeddings. The first linear layer is applied to each item
once and summed per pair, W·[a; b] + c = W_a·a + W_b·b + c (exact), so a batch of B costs
B²·h additions there instead of B(B−1)·2d·h multiplications.

**BCE balance**: the reference builds one (anchor, positive) and one (anchor, negative) pair per
triplet, so positives and negatives carry equal total weight (``harvester.AllTripletSelector``).
We weight the same way: BCE = ½·mean over positive pairs + ½·mean over negative pairs. A batch
without positive (or negative) pairs uses the other mean alone. Traced against the reference's
train step (tests/trainables/test_reference_traces_memvir_e2e.py): with classes of equal size in
a batch (an m-per-class batch) this is exactly the reference's loss averaged over the order of
the batch (it takes each positive pair in one order only, anchor before positive, and weighs a
negative pair by the anchor's positives after it); on one given order, or with classes of
unequal size, the two differ.

**Label smoothing** ``ε`` (paper §3.2; App. A.2 Cifar-10 choice 0.2): the auxiliary
cross-entropy puts 1 − ε on the true class and ε/(C − 1) on each other (the reference's
``LabelSmoothingLoss``; C counts the classes the fit trains on, as the reference's classifier
does). The reference also smooths the BCE targets, drawing them from
U(1 − ε/2, 1) and U(0, ε/2) (``cifar/``, ``mini_imagenet/``); BCE is linear in its target, so we
use their means 1 − ε/4 and ε/4: the same expected loss and gradient, without the noise.

**Auxiliary head** (paper §3.2, "project z onto the simplex"): ``aux_margin`` = 0 gives a linear
layer (with bias) and plain cross-entropy; ``aux_margin`` > 0 gives additive-margin softmax
(Wang et al. 2018; reference ``models/losses.AMSoftmax``): logits = s·(cos(w_c, z) − m·1[c = y])
with row-normalised weights, cosine clamped to [−1, 1]. Defaults m = 0.35, s = 30 (reference
code, cifar/mini_imagenet/asv). Total loss = BCE + auxiliary, weight 1 : 1 (reference).

**D's input scale** (``d_input_norm``): D's input is the L2-normalised embedding times
``d_input_norm``; 0, the default, means sqrt(embedding_size), so each component has unit
variance on average. The reference feeds D raw pooled features, not unit vectors (``cifar/``: the
ResNet's 512-d average-pooled, post-ReLU features; ``asv/``: the batch-normalised segment layer,
a norm of about sqrt(512)); an MLP at PyTorch's default initialisation fed unit-norm inputs of
64-512 dimensions gets gradients about sqrt(d) times smaller than with such inputs, and under the
source's SGD it barely learns: D alone on fixed, well-separated 64-d embeddings stayed at EER 0.50
after 2,000 steps at scale 1 and reached 0.40 at scale 8-16 (recipes audit, 2026-11-27).
``e2e_voxceleb`` writes its 16 (sqrt of its chosen 256) out.

Defaults: the paper's chosen Cifar-10 configuration (App. A.2.1, marked ∗): 3 hidden layers of
350, dropout 0.2, additive margin, label smoothing 0.2. D and the head train in the loss
parameter group at the trial's ``lr`` (the paper uses one optimiser for E and D) with the
trial's ``weight_decay``, as the reference's optimiser applies its L2 to every parameter.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses._base import LossBundle
from dmlsearch.trainables.losses._base import register_loss

__all__ = ["E2ELoss"]

LEAKY_SLOPE = 0.1
"""LeakyReLU negative slope of D (reference code ``nn.LeakyReLU(0.1)``)."""


class E2ELoss(nn.Module):
    """BCE on all ordered pairs of the batch scored by D, plus an auxiliary classification loss.

    Holds D (``distance``: its layers, the last one giving the pre-sigmoid logit) and the
    auxiliary head (``classifier``) as its own parameters.
    """

    def __init__(
        self, *, num_classes: int, embedding_size: int, d_layers: int, d_size: int,
        d_dropout: float, aux_margin: float, aux_scale: float, label_smoothing: float,
        d_input_norm: float = 0.0,
    ) -> None:
        super().__init__()
        # 0: sqrt(d), unit variance per component on average (module docstring).
        self.d_input_norm = d_input_norm or math.sqrt(embedding_size)
        layers: list[nn.Module] = [nn.Linear(2 * embedding_size, d_size),
                                   nn.LeakyReLU(LEAKY_SLOPE)]
        for _ in range(d_layers - 1):
            layers += [nn.Linear(d_size, d_size), nn.LeakyReLU(LEAKY_SLOPE)]
        layers += [nn.Dropout(d_dropout), nn.Linear(d_size, 1)]
        self.distance = nn.Sequential(*layers)
        self.classifier = nn.Linear(embedding_size, num_classes, bias=aux_margin == 0)
        # The reference's AM-softmax draws kaiming_normal_ on its features x classes weight
        # (cifar/models/losses.py, asv/utils/losses.py: AMSoftmax.init_parameters): fan-in =
        # classes, std sqrt(2 / classes). Only a row's direction enters the loss, but its norm
        # sets how fast SGD turns it: PyTorch's default Linear rows are ~17x shorter.
        nn.init.normal_(self.classifier.weight, std=math.sqrt(2.0 / num_classes))
        self.embedding_size, self.num_classes = embedding_size, num_classes
        self.aux_margin, self.aux_scale = aux_margin, aux_scale
        self.label_smoothing = label_smoothing

    # ---- D -------------------------------------------------------------------------------
    def _halves(
        self, emb_a: torch.Tensor, emb_b: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """W_a·a + c and W_b·b: the first layer of D split over the two halves of [a; b]."""
        first: nn.Linear = self.distance[0]  # type: ignore[assignment]
        d, scale = self.embedding_size, self.d_input_norm
        if scale != 1.0:
            emb_a, emb_b = emb_a * scale, emb_b * scale
        return (F.linear(emb_a, first.weight[:, :d], first.bias),
                F.linear(emb_b, first.weight[:, d:]))

    def pair_logits(self, emb_a: torch.Tensor, emb_b: torch.Tensor) -> torch.Tensor:
        """D's pre-sigmoid output for the row pairs (emb_a[k], emb_b[k]): shape ``[K]``."""
        left, right = self._halves(emb_a, emb_b)
        return self.distance[1:](left + right).squeeze(1)

    @torch.no_grad()
    def pair_scores(self, emb_a: torch.Tensor, emb_b: torch.Tensor) -> torch.Tensor:
        """D(a, b) ∈ (0, 1) per row pair, higher = same class; eval mode (no dropout)."""
        was_training = self.training
        self.eval()
        try:
            return torch.sigmoid(self.pair_logits(emb_a, emb_b))
        finally:
            self.train(was_training)

    # ---- loss ----------------------------------------------------------------------------
    @staticmethod
    def pair_masks(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, B]`` masks of the positive and negative ordered pairs (i, j), i ≠ j."""
        same = labels[:, None] == labels[None, :]
        off_diagonal = ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
        return same & off_diagonal, ~same

    def pair_loss(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Balanced BCE of D over all ordered pairs (targets smoothed to ε/4, 1 − ε/4).

        D is evaluated on the whole B × B grid by broadcasting (the diagonal gets weight 0):
        no gather, so no scatter-add in the backward pass, whose order varies between runs.
        """
        positive, negative = self.pair_masks(labels)
        left, right = self._halves(embeddings, embeddings)
        logits = self.distance[1:](left[:, None, :] + right[None, :, :]).squeeze(-1)
        eps = self.label_smoothing / 4
        target = torch.where(positive, 1.0 - eps, eps).to(logits.dtype)
        bce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
        means = [(bce * mask).sum() / mask.sum() for mask in (positive, negative) if mask.any()]
        if not means:  # a batch of one item
            return embeddings.sum() * 0.0
        return torch.stack(means).mean()

    def aux_loss(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Label-smoothed cross-entropy of the linear head (AM-softmax when aux_margin > 0)."""
        if self.aux_margin > 0:
            cos = F.linear(F.normalize(embeddings, dim=1),
                           F.normalize(self.classifier.weight, dim=1)).clamp(-1.0, 1.0)
            margin = F.one_hot(labels, self.num_classes).to(cos.dtype) * self.aux_margin
            logits = self.aux_scale * (cos - margin)
        else:
            logits = self.classifier(embeddings)
        log_p = F.log_softmax(logits, dim=1)
        eps = self.label_smoothing
        target = torch.full_like(log_p, eps / (self.num_classes - 1))
        target.scatter_(1, labels[:, None], 1.0 - eps)
        return -(target * log_p).sum(dim=1).mean()

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.pair_loss(embeddings, labels) + self.aux_loss(embeddings, labels)


def _positive_int(name: str, value: float, example: int) -> int:
    if value < 1 or value != int(value):
        raise UserError(f"loss.{name} must be an integer >= 1, got {value:g}; "
                        f"set e.g. loss.{name}={example}")
    return int(value)


@register_loss(
    "e2e",
    defaults={"d_layers": 3.0, "d_size": 350.0, "d_dropout": 0.2, "aux_margin": 0.35,
              "aux_scale": 30.0, "label_smoothing": 0.2, "d_input_norm": 0.0},
    source="Monteiro et al. ICML 2020 App. A.2.1 (Cifar-10 choice) and reference code",
    needs_m_per_class=True,
    learned_distance=True,
)
def build(
    *, num_classes: int, embedding_size: int, d_layers: float, d_size: float, d_dropout: float,
    aux_margin: float, aux_scale: float, label_smoothing: float, d_input_norm: float,
) -> LossBundle:
    layers = _positive_int("d_layers", d_layers, 3)
    size = _positive_int("d_size", d_size, 350)
    if not 0.0 <= d_dropout < 1.0:
        raise UserError(f"loss.d_dropout must be in [0, 1), got {d_dropout:g}; "
                        "set e.g. loss.d_dropout=0.2")
    if aux_margin < 0:
        raise UserError(f"loss.aux_margin must be >= 0 (0: plain cross-entropy), got "
                        f"{aux_margin:g}; set e.g. loss.aux_margin=0.35")
    if not aux_scale > 0:
        raise UserError(f"loss.aux_scale must be > 0, got {aux_scale:g}; "
                        "set e.g. loss.aux_scale=30")
    if not 0.0 <= label_smoothing < 1.0:
        raise UserError(f"loss.label_smoothing must be in [0, 1), got {label_smoothing:g}; "
                        "set e.g. loss.label_smoothing=0.2")
    if not d_input_norm >= 0:
        raise UserError(f"loss.d_input_norm must be >= 0 (0: sqrt(embedding_size)), got "
                        f"{d_input_norm:g}; set e.g. loss.d_input_norm=0, or 1 for the "
                        "normalised embedding as it is")
    if num_classes < 2:
        raise UserError(f"loss e2e needs at least 2 classes for its auxiliary classifier, got "
                        f"{num_classes}; use a dataset with more classes")
    criterion = E2ELoss(
        num_classes=num_classes, embedding_size=embedding_size, d_layers=layers, d_size=size,
        d_dropout=d_dropout, aux_margin=aux_margin, aux_scale=aux_scale,
        label_smoothing=label_smoothing, d_input_norm=d_input_norm,
    )
    return LossBundle(criterion=criterion)
