"""Protocols inside a trial: k-fold reports folds as fidelity, scores the mean of the folds' bests,
and resumes from a mid-trial state to the same result."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.trial import TrialProgress
from dmlsearch.trainables.trial import run_trial
from tests.helpers import small_config


def _cfg(**kw: Any) -> TrialConfig:
    return small_config(**{"protocol": "kfold", "folds": 3, "epochs": 2, "embedding_size": 16,
                           "loss": "proxy_anchor", "lr": 1e-3, **kw})


def test_kfold_reports_every_fold_and_scores_the_mean_of_bests() -> None:
    seen: list[TrialProgress] = []
    result = run_trial(_cfg(), on_progress=lambda p, state: seen.append(p))
    assert [(p.fold, p.epoch, p.iteration) for p in seen] == [
        (0, 1, 1), (0, 2, 2), (1, 1, 3), (1, 2, 4), (2, 1, 5), (2, 2, 6)]
    assert [p.last for p in seen] == [False] * 5 + [True]
    assert len(result.fold_values) == 3 and result.epochs_run == 6
    assert result.score == pytest.approx(np.mean(result.fold_values))
    assert result.score_std == pytest.approx(np.std(result.fold_values))
    assert seen[-1].score == pytest.approx(result.score)
    # Fold 0's best is what the score showed while fold 0 ran.
    assert seen[1].score == pytest.approx(result.fold_values[0])


def test_kfold_resumes_mid_trial_to_the_same_result() -> None:
    cfg = _cfg(folds=2, device="cpu")  # bit-exact on the CPU (cuDNN is not deterministic)
    full = run_trial(cfg)
    states: list[dict] = []
    run_trial(cfg, on_progress=lambda p, state: states.append(state()) if p.iteration == 3
              else None)
    assert states and states[0]["fold"] == 1 and len(states[0]["folds_done"]) == 1
    resumed_progress: list[TrialProgress] = []
    resumed = run_trial(cfg, state=states[0],
                        on_progress=lambda p, state: resumed_progress.append(p))
    assert [p.iteration for p in resumed_progress] == [4]
    assert resumed.fold_values == pytest.approx(full.fold_values, abs=1e-6)
    assert resumed.score == pytest.approx(full.score, abs=1e-6)


def test_fixed_protocol_is_one_fold() -> None:
    result = run_trial(_cfg(protocol="fixed", epochs=1))
    assert len(result.fold_values) == 1 and result.epochs_run == 1
    assert 0.0 < result.score <= 1.0


def test_kfold_progress_carries_each_folds_best_and_their_spread() -> None:
    seen: list[TrialProgress] = []
    result = run_trial(_cfg(folds=2, epochs=1), on_progress=lambda p, state: seen.append(p))
    assert [len(p.fold_values) for p in seen] == [1, 2]
    assert seen[0].score_std == 0.0
    assert seen[-1].fold_values == pytest.approx(result.fold_values)
    assert seen[-1].score_std == pytest.approx(np.std(result.fold_values))


def test_repeats_fit_every_split_again_with_other_seeds() -> None:
    seen: list[TrialProgress] = []
    result = run_trial(_cfg(folds=2, epochs=1, repeats=2, device="cpu"),
                       on_progress=lambda p, state: seen.append(p))
    assert [(p.fold, p.iteration) for p in seen] == [(0, 1), (1, 2), (0, 3), (1, 4)]
    assert [p.last for p in seen] == [False, False, False, True]
    assert len(result.fold_values) == 4 and result.epochs_run == 4
    assert result.score == pytest.approx(np.mean(result.fold_values))
    # Another seed, another model: the repeat of fold 0 does not copy the first fit.
    assert result.fold_values[0] != result.fold_values[2]


def test_a_learned_distance_trial_saves_its_distance_diagnostics(tmp_path: Any) -> None:
    cfg = _cfg(protocol="fixed", epochs=1, loss="e2e", metric="eer_e2e", device="cpu",
               **{"loss.d_layers": 1, "loss.d_size": 16})
    seen: list[TrialProgress] = []
    result = run_trial(cfg, artifacts=tmp_path, on_progress=lambda p, state: seen.append(p))
    # per evaluation: how far D' = 1 - D is from a metric, as curves over the epochs
    assert {"diag_self_mean", "diag_asymmetry_mean", "diag_triangle_positive"} <= set(
        seen[-1].metrics)
    # at the end: the best model's diagnostics and their histograms beside the trial
    assert 0.0 <= result.diagnostics["self_mean"] <= 1.0
    assert result.diagnostics["asymmetry_max"] >= result.diagnostics["asymmetry_mean"] >= 0.0
    folder = tmp_path / "distance_diagnostics" / "fit0"
    assert sorted(p.name for p in folder.glob("*.png")) == [
        "asymmetry.png", "self_distance.png", "triangle_violation.png"]
