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

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses import LOSSES
from dmlsearch.trainables.losses import LossBundle
from dmlsearch.trainables.losses import build_loss
from dmlsearch.trainables.losses import resolve_loss_params
from dmlsearch.trainables.losses.arcface import ArcFaceLoss
from dmlsearch.trainables.losses.proxy_nca import ProxyNCALoss
from dmlsearch.trainables.losses.soft_triple import centre_regulariser
from tests.helpers import embedding_batch


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
    """Proxies learn at lr x lr_mult: 100 by default, as in the authors' code (Proxy-Anchor
    code/train.py and thesis train.py, param_groups: float(args.lr) * 100)."""
    bundle = build_loss("proxy_anchor", resolve_loss_params("proxy_anchor", {}),
                        num_classes=7, embedding_size=8)
    assert bundle.lr_for(1e-4) == pytest.approx(1e-2)
    assert bundle.lr_for(6e-4) == pytest.approx(6e-2)
    bundle = build_loss("proxy_anchor", resolve_loss_params("proxy_anchor", {"lr_mult": 50}),
                        num_classes=7, embedding_size=8)
    assert bundle.lr_for(1e-4) == pytest.approx(5e-3)
    with pytest.raises(UserError, match="loss.lr_mult must be a number > 0"):
        build_loss("proxy_anchor", resolve_loss_params("proxy_anchor", {"lr_mult": 0}),
                   num_classes=7, embedding_size=8)
    fixed = build_loss("proxy_anchor", resolve_loss_params("proxy_anchor", {"lr": 5e-3}),
                       num_classes=7, embedding_size=8)
    assert fixed.lr_for(1e-4) == fixed.lr_for(1e-2) == 5e-3
    with pytest.raises(UserError, match="loss.lr must be >= 0"):
        build_loss("proxy_anchor", resolve_loss_params("proxy_anchor", {"lr": -1}),
                   num_classes=7, embedding_size=8)
    assert [tuple(p.shape) for p in bundle.parameters()] == [(7, 8)]


# ---- thesis names → PML arguments (Psomas 2020, Tables 4/5), one test per loss ---------------


def _defaults(
    name: str, num_classes: int = 4, embedding_size: int = 8, **given: float
) -> LossBundle:
    return build_loss(name, resolve_loss_params(name, given), num_classes=num_classes,
                      embedding_size=embedding_size)


def test_pair_and_triplet_losses_ask_for_m_per_class_batches() -> None:
    needs = {name for name in LOSSES.names() if LOSSES.get(name).needs_m_per_class}
    assert needs == {"contrastive", "triplet", "lifted_structure", "npair", "margin",
                     "multi_similarity", "e2e"}


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


def _hard_mined(emb: torch.Tensor, labels: torch.Tensor, i: int, eps: float
                ) -> tuple[list[float], list[float]]:
    """Anchor i's cosines to the positives and negatives the thesis code's hard mining keeps:
    positives with S - eps < its strongest negative, negatives with S + eps > its weakest
    positive."""
    n = len(labels)
    pos = [float(emb[i] @ emb[k]) for k in range(n) if k != i and labels[k] == labels[i]]
    neg = [float(emb[i] @ emb[k]) for k in range(n) if labels[k] != labels[i]]
    return [s for s in pos if s - eps < max(neg)], [s for s in neg if s + eps > min(pos)]


def _lifted_reference(emb: torch.Tensor, labels: torch.Tensor, margin: float,
                      eps: float = 0.1) -> float:
    """Thesis Eq. 2.21 over the pairs the thesis code's in-loss hard mining keeps (loops)."""
    n, total = len(labels), 0.0
    for i in range(n):
        hard_pos, hard_neg = _hard_mined(emb, labels, i, eps)
        if not hard_pos or not hard_neg:
            continue
        term = (math.log(sum(math.exp(margin - s) for s in hard_pos))
                + math.log(sum(math.exp(s) for s in hard_neg)))
        total += max(term, 0.0)
    return total / n


@pytest.mark.parametrize("separation", [0.4, 1.5, 2.0])
def test_lifted_structure_equals_thesis_equation_with_its_hard_mining(separation: float) -> None:
    emb, labels = embedding_batch()
    # Classes pulled apart: the miner drops some pairs (0.4), whole anchors (1.5), all (2.0).
    emb = F.normalize(emb + separation * F.one_hot(labels, 8).float(), dim=1)
    bundle = _defaults("lifted_structure", margin=0.3)
    a1, _, a2, _ = bundle.miner(emb, labels)
    assert set(a1.tolist()) == set(a2.tolist())  # an anchor gets both kinds of pair or none
    got = bundle(emb, labels).item()
    assert got == pytest.approx(_lifted_reference(emb, labels, 0.3), rel=1e-5, abs=1e-6)


def _generalised_lifted_reference(emb: torch.Tensor, labels: torch.Tensor, alpha: float,
                                  beta: float, eps: float = 0.1) -> float:
    """The thesis code's active LiftedStructureLoss (losses.py; its MS-repository form), read as
    a formula over the same hard-mined pairs, in loops: per anchor (2/beta) log sum e^(-beta S_p)
    + (2/alpha) log sum e^(alpha S_n); anchors without both kinds skipped; divided by B."""
    n, total = len(labels), 0.0
    for i in range(n):
        hard_pos, hard_neg = _hard_mined(emb, labels, i, eps)
        if not hard_pos or not hard_neg:
            continue
        total += (2 / beta * math.log(sum(math.exp(-beta * s) for s in hard_pos))
                  + 2 / alpha * math.log(sum(math.exp(alpha * s) for s in hard_neg)))
    return total / n


@pytest.mark.parametrize("separation", [0.4, 1.5, 2.0])
def test_lifted_structure_variant_2_is_the_thesis_codes_form(separation: float) -> None:
    emb, labels = embedding_batch()
    emb = F.normalize(emb + separation * F.one_hot(labels, 8).float(), dim=1).requires_grad_()
    bundle = _defaults("lifted_structure", variant=2)
    got = bundle(emb, labels)
    want = _generalised_lifted_reference(emb.detach(), labels, alpha=40.0, beta=2.0)
    assert got.item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    got.backward()
    assert torch.isfinite(emb.grad).all()
    other = _defaults("lifted_structure", variant=2, alpha=10.0, beta=5.0)(emb.detach(), labels)
    want = _generalised_lifted_reference(emb.detach(), labels, alpha=10.0, beta=5.0)
    assert other.item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    with pytest.raises(UserError, match="loss.variant must be 1"):
        _defaults("lifted_structure", variant=3)


def test_npair_l2_reg_is_the_embedding_regulariser_weight() -> None:
    b = _defaults("npair")
    assert isinstance(b.criterion, pml_losses.NPairsLoss)
    assert isinstance(b.criterion.embedding_regularizer, regularizers.LpRegularizer)
    assert b.criterion.embedding_reg_weight == 0.02
    emb, labels = embedding_batch()
    plain = float(_defaults("npair", l2_reg=0.0)(emb, labels))
    # Unit-norm embeddings: the regulariser adds exactly l2_reg × mean ‖x‖ = l2_reg.
    assert float(b(emb, labels)) == pytest.approx(plain + 0.02, abs=1e-6)


def test_proxy_nca_scale_and_proxy_lr() -> None:
    b = _defaults("proxy_nca", num_classes=7)
    assert isinstance(b.criterion, ProxyNCALoss)
    assert b.criterion.scale == 32 and b.param_lr == 1e-5
    assert [tuple(p.shape) for p in b.parameters()] == [(7, 8)]  # one proxy row per class


def test_arcface_margin_in_degrees_scale_and_weights_lr() -> None:
    b = _defaults("arcface", num_classes=5)
    assert isinstance(b.criterion, ArcFaceLoss)
    assert b.criterion.margin == 28.6
    assert b.criterion.margin_rad == pytest.approx(math.radians(28.6))
    assert b.criterion.scale == 64 and b.param_lr == 1e-4
    assert [tuple(p.shape) for p in b.parameters()] == [(5, 8)]  # one weight row per class


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
    emb, labels = embedding_batch()
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
    emb, _ = embedding_batch()
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
    emb, labels = embedding_batch()
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


# ---- our class-weight losses against PML's modules and slow loops ------------------------------


def _pml_twin(name: str, num_classes: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Our criterion with its defaults and PML's module of the same loss (weights copied in)."""
    mine = _defaults(name, num_classes=num_classes).criterion
    w = mine.weight.detach()
    if name == "arcface":
        pml = pml_losses.ArcFaceLoss(num_classes=num_classes, embedding_size=8, margin=28.6,
                                     scale=64)
        pml.W.data.copy_(w.t())
    elif name == "cosface":
        pml = pml_losses.CosFaceLoss(num_classes=num_classes, embedding_size=8, margin=0.35,
                                     scale=64)
        pml.W.data.copy_(w.t())
    elif name == "norm_softmax":
        pml = pml_losses.NormalizedSoftmaxLoss(num_classes=num_classes, embedding_size=8,
                                               temperature=1 / 23)
        pml.W.data.copy_(w.t())
    elif name == "proxy_nca":
        pml = pml_losses.ProxyNCALoss(num_classes=num_classes, embedding_size=8,
                                      softmax_scale=32)
        pml.proxies.data.copy_(w)
    else:
        pml = pml_losses.ProxyAnchorLoss(num_classes=num_classes, embedding_size=8, margin=0.1,
                                         alpha=32)
        pml.proxies.data.copy_(w)
    return mine, pml


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", ["arcface", "proxy_nca", "proxy_anchor", "cosface",
                                  "norm_softmax"])
def test_class_weight_loss_equals_pml(name: str, seed: int, dtype: torch.dtype) -> None:
    torch.manual_seed(seed)
    mine, pml = _pml_twin(name, num_classes=10)
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(24, 8, generator=g, dtype=dtype)  # not normalised: both normalise
    labels = torch.randint(0, 7, (24,), generator=g)  # classes 7, 8, 9 absent (and maybe more)
    labels[:3] = torch.tensor([0, 3, 6])
    got, want = mine.to(dtype)(emb, labels).item(), pml(emb, labels).item()
    tol = 1e-6 if dtype == torch.float64 else 1e-6 * max(1.0, abs(want))
    assert got == pytest.approx(want, abs=tol, rel=0)


def _curricular_reference(emb: torch.Tensor, labels: torch.Tensor, w: torch.Tensor, *,
                          m: float, s: float, t_before: float) -> tuple[float, float]:
    """CurricularFace (Huang et al. 2020, Eqs. 6-10) with loops in float64: (loss, new t)."""
    e = [row / row.norm() for row in emb.double()]
    p = [row / row.norm() for row in w.double()]
    cos = [[max(-1.0, min(1.0, float(x @ q))) for q in p] for x in e]
    targets = [cos[i][int(y)] for i, y in enumerate(labels)]
    t = 0.01 * sum(targets) / len(targets) + 0.99 * t_before
    total = 0.0
    for i, y in enumerate(labels.tolist()):
        cy = targets[i]
        cy_m = math.cos(math.acos(cy) + m)
        pos = cy_m if cy > math.cos(math.pi - m) else cy - m * math.sin(m)
        negs = [c * (t + c) if c > cy_m else c for j, c in enumerate(cos[i]) if j != y]
        logits = [s * pos] + [s * n for n in negs]
        top = max(logits)
        total += -(s * pos - top - math.log(sum(math.exp(v - top) for v in logits)))
    return total / len(e), t


def test_curricular_face_matches_the_paper_with_loops_and_keeps_t_in_state() -> None:
    torch.manual_seed(0)
    crit = _defaults("curricular_face", num_classes=6).criterion.double()
    assert (crit.margin, crit.scale) == (0.5, 64.0) and float(crit.t) == 0.0
    g = torch.Generator().manual_seed(1)
    t, hard = 0.0, 0
    for _ in range(3):  # t moves: later calls use the running average
        emb = torch.randn(12, 8, generator=g, dtype=torch.float64)
        labels = torch.randint(0, 4, (12,), generator=g)
        want, t = _curricular_reference(emb, labels, crit.weight.detach(), m=0.5, s=64.0,
                                        t_before=t)
        assert crit(emb, labels).item() == pytest.approx(want, rel=1e-9)
        assert float(crit.t) == pytest.approx(t, rel=1e-9, abs=1e-12)
        cos = F.normalize(emb, dim=1) @ F.normalize(crit.weight.detach(), dim=1).t()
        target = cos.gather(1, labels[:, None])
        hard += int((cos > torch.cos(torch.acos(target) + 0.5)).sum() - len(labels))
    assert hard > 0  # the batches had hard negatives, so t's modulation was exercised
    state = crit.state_dict()
    assert "t" in state and float(state["t"]) == pytest.approx(t)
    fresh = _defaults("curricular_face", num_classes=6).criterion.double()
    fresh.load_state_dict(state)
    assert float(fresh.t) == float(crit.t)
    crit.eval()
    crit(emb, labels)
    assert float(crit.t) == float(fresh.t)  # evaluation mode leaves t alone


def test_curricular_face_hard_negatives_are_modulated() -> None:
    crit = _defaults("curricular_face", num_classes=2).criterion.double()
    crit.weight.data = torch.tensor([[1.0, 0.0], [0.6, 0.8]], dtype=torch.float64)
    emb = torch.tensor([[0.8, 0.6]], dtype=torch.float64)  # cos to class 0: 0.8, to class 1: 0.96
    labels = torch.tensor([0])
    loss = crit(emb, labels).item()
    t = 0.01 * 0.8
    pos = math.cos(math.acos(0.8) + 0.5)
    neg = 0.96 * (t + 0.96)  # 0.96 > cos(θ_y + m): hard
    want = -math.log(math.exp(64 * pos) / (math.exp(64 * pos) + math.exp(64 * neg)))
    assert loss == pytest.approx(want, rel=1e-9)


def _thesis_reference(emb: torch.Tensor, labels: torch.Tensor, w: torch.Tensor, *,
                      variant: int, margin: float, alpha: float) -> float:
    """Thesis Eqs. 6.1 / 6.2 (variant 2: the batch sum, unnormalised, as the thesis code's
    ``cos.T @ cos``), double loops in float64."""
    e = [row / row.norm() for row in emb.double()]
    p = [row / row.norm() for row in w.double()]
    n_classes, batch = len(p), len(e)
    s = [[float(x @ q) for q in p] for x in e]
    present = sorted(set(labels.tolist()))
    pull = 0.0
    for c in present:
        inner = sum(math.exp(-alpha * (s[i][c] - margin)) for i in range(batch)
                    if int(labels[i]) == c)
        pull += math.log(1 + inner)
    push = 0.0
    for a in range(n_classes):
        inner = 0.0
        for b in range(n_classes):
            if b == a:
                continue
            if variant == 1:
                g = float(p[a] @ p[b])
            else:
                g = sum(s[i][a] * s[i][b] for i in range(batch))
            inner += math.exp(alpha * (g + margin))
        push += math.log(1 + inner)
    return pull / len(present) + push / n_classes


@pytest.mark.parametrize("variant", [1, 2])
@pytest.mark.parametrize("params", [{}, {"margin": 0.3, "alpha": 8.0}])
def test_thesis_proxy_matches_the_thesis_formulas(variant: int, params: dict) -> None:
    torch.manual_seed(variant)
    crit = _defaults("thesis_proxy", num_classes=7, variant=variant, **params).criterion
    crit = crit.double()
    g = torch.Generator().manual_seed(5)
    emb = torch.randn(20, 8, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 5, (20,), generator=g)  # classes 5 and 6 have no positive
    want = _thesis_reference(emb, labels, crit.weight.detach(), variant=variant,
                             margin=params.get("margin", 0.1), alpha=params.get("alpha", 32.0))
    assert crit(emb, labels).item() == pytest.approx(want, rel=1e-10)


def test_thesis_proxy_defaults_and_variant_validation() -> None:
    b = _defaults("thesis_proxy", num_classes=5)
    assert (b.criterion.variant, b.criterion.margin, b.criterion.alpha) == (2, 0.1, 32.0)
    assert b.lr_for(1e-4) == pytest.approx(1e-2)  # thesis train.py: proxies at lr x 100
    assert [tuple(p.shape) for p in b.parameters()] == [(5, 8)]
    for bad in (0, 3, 1.5):
        with pytest.raises(UserError, match=r"loss.variant must be 1 .* or 2"):
            _defaults("thesis_proxy", variant=bad)


def test_thesis_proxy_variant_2_stays_finite_where_the_unnormalised_form_overflows() -> None:
    torch.manual_seed(0)
    crit = _defaults("thesis_proxy", num_classes=50, embedding_size=16, alpha=100.0).criterion
    g = torch.Generator().manual_seed(0)
    base = torch.randn(1, 16, generator=g)
    emb = F.normalize(base + 0.2 * torch.randn(1024, 16, generator=g), dim=1).requires_grad_()
    labels = torch.randint(0, 50, (1024,), generator=g)
    # The thesis code's form: G = SᵀS unnormalised, log(1 + Σ e^{α(G + λ)}) directly.
    sims = F.normalize(emb.detach(), dim=1) @ F.normalize(crit.weight.detach(), dim=1).t()
    gram = sims.t() @ sims
    others = ~torch.eye(50, dtype=torch.bool)
    naive = torch.log(1 + (torch.exp(100.0 * (gram + 0.1)) * others).sum(1)).mean()
    assert not torch.isfinite(naive)
    naive64 = torch.log(1 + (torch.exp(100.0 * (gram.double() + 0.1)) * others).sum(1)).mean()
    assert not torch.isfinite(naive64)  # even float64 overflows
    loss = crit(emb, labels)
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(emb.grad).all() and torch.isfinite(crit.weight.grad).all()
