"""Speaker-verification metrics: minDCF against a brute force over every threshold, and the
verification metrics of a trial list (its own pairs, scored in its order) against scoring the
same pairs by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics.evaluate import embedding_metrics
from dmlsearch.trainables.metrics.roc import det_points
from dmlsearch.trainables.metrics.roc import min_dcf
from dmlsearch.trainables.metrics.roc import verification_metrics
from dmlsearch.trainables.metrics.verification import pair_verification_metrics
from dmlsearch.trainables.metrics.verification import score_index_pairs


def brute_min_dcf(scores: np.ndarray, same: np.ndarray, p: float) -> float:
    """min over every threshold t (accept score >= t, and accept nothing) of
    p * miss(t) + (1 - p) * false alarm(t), divided by min(p, 1 - p)."""
    best = p * 1.0  # accept nothing: every target missed, no false alarm
    for t in np.unique(scores):
        accept = scores >= t
        miss = np.mean(~accept[same])
        false_alarm = np.mean(accept[~same])
        best = min(best, p * miss + (1 - p) * false_alarm)
    return best / min(p, 1 - p)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_min_dcf_is_the_least_cost_over_every_threshold(seed: int) -> None:
    rng = np.random.default_rng(seed)
    same = rng.random(400) < 0.3
    scores = np.round(rng.normal(same.astype(float) * 1.5, 1.0), 1)  # with ties
    for p in (0.01, 0.05, 0.5):
        assert min_dcf(scores, same, p) == pytest.approx(brute_min_dcf(scores, same, p))
    got = verification_metrics(scores, same)
    assert got["mindcf_0.01"] == pytest.approx(brute_min_dcf(scores, same, 0.01))
    assert got["mindcf_0.05"] == pytest.approx(brute_min_dcf(scores, same, 0.05))
    fa, miss = det_points(scores, same)
    assert fa[0] == 0 and miss[0] == 1 and fa[-1] == 1 and miss[-1] == 0
    assert (np.diff(fa) >= 0).all() and (np.diff(miss) <= 0).all()
    with pytest.raises(UserError, match="p_target must be in"):
        min_dcf(scores, same, 1.0)


def test_perfect_and_useless_scores_cost_nothing_and_everything() -> None:
    same = np.array([True, True, False, False, False])
    assert min_dcf([0.9, 0.8, 0.3, 0.2, 0.1], same, 0.01) == 0.0
    assert min_dcf(np.zeros(5), same, 0.01) == pytest.approx(1.0)  # no better than rejecting


def test_a_trial_list_s_pairs_are_scored_as_listed() -> None:
    g = torch.Generator().manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(12, 8, generator=g), dim=1).numpy()
    labels = np.repeat(np.arange(4), 3)
    left = np.array([0, 0, 3, 5, 7, 9, 11, 2])
    right = np.array([1, 4, 4, 3, 8, 0, 10, 6])
    same = labels[left] == labels[right]
    cos = (emb[left] * emb[right]).sum(axis=1)
    got = pair_verification_metrics(emb, labels, pairs=(left, right, same))
    want = verification_metrics(cos, same)
    assert got["verify_trials"] == 8
    assert got["eer_cosine"] == pytest.approx(want["eer"]) and got["eer"] == got["eer_cosine"]
    assert got["mindcf01"] == pytest.approx(want["mindcf_0.01"])
    assert got["auc_cosine"] == pytest.approx(want["auc"])
    np.testing.assert_allclose(score_index_pairs(emb, left, right)["cosine"], cos, atol=1e-6)
    whole = embedding_metrics(emb, labels, pairs=(left, right, same), verification=True)
    assert whole["verify_trials"] == 8 and "map@r" in whole
    with pytest.raises(UserError, match="positions in 0..11"):
        score_index_pairs(emb, [0, 12], [1, 2])


def test_a_learned_distance_scores_listed_pairs_in_their_order() -> None:
    from dmlsearch.trainables.losses import build_loss
    from dmlsearch.trainables.losses import resolve_loss_params

    torch.manual_seed(0)
    crit = build_loss("e2e", resolve_loss_params("e2e", {"d_input_norm": 4.0}), num_classes=3,
                      embedding_size=8).criterion
    emb = torch.nn.functional.normalize(torch.randn(6, 8), dim=1)
    left, right = np.array([0, 1, 5]), np.array([1, 0, 2])
    got = score_index_pairs(emb, left, right, scorer=crit)
    want = crit.pair_scores(emb[left], emb[right]).numpy()
    np.testing.assert_allclose(got["e2e"], want, atol=1e-6)
    assert got["e2e"][0] != pytest.approx(got["e2e"][1])  # D is asymmetric: order matters
    # d_input_norm scales what D sees: the same as scaling the embeddings by hand
    plain = build_loss("e2e", resolve_loss_params("e2e", {"d_input_norm": 1.0}), num_classes=3,
                       embedding_size=8).criterion
    plain.load_state_dict(crit.state_dict())
    np.testing.assert_allclose(plain.pair_scores(4 * emb[left], 4 * emb[right]).numpy(), want,
                               atol=1e-6)
