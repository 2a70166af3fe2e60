"""Final training of a chosen configuration, shared by the search's retrain and ``train``.

Both paths call :func:`trainables.final.train_final` on the same flat config, so an exported
configuration reproduces the retrain's test metrics (same seed, same machine → same numbers).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from search.tracking import Tracker
from trainables.config import TrialConfig

__all__ = ["EnsembleOutcome", "FinalOutcome", "ensemble_and_log", "train_and_log"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FinalOutcome:
    config: dict[str, Any]
    test_metrics: dict[str, float]
    seconds: float
    run_id: str | None


def train_and_log(
    flat: Mapping[str, Any], *, tracker: Tracker | None, run_name: str,
    tags: Mapping[str, str] | None = None,
) -> FinalOutcome:
    from trainables.final import train_final  # torch: only when training

    cfg = TrialConfig.from_flat(flat)
    log.info("final training: %d epochs on all training classes of %s", cfg.epochs, cfg.dataset)
    result = train_final(cfg)
    config = cfg.to_flat()
    run_id = None
    if tracker is not None:
        run_id = tracker.log_final(name=run_name, config=config, test_metrics=result.test_metrics,
                                   history=result.history, tags=dict(tags or {}))
    return FinalOutcome(config=config, test_metrics=dict(result.test_metrics),
                        seconds=result.seconds, run_id=run_id)


@dataclasses.dataclass(frozen=True)
class EnsembleOutcome:
    """The k-fold study's test evaluation of its fold models (MLRC protocol)."""

    metrics: dict[str, float]  # ensemble_*, folds_mean_*, folds_std_*
    fold_test_metrics: list[dict[str, float]]
    fold_best_epochs: list[int]
    seconds: float
    run_id: str | None


def ensemble_and_log(
    flat: Mapping[str, Any], *, tracker: Tracker | None, run_name: str,
    tags: Mapping[str, str] | None = None,
) -> EnsembleOutcome:
    """Train the fold models of a k-fold configuration, evaluate each and their ensemble on test."""
    from trainables.final import train_fold_ensemble  # torch: only when training

    cfg = TrialConfig.from_flat(flat)
    log.info("fold ensemble: %d fold models of %d epochs at most", cfg.folds, cfg.epochs)
    result = train_fold_ensemble(cfg)
    metrics = result.flat_metrics()
    for i, fold in enumerate(result.fold_test_metrics):
        metrics.update({f"fold{i}_{k}": v for k, v in fold.items()})
    run_id = None
    if tracker is not None:
        run_id = tracker.log_final(
            name=run_name, config=cfg.to_flat(), test_metrics=metrics, history=[],
            tags={"dmlsearch.kind": "fold-ensemble", **dict(tags or {})})
    return EnsembleOutcome(metrics=result.flat_metrics(),
                           fold_test_metrics=result.fold_test_metrics,
                           fold_best_epochs=result.fold_best_epochs, seconds=result.seconds,
                           run_id=run_id)
