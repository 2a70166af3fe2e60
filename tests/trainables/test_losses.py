"""Every registered loss gives a finite loss with gradients on a small batch, and builds with
its Table 4 defaults; the PML objects get the parameters the config names; what we compute
ourselves (lifted structure's mined form, SoftTriple's regulariser) matches a loop."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import distances
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning import miners
from pytorch_metric_learning import regularizers

from trainables.errors import UserError
from trainables.losses import LOSSES
from trainables.losses import LossBundle
from trainables.losses import build_loss
from trainables.losses import resolve_loss_params
from trainables.losses.soft_triple import centre_regulariser


@pytest.mark.parametrize("name", LOSSES.names())
def test_loss_is_finite_and_differentiable(name: str) -> None:
    torch.manual_seed(0)
    emb = F.normalize(torch.randn(16, 8), dim=1).requires_grad_()
    labels = torch.arange(4).repeat_interleave(4)
    bundle = build_loss(name, resolve_loss_params(name, {}), num_classes=4, embedding_size=8)
    loss = bundle(emb, labels)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert emb.grad is not None and torch.isfinite(emb.grad).all()


def test_multi_similarity_maps_thesis_names_to_pml() -> None:
    bundle = build_loss("multi_similarity",
                        resolve_loss_params("multi_similarity", {"margin": 0.8, "alpha": 18,
                                                                 "beta": 76, "epsilon": 0.4}),
                        num_classes=4, embedding_size=8)
    assert (bundle.criterion.base, bundle.criterion.alpha, bundle.criterion.beta) == (0.8, 18, 76)
    assert bundle.miner is not None and bundle.miner.epsilon == 0.4


def test_proxy_anchor_has_proxies_with_their_own_lr() -> None:
    bundle = build_loss("proxy_anchor", resolve_loss_params("proxy_anchor", {"lr": 5e-3}),
                        num_classes=7, embedding_size=8)
    assert bundle.param_lr == 5e-3
    assert [tuple(p.shape) for p in bundle.parameters()] == [(7, 8)]


# ---- thesis names → PML arguments (SPEC §4 Tables 4/5), one test per loss ---------------------


def _defaults(
    name: str, num_classes: int = 4, embedding_size: int = 8, **given: float
) -> LossBundle:
    return build_loss(name, resolve_loss_params(name, given), num_classes=num_classes,
                      embedding_size=embedding_size)


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(4).repeat_interleave(4)
    return F.normalize(torch.randn(16, 8, generator=g), dim=1), labels


def test_pair_and_triplet_losses_ask_for_m_per_class_batches() -> None:
    needs = {name for name in LOSSES.names() if LOSSES.get(name).needs_m_per_class}
    assert needs == {"contrastive", "triplet", "lifted_structure", "npair", "margin",
                     "multi_similarity"}


def test_contrastive_margin_is_the_negative_margin() -> None:
    b = _defaults("contrastive")
    assert isinstance(b.criterion, pml_losses.ContrastiveLoss)
    assert (b.criterion.pos_margin, b.criterion.neg_margin) == (0.0, 0.5)
    assert b.miner is None and b.param_lr is None


def test_triplet_uses_a_semihard_miner_with_the_loss_margin() -> None:
    b = _defaults("triplet", margin=0.3)
    assert isinstance(b.criterion, pml_losses.TripletMarginLoss) and b.criterion.margin == 0.3
    assert isinstance(b.miner, miners.TripletMarginMiner)
    assert (b.miner.margin, b.miner.type_of_triplets) == (0.3, "semihard")
    assert _defaults("triplet").criterion.margin == 0.1


def test_lifted_structure_maps_to_generalized_form_on_cosine_with_hard_miner() -> None:
    b = _defaults("lifted_structure")
    assert isinstance(b.criterion, pml_losses.GeneralizedLiftedStructureLoss)
    assert isinstance(b.criterion.distance, distances.CosineSimilarity)
    assert (b.criterion.pos_margin, b.criterion.neg_margin) == (0.5, 0.0)
    assert isinstance(b.miner, miners.MultiSimilarityMiner) and b.miner.epsilon == 0.1


def _lifted_reference(emb: torch.Tensor, labels: torch.Tensor, margin: float,
                      eps: float = 0.1) -> float:
    """Thesis Eq. 2.21 over the pairs the thesis code's in-loss hard mining keeps (loops)."""
    n, total = len(labels), 0.0
    for i in range(n):
        pos = [float(emb[i] @ emb[k]) for k in range(n) if k != i and labels[k] == labels[i]]
        neg = [float(emb[i] @ emb[k]) for k in range(n) if labels[k] != labels[i]]
        hard_pos = [s for s in pos if s - eps < max(neg)]
        hard_neg = [s for s in neg if s + eps > min(pos)]
        if not hard_pos or not hard_neg:
            continue
        term = (math.log(sum(math.exp(margin - s) for s in hard_pos))
                + math.log(sum(math.exp(s) for s in hard_neg)))
        total += max(term, 0.0)
    return total / n


@pytest.mark.parametrize("separation", [0.4, 1.5, 2.0])
def test_lifted_structure_equals_thesis_equation_with_its_hard_mining(separation: float) -> None:
    emb, labels = _batch()
    # Classes pulled apart: the miner drops some pairs (0.4), whole anchors (1.5), all (2.0).
    emb = F.normalize(emb + separation * F.one_hot(labels, 8).float(), dim=1)
    bundle = _defaults("lifted_structure", margin=0.3)
    a1, _, a2, _ = bundle.miner(emb, labels)
    assert set(a1.tolist()) == set(a2.tolist())  # an anchor gets both kinds of pair or none
    got = bundle(emb, labels).item()
    assert got == pytest.approx(_lifted_reference(emb, labels, 0.3), rel=1e-5, abs=1e-6)


def test_npair_l2_reg_is_the_embedding_regulariser_weight() -> None:
    b = _defaults("npair")
    assert isinstance(b.criterion, pml_losses.NPairsLoss)
    assert isinstance(b.criterion.embedding_regularizer, regularizers.LpRegularizer)
    assert b.criterion.embedding_reg_weight == 0.02
    emb, labels = _batch()
    plain = float(_defaults("npair", l2_reg=0.0)(emb, labels))
    # Unit-norm embeddings: the regulariser adds exactly l2_reg × mean ‖x‖ = l2_reg.
    assert float(b(emb, labels)) == pytest.approx(plain + 0.02, abs=1e-6)


def test_proxy_nca_scale_and_proxy_lr() -> None:
    b = _defaults("proxy_nca", num_classes=7)
    assert isinstance(b.criterion, pml_losses.ProxyNCALoss)
    assert b.criterion.softmax_scale == 32 and b.param_lr == 1e-5
    assert [tuple(p.shape) for p in b.parameters()] == [(7, 8)]


def test_arcface_margin_in_degrees_scale_and_weights_lr() -> None:
    b = _defaults("arcface", num_classes=5)
    assert isinstance(b.criterion, pml_losses.ArcFaceLoss)
    assert b.criterion.margin == pytest.approx(math.radians(28.6))
    assert b.criterion.scale == 64 and b.param_lr == 1e-4
    assert [tuple(p.shape) for p in b.parameters()] == [(8, 5)]


def test_margin_has_a_learnable_beta_per_class_and_distance_weighted_miner() -> None:
    b = _defaults("margin", num_classes=4)
    c = b.criterion
    assert isinstance(c, pml_losses.MarginLoss)
    assert (c.margin, c.nu, c.learn_beta) == (0.5, 0.0, True)
    assert isinstance(c.beta, torch.nn.Parameter) and c.beta.shape == (4,)
    assert torch.allclose(c.beta.detach(), torch.full((4,), 1.2))
    assert isinstance(b.miner, miners.DistanceWeightedMiner)
    assert (b.miner.cutoff, b.miner.nonzero_loss_cutoff) == (0.5, 1.4)
    assert b.param_lr == 5e-5
    torch.manual_seed(0)
    emb, labels = _batch()
    b(emb, labels).backward()
    assert c.beta.grad is not None and c.beta.grad.abs().sum() > 0


def test_soft_triple_maps_thesis_gamma_to_pml_inverse() -> None:
    b = _defaults("soft_triple", num_classes=4)
    c = b.criterion
    assert isinstance(c, pml_losses.SoftTripleLoss)
    assert (c.la, c.margin, c.centers_per_class, c.tau) == (20, 0.1, 2, 0.2)
    assert c.gamma == pytest.approx(10.0)  # PML stores 1/gamma_PML; gamma_PML = 1/10
    assert b.param_lr == 1e-4 and c.fc.shape == (8, 4 * 2)
    assert _defaults("soft_triple", gamma=58).criterion.gamma == pytest.approx(58.0)


def test_soft_triple_class_similarity_weights_centres_by_softmax_of_gamma_times_sim() -> None:
    b = _defaults("soft_triple", num_classes=3, centers=4, gamma=7)
    emb, _ = _batch()
    fc = F.normalize(b.criterion.fc.detach(), dim=0)
    got = b.criterion.get_logits(emb).detach()
    for i in range(len(emb)):
        for c in range(3):
            sims = [float(emb[i] @ fc[:, c * 4 + k]) for k in range(4)]
            weights = [math.exp(7 * s) for s in sims]
            want = sum(w * s for w, s in zip(weights, sims)) / sum(weights)
            assert float(got[i, c]) == pytest.approx(want, abs=1e-5)


def _centre_reg_reference(fc: torch.Tensor, num_classes: int, k: int) -> float:
    w = [fc[:, j] / fc[:, j].norm() for j in range(fc.shape[1])]
    total = 0.0
    for c in range(num_classes):
        for t in range(k):
            for s in range(t + 1, k):
                total += math.sqrt(2 + 1e-5 - 2 * float(w[c * k + t] @ w[c * k + s]))
    return total / (num_classes * k * (k - 1))


def test_soft_triple_centre_regulariser_matches_a_loop() -> None:
    fc = torch.randn(8, 4 * 3, generator=torch.Generator().manual_seed(3))
    got = float(centre_regulariser(fc, 4, 3))
    assert got == pytest.approx(_centre_reg_reference(fc, 4, 3), rel=1e-6)


def test_soft_triple_loss_is_pml_plus_tau_times_regulariser() -> None:
    b = _defaults("soft_triple", num_classes=4, centers=3, tau=0.3)
    plain = pml_losses.SoftTripleLoss(num_classes=4, embedding_size=8, centers_per_class=3,
                                      la=20, gamma=0.1, margin=0.1)
    plain.fc.data.copy_(b.criterion.fc.data)
    emb, labels = _batch()
    reg = _centre_reg_reference(b.criterion.fc.detach(), 4, 3)
    got, want = b(emb, labels).item(), plain(emb, labels).item() + 0.3 * reg
    assert got == pytest.approx(want, rel=1e-5)
    one = _defaults("soft_triple", num_classes=4, centers=1)  # K = 1: no regulariser
    plain1 = pml_losses.SoftTripleLoss(num_classes=4, embedding_size=8, centers_per_class=1,
                                       la=20, gamma=0.1, margin=0.1)
    plain1.fc.data.copy_(one.criterion.fc.data)
    assert one(emb, labels).item() == pytest.approx(plain1(emb, labels).item(), rel=1e-6)


@pytest.mark.parametrize("given", [{"centers": 2.5}, {"centers": 0}, {"gamma": 0}])
def test_soft_triple_rejects_impossible_values(given: dict[str, float]) -> None:
    with pytest.raises(UserError, match=f"loss.{next(iter(given))}"):
        _defaults("soft_triple", **given)
