"""Final evaluations on the test classes: the retrain on all training classes (and what it hands
the retrieval galleries), and the k-fold study's fold models, one by one and as an ensemble
(MLRC protocol)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.retrain import ensemble_embeddings
from dmlsearch.trainables.retrain import retrain
from dmlsearch.trainables.retrain import train_fold_ensemble
from dmlsearch.trainables.trial import run_trial
from tests.helpers import small_config


def _cfg(**kw: Any) -> TrialConfig:
    return small_config(**{"protocol": "kfold", "folds": 2, "epochs": 2, "embedding_size": 16,
                           "loss": "proxy_anchor", "lr": 1e-3, "device": "cpu", **kw})


def test_the_retrain_hands_over_its_test_images_in_embedding_order() -> None:
    from dmlsearch.trainables.data import load_dataset
    from dmlsearch.trainables.device import resolve_device
    from dmlsearch.trainables.metrics.evaluate import embed

    cfg = small_config(epochs=1, embedding_size=8, device="cpu")
    result = retrain(cfg)
    images = result.test_images
    test = load_dataset("glyphs").test()
    assert images is not None and len(images) == len(test) == len(result.test_embeddings)
    assert (images.labels == result.test_labels).all() and (images.images == test.images).all()
    again = embed(result.model, images, device=resolve_device("cpu"))
    np.testing.assert_allclose(again, result.test_embeddings, atol=1e-5)
    assert result.pair_scorer is None  # no learned distance: the e2e loss hands over its D


def test_ensemble_embeddings_normalises_each_model_then_concatenates() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 3)) * 7, rng.normal(size=(5, 4))
    got = ensemble_embeddings([a, b])
    assert got.shape == (5, 7)
    for row, (x, y) in zip(got, zip(a, b)):
        expected = np.concatenate([x / np.linalg.norm(x), y / np.linalg.norm(y)])
        np.testing.assert_allclose(row, expected, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.sqrt(2), rtol=1e-6)


def test_fold_ensemble_evaluates_the_trials_fold_models_on_test() -> None:
    cfg = _cfg(epochs=1)
    trial = run_trial(cfg)
    result = train_fold_ensemble(cfg)
    # The same fold models as the search's trial: same validation bests and best epochs.
    assert result.fold_val_values == pytest.approx(trial.fold_values, abs=1e-6)
    assert result.fold_best_epochs == trial.fold_best_epochs
    assert len(result.fold_test_metrics) == 2
    for key in ("recall@1", "map@r", "r_precision"):
        values = [m[key] for m in result.fold_test_metrics]
        assert result.fold_mean[key] == pytest.approx(np.mean(values))
        assert result.fold_std[key] == pytest.approx(np.std(values))
        assert 0.0 <= result.ensemble_metrics[key] <= 1.0
    flat = result.flat_metrics()
    assert {"ensemble_recall@1", "folds_mean_map@r", "folds_std_map@r"} <= set(flat)
    assert all(set(m) == set(result.ensemble_metrics) for m in result.fold_test_metrics)

def test_fold_ensemble_needs_a_kfold_configuration() -> None:
    with pytest.raises(UserError, match="protocol=kfold"):
        train_fold_ensemble(_cfg(protocol="fixed"))
