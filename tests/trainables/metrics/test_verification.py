"""Verification (Monteiro et al. 2020): EER/AUC against sklearn, the pairs and their scores, the
E2E loss and its distance model, the metric direction, training E2E on built-in data, and the
distance diagnostics of D' = 1 - D on hand-made distances whose properties are known."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.losses import build_loss
from dmlsearch.trainables.losses import resolve_loss_params
from dmlsearch.trainables.losses.e2e import E2ELoss
from dmlsearch.trainables.metrics.diagnostics import diagnostic_values
from dmlsearch.trainables.metrics.diagnostics import distance_diagnostics
from dmlsearch.trainables.metrics.diagnostics import e2e_pseudo_distance
from dmlsearch.trainables.metrics.diagnostics import plot_distance_diagnostics
from dmlsearch.trainables.metrics.evaluate import embedding_metrics
from dmlsearch.trainables.metrics.evaluate import evaluate
from dmlsearch.trainables.metrics.evaluate import verification_options
from dmlsearch.trainables.metrics.names import VERIFICATION_METRICS
from dmlsearch.trainables.metrics.names import metric_mode
from dmlsearch.trainables.metrics.roc import verification_metrics
from dmlsearch.trainables.metrics.verification import pair_indices
from dmlsearch.trainables.metrics.verification import sample_pairs
from dmlsearch.trainables.metrics.verification import score_pairs
from tests.helpers import embedding_batch
from tests.helpers import small_config

TOL = 1e-6


# ---- EER / AUC vs sklearn --------------------------------------------------------------------
def _sklearn_eer(y: np.ndarray, s: np.ndarray) -> float:
    """The crossing of the ROC polyline with fnr = fpr, found with a plain loop."""
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    fnr = 1 - tpr
    for k in range(1, len(fpr)):
        if fnr[k] - fpr[k] <= 0:
            g0, g1 = fnr[k - 1] - fpr[k - 1], fnr[k] - fpr[k]
            t = g0 / (g0 - g1)
            return float(fpr[k - 1] + t * (fpr[k] - fpr[k - 1]))
    raise AssertionError("no crossing")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("levels", [0, 5, 40])  # 0: continuous scores; else heavy ties
def test_eer_and_auc_equal_sklearn(seed: int, levels: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 3000))
    y = rng.random(n) < rng.uniform(0.05, 0.6)
    y[:2] = [True, False]
    s = rng.normal(size=n) + rng.uniform(0, 2) * y
    if levels:
        s = np.round(s * levels / 4) / levels
    got = verification_metrics(s.astype(np.float32), y)
    assert got["auc"] == pytest.approx(roc_auc_score(y, s.astype(np.float32)), abs=TOL)
    assert got["1-auc"] == pytest.approx(1 - got["auc"], abs=TOL)
    assert got["eer"] == pytest.approx(_sklearn_eer(y, s.astype(np.float32)), abs=TOL)
    assert (got["positives"], got["negatives"]) == (int(y.sum()), int((~y).sum()))


def test_eer_and_auc_on_known_cases() -> None:
    y = np.array([1, 1, 0, 0, 0], dtype=bool)
    perfect = verification_metrics([0.9, 0.8, 0.3, 0.2, 0.1], y)
    assert (perfect["eer"], perfect["auc"]) == (0.0, 1.0)
    assert perfect["eer_threshold"] == pytest.approx(0.8)
    reversed_ = verification_metrics([0.1, 0.2, 0.7, 0.8, 0.9], y)
    assert (reversed_["eer"], reversed_["auc"]) == (1.0, 0.0)
    tied = verification_metrics(np.zeros(5), y)
    assert (tied["eer"], tied["auc"]) == (0.5, 0.5)
    # One positive below one negative: P=2, N=3. ROC (0,0),(0,.5),(1/3,.5),(1/3,1),(1,1):
    # the segment (0,.5)-(1/3,.5) has fnr .5 > fpr; (1/3,.5)-(1/3,1) crosses at fpr 1/3.
    one_swap = verification_metrics(torch.tensor([0.9, 0.5, 0.6, 0.2, 0.1]), y)
    assert one_swap["eer"] == pytest.approx(1 / 3)
    assert one_swap["auc"] == pytest.approx(5 / 6)


@pytest.mark.parametrize(
    ("scores", "same", "needle"),
    [
        ([0.1, 0.2], [True, True], "both same-class and different-class pairs, got 2 and 0"),
        ([0.1, 0.2], [False, False], "got 0 and 2"),
        ([0.1, 0.2, 0.3], [True, False], "expected 3 entries"),
        ([0.1, float("nan")], [True, False], "finite"),
        ([[0.1, 0.2]], [True, False], "1-D array"),
    ],
)
def test_degenerate_trials_are_user_errors(scores: list, same: list, needle: str) -> None:
    with pytest.raises(UserError, match=needle) as caught:
        verification_metrics(scores, same)
    assert "\n" not in str(caught.value)


# ---- pairs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3, 8, 101])
def test_linear_pair_indices_are_the_upper_triangle(n: int) -> None:
    i, j = pair_indices(np.arange(n * (n - 1) // 2), n)
    want_i, want_j = np.triu_indices(n, 1)
    assert (i == want_i).all() and (j == want_j).all()


def test_pair_sample_is_distinct_sorted_and_fixed() -> None:
    assert sample_pairs(50, 0) == 1225 and sample_pairs(50, 5000) == 1225
    sample = sample_pairs(50, 300)
    assert len(sample) == 300 and len(np.unique(sample)) == 300
    assert (np.diff(sample) > 0).all() and sample.min() >= 0 and sample.max() < 1225
    assert (sample == sample_pairs(50, 300)).all()
    big = 60_502  # SOP's test set: 1.8e9 pairs, sampled without building them
    i, j = pair_indices(sample_pairs(big, 1000), big)
    assert (i < j).all() and (j < big).all()


def _toy_scorer(d: int = 8) -> E2ELoss:
    torch.manual_seed(0)
    return build_loss("e2e", resolve_loss_params("e2e", {"d_size": 16.0}), num_classes=3,
                      embedding_size=d).criterion


def test_scores_of_all_pairs_and_of_a_sample() -> None:
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(30, 8)).astype(np.float32)
    labels = rng.integers(0, 3, size=30)
    scorer = _toy_scorer()
    scores, same = score_pairs(emb, labels, scorer=scorer, chunk=50)  # several chunks
    pairs = list(itertools.combinations(range(30), 2))
    assert len(same) == len(pairs) == 435
    normed = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    want_cos = np.array([normed[i] @ normed[j] for i, j in pairs])
    ia, ib = (torch.tensor([p[k] for p in pairs]) for k in (0, 1))
    pair = torch.cat([torch.from_numpy(emb)[ia], torch.from_numpy(emb)[ib]], 1)
    want_d = torch.sigmoid(scorer.distance.eval()(pair * scorer.d_input_norm))
    np.testing.assert_allclose(scores["cosine"], want_cos, atol=1e-5)
    np.testing.assert_allclose(scores["e2e"], want_d.squeeze(1).detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(scores["fusion"], 0.5 * (scores["e2e"] + 0.5 * (want_cos + 1)),
                               atol=1e-5)
    assert (same == np.array([labels[i] == labels[j] for i, j in pairs])).all()
    sampled, sampled_same = score_pairs(emb, labels, max_pairs=100)
    assert set(sampled) == {"cosine"} and len(sampled["cosine"]) == len(sampled_same) == 100


# ---- the e2e loss ----------------------------------------------------------------------------
def test_e2e_defaults_are_the_papers_cifar10_choice() -> None:
    assert resolve_loss_params("e2e", {}) == {
        "d_layers": 3.0, "d_size": 350.0, "d_dropout": 0.2, "aux_margin": 0.35,
        "aux_scale": 30.0, "label_smoothing": 0.2, "d_input_norm": 0.0}
    crit = build_loss("e2e", resolve_loss_params("e2e", {}), num_classes=5,
                      embedding_size=8).criterion
    # d_input_norm 0: D sees the unit embedding scaled to norm sqrt(d), unit variance per
    # component, the scale of the reference's raw pooled features (e2e.py's docstring)
    assert crit.d_input_norm == pytest.approx(math.sqrt(8))
    linears = [m for m in crit.distance if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [
        (16, 350), (350, 350), (350, 350), (350, 1)]
    assert [type(m).__name__ for m in crit.distance][-2:] == ["Dropout", "Linear"]
    assert crit.distance[-2].p == 0.2 and crit.classifier.bias is None  # AM: no bias


def test_e2e_loss_is_finite_and_trains_d_the_head_and_the_embeddings() -> None:
    emb, labels = embedding_batch()
    emb.requires_grad_()
    bundle = build_loss("e2e", resolve_loss_params("e2e", {}), num_classes=4, embedding_size=8)
    loss = bundle(emb, labels)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    crit = bundle.criterion
    for name, p in [("D first", crit.distance[0].weight), ("D last", crit.distance[-1].weight),
                    ("head", crit.classifier.weight)]:
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert emb.grad is not None and emb.grad.abs().sum() > 0
    assert {id(p) for p in bundle.parameters()} == {id(p) for p in crit.parameters()}


def test_pairs_are_all_ordered_pairs_of_theembedding_batch() -> None:
    labels = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    positive, negative = E2ELoss.pair_masks(labels)
    assert int(positive.sum()) == 3 * 2 + 2 * 1 + 4 * 3  # ordered: both (i, j) and (j, i)
    assert int(positive.sum() + negative.sum()) == 9 * 8
    assert not (positive | negative).diagonal().any() and not (positive & negative).any()
    assert torch.equal(positive, positive.T) and torch.equal(negative, negative.T)


def test_e2e_gradients_are_reproducible() -> None:
    grads = []
    for _ in range(2):
        torch.manual_seed(0)
        emb, labels = embedding_batch(classes=8, per_class=4, dim=32)
        emb.requires_grad_()
        bundle = build_loss("e2e", resolve_loss_params("e2e", {}), num_classes=8,
                            embedding_size=32)
        bundle(emb, labels).backward()
        grads.append(emb.grad)
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_pair_loss_is_balanced_bce_over_ordered_pairs(smoothing: float) -> None:
    emb, labels = embedding_batch(classes=3, per_class=3)
    crit = build_loss("e2e", resolve_loss_params("e2e", {"d_dropout": 0.0,
                                                         "label_smoothing": smoothing}),
                      num_classes=3, embedding_size=8).criterion
    pos, neg = [], []
    for i, j in itertools.permutations(range(len(labels)), 2):
        p = torch.sigmoid(crit.distance(crit.d_input_norm * torch.cat([emb[i], emb[j]])[None]))
        p = p.item()
        same = bool(labels[i] == labels[j])
        t = 1 - smoothing / 4 if same else smoothing / 4
        (pos if same else neg).append(-(t * math.log(p) + (1 - t) * math.log(1 - p)))
    want = 0.5 * (np.mean(pos) + np.mean(neg))
    assert crit.pair_loss(emb, labels).item() == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("margin", [0.0, 0.35])
def test_aux_loss_is_smoothed_ce_or_additive_margin_softmax(margin: float) -> None:
    emb, labels = embedding_batch()
    eps, scale, classes = 0.2, 30.0, 4
    crit = build_loss("e2e", resolve_loss_params("e2e", {"aux_margin": margin,
                                                         "label_smoothing": eps}),
                      num_classes=classes, embedding_size=8).criterion
    w = crit.classifier.weight.detach()
    total = 0.0
    for x, y in zip(emb, labels.tolist()):
        if margin:
            cos = [float(F.cosine_similarity(x, w[c], dim=0)) for c in range(classes)]
            logits = [scale * (cos[c] - margin * (c == y)) for c in range(classes)]
        else:
            logits = [float(x @ w[c] + crit.classifier.bias[c].detach()) for c in range(classes)]
        log_z = math.log(sum(math.exp(v) for v in logits))
        q = [1 - eps if c == y else eps / (classes - 1) for c in range(classes)]
        total += -sum(q[c] * (logits[c] - log_z) for c in range(classes))
    assert crit.aux_loss(emb, labels).item() == pytest.approx(total / len(labels), rel=1e-5)


def test_pair_scores_are_d_without_dropout_and_not_symmetric() -> None:
    crit = build_loss("e2e", resolve_loss_params("e2e", {"d_dropout": 0.5}), num_classes=3,
                      embedding_size=8).criterion
    crit.train()
    a, b = embedding_batch(seed=1)[0][:6], embedding_batch(seed=2)[0][:6]
    first = crit.pair_scores(a, b)
    assert torch.equal(first, crit.pair_scores(a, b)) and crit.training  # no dropout, restored
    assert ((first > 0) & (first < 1)).all()
    assert not torch.allclose(first, crit.pair_scores(b, a))


@pytest.mark.parametrize(
    ("given", "needle"),
    [({"d_layers": 0}, "loss.d_layers must be an integer >= 1"),
     ({"d_size": 3.5}, "loss.d_size must be an integer"),
     ({"d_dropout": 1.0}, "loss.d_dropout must be in [0, 1)"),
     ({"aux_margin": -0.1}, "loss.aux_margin must be >= 0"),
     ({"label_smoothing": 1}, "loss.label_smoothing must be in [0, 1)")],
)
def test_e2e_bad_parameters_are_user_errors(given: dict, needle: str) -> None:
    with pytest.raises(UserError, match=needle.replace("[", r"\[").replace(")", r"\)")):
        build_loss("e2e", resolve_loss_params("e2e", given), num_classes=3, embedding_size=8)


# ---- metric names, direction, configuration -------------------------------------------------
def test_metric_mode() -> None:
    for name in ("eer", "eer_cosine", "eer_e2e", "eer_fusion"):
        assert metric_mode(name) == "min"
    for name in ("auc", "auc_cosine", "auc_e2e", "auc_fusion", "recall@1", "recall@16",
                 "map@r", "r_precision", "precision@1"):
        assert metric_mode(name) == "max"
    assert set(VERIFICATION_METRICS) == {f"{k}{s}" for k in ("eer", "auc", "mindcf01", "mindcf05")
                                         for s in ("", "_cosine", "_e2e", "_fusion")}
    assert metric_mode("mindcf01_cosine") == metric_mode("mindcf05") == "min"
    with pytest.raises(UserError, match="metric must be recall@<k>"):
        metric_mode("eer_plda")


def test_plateau_schedule_follows_the_metric_direction() -> None:
    from dmlsearch.trainables.optim import build_scheduler

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    for metric, mode in [("eer_cosine", "min"), ("recall@1", "max")]:
        cfg = TrialConfig.from_flat({"lr_schedule": "plateau", "metric": metric})
        assert build_scheduler(opt, cfg).mode == mode


def test_e2e_scorings_need_the_e2e_loss() -> None:
    with pytest.raises(UserError, match="set loss=e2e or metric=eer_cosine"):
        TrialConfig.from_flat({"metric": "eer_fusion"})
    with pytest.raises(UserError, match="verify_pairs must be an integer >= 0"):
        TrialConfig.from_flat({"verify_pairs": -1})
    cfg = TrialConfig.from_flat({"metric": "eer"})
    assert verification_options(cfg, torch.nn.Module()) == {
        "scorer": None, "verification": True, "verify_pairs": 1_000_000}
    with pytest.raises(UserError, match="learned distance of loss e2e"):
        verification_options(cfg.replace(metric="auc_e2e"), torch.nn.Module())
    assert verification_options(TrialConfig.from_flat({}), torch.nn.Module())[
        "verification"] is False


def test_embedding_metrics_report_every_scoring_and_retrieval() -> None:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(5), 6)
    emb = (rng.normal(size=(30, 8)) + 6 * np.eye(8)[labels]).astype(np.float32)
    got = embedding_metrics(emb, labels, scorer=_toy_scorer())
    assert {"recall@1", "map@r", "eer", "auc", "verify_trials"} <= set(got)
    assert {f"{k}_{s}" for k in ("eer", "auc") for s in ("cosine", "e2e", "fusion")} <= set(got)
    assert (got["eer"], got["auc"]) == (got["eer_e2e"], got["auc_e2e"])
    assert got["verify_trials"] == 435
    plain = embedding_metrics(emb, labels, verification=True)
    assert plain["eer"] == plain["eer_cosine"] < 0.2 and "eer_e2e" not in plain
    assert "eer" not in embedding_metrics(emb, labels)


# ---- fitting on built-in data ----------------------------------------------------------------
def _cfg(**kw: object) -> TrialConfig:
    return small_config(**{"loss": "e2e", "metric": "eer_e2e", **kw})


def test_e2e_training_lowers_the_e2e_eer(split) -> None:  # type: ignore[no-untyped-def]
    from dmlsearch.trainables.fit import Fitter

    train, val = split
    # A smaller D than the paper's 3 x 350 keeps this fast; the defaults train the same way.
    fitter = Fitter(_cfg(**{"loss.d_size": 64, "loss.d_layers": 2}), train, val)
    before = evaluate(fitter.model, val, device=fitter.device, **fitter.eval_options)
    result = fitter.run()
    after = result.best_metrics
    print(f"glyphs val EER e2e {before['eer_e2e']:.4f} -> {after['eer_e2e']:.4f}, cosine "
          f"{before['eer_cosine']:.4f} -> {after['eer_cosine']:.4f}, fusion -> "
          f"{after['eer_fusion']:.4f}; recall@1 {before['recall@1']:.3f} -> "
          f"{after['recall@1']:.3f}")
    assert before["eer_e2e"] > 0.4  # an untrained D is near chance (0.5)
    assert after["eer_e2e"] < min(before["eer_e2e"] - 0.1, 0.4)
    assert after["eer_cosine"] < before["eer_cosine"] - 0.1
    assert result.best_value == after["eer_e2e"] == min(h["eer_e2e"] for h in result.history)
    assert "recall@1" in after and after["verify_trials"] == len(val) * (len(val) - 1) // 2
    # The returned model and the loss's D are the best epoch's: they score as it did.
    again = evaluate(result.model, val, device=fitter.device, **fitter.eval_options)
    assert again["eer_e2e"] == pytest.approx(result.best_value, abs=1e-6)


def test_fitter_keeps_the_epoch_with_the_lowest_eer(split) -> None:  # type: ignore[no-untyped-def]
    from dmlsearch.trainables.fit import Fitter

    train, val = split
    fitter = Fitter(_cfg(metric="eer_cosine", loss="multi_similarity"), train, val)
    assert fitter.mode == "min" and fitter.eval_options["scorer"] is None
    for epoch, eer in enumerate([0.30, 0.12, 0.20, 0.12], start=1):
        fitter._after_eval({"eer_cosine": eer}, epoch=epoch)
    assert (fitter.best_value, fitter.best_epoch, fitter.stale) == (0.12, 2, 2)
    recall = Fitter(_cfg(metric="recall@1", loss="multi_similarity"), train, val)
    for epoch, value in enumerate([0.30, 0.12], start=1):
        recall._after_eval({"recall@1": value}, epoch=epoch)
    assert (recall.best_value, recall.best_epoch) == (0.30, 1)


# ---- distance diagnostics --------------------------------------------------------------------
def _euclidean(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a - b).norm(dim=1)


def test_a_metric_has_no_self_distance_asymmetry_or_triangle_violation() -> None:
    emb = np.random.default_rng(0).normal(size=(40, 5))
    got = distance_diagnostics(_euclidean, emb, triplets=2000)
    for name in ("self", "asymmetry", "triangle"):
        assert got[f"{name}_max"] == 0.0 and got[f"{name}_positive"] == 0.0, name


def test_known_asymmetry_and_triangle_violations() -> None:
    emb = np.random.default_rng(0).normal(size=(30, 3))

    def shifted(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # D'(a,b) - D'(b,a) = 2(a0-b0)
        return _euclidean(a, b) + (a[:, 0] - b[:, 0])

    values = diagnostic_values(shifted, emb, pairs=100, triplets=500, seed=3)
    i, j = pair_indices(sample_pairs(30, 100, seed=3), 30)
    np.testing.assert_allclose(values["asymmetry"], 2 * np.abs(emb[i, 0] - emb[j, 0]), atol=1e-5)
    assert values["self"].max() == 0 and len(values["triangle"]) == 500
    # Squared distance on a line: b=0, a=1, c=2 gives D'(b,c) - D'(a,b) - D'(a,c) = 4 - 1 - 1.
    line = np.array([[1.0], [0.0], [2.0]])
    squared = diagnostic_values(lambda a, b: _euclidean(a, b) ** 2, line, triplets=600)
    assert squared["triangle"].max() == pytest.approx(2.0)
    # Of the 6 orders of 3 points only (a=1 as the midpoint) violate: 2 of 6.
    assert np.mean(squared["triangle"] > 0) == pytest.approx(1 / 3, abs=0.06)


def test_e2e_pseudo_distance_histograms_are_written(tmp_path: Path) -> None:
    emb = F.normalize(torch.randn(20, 8), dim=1)
    values = diagnostic_values(e2e_pseudo_distance(_toy_scorer()), emb, triplets=300)
    assert ((values["self"] > 0) & (values["self"] < 1)).all()
    paths = plot_distance_diagnostics(values, tmp_path / "diag")
    assert sorted(p.name for p in paths) == ["asymmetry.png", "self_distance.png",
                                             "triangle_violation.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
