"""A replayed trial: the curve a configuration replays (:mod:`.lookup`), epoch by epoch, as the
progress a training trial reports (the fields of :class:`dmlsearch.trainables.trial.TrialProgress`
that a report carries), each epoch with the CPU time it took when it was recorded. The Ray
trainable (``dmlsearch.search.tune.trainable.replaytrial``) waits and reports; this module
imports neither Ray nor torch."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmlsearch.search.replay.lookup import lookup
from dmlsearch.search.replay.noise import replay_curve
from dmlsearch.search.replay.table import load_table
from dmlsearch.trainables.errors import TrialFailed
from dmlsearch.trainables.metrics.names import metric_mode

__all__ = ["ReplayedEpoch", "replay_epochs", "replayed_test_metrics"]


@dataclasses.dataclass(frozen=True)
class ReplayedEpoch:
    """One epoch of a replayed curve, in a training trial's terms (one fit, fold 0)."""

    epoch: int
    train_loss: float
    metrics: dict[str, float]  # the epoch's validation metrics
    score: float | None  # the best validation metric so far
    best_epoch: int | None
    fold_values: list[float]  # the fit's best so far (the metric's worst before one)
    last: bool  # the curve trained to its end here
    seconds: float  # the epoch's recorded CPU time (its wall time in tables without it)
    worst: float  # the metric's worst value: the score reported before any validation
    fold: int = 0
    folds_done: int = 0
    score_std: float = 0.0

    @property
    def iteration(self) -> int:
        """Epochs trained so far (one fit: the epoch)."""
        return self.epoch


def replay_epochs(table: Path | str, config: Mapping[str, Any], *, start: int = 0,
                  draw: tuple[int, str] | None = None) -> Iterator[ReplayedEpoch]:
    """The epochs of the curve ``config`` replays, from epoch ``start + 1`` (a trial resumed
    from its checkpoint); after the last one of a curve whose training failed, the
    :class:`TrialFailed` it failed with. ``draw``: the trial's draw of training noise
    (:func:`.lookup.lookup`; None: none)."""
    curves = load_table(table)
    curve = replay_curve(curves, config, draw)
    metric = str(config.get("metric", curves.metric))
    sign = -1.0 if metric_mode(metric) == "min" else 1.0
    worst = -sign * math.inf
    best = best_epoch = None
    for row in curve.epochs[:start]:
        value = row["val"].get(metric)
        if value is not None and (best is None or sign * value > sign * best):
            best, best_epoch = value, row["epoch"]
    last = len(curve.epochs)
    for row in curve.epochs[start:]:
        value = row["val"].get(metric)
        if value is not None and (best is None or sign * value > sign * best):
            best, best_epoch = value, row["epoch"]
        yield ReplayedEpoch(
            epoch=row["epoch"], train_loss=row["train_loss"], metrics=dict(row["val"]),
            score=best, best_epoch=best_epoch,
            fold_values=[best if best is not None else worst],
            last=row["epoch"] == last and curve.status == "ok",
            seconds=max(0.0, float(row.get("cpu_seconds") or row["seconds"])), worst=worst)
    if curve.status != "ok":
        raise TrialFailed(f"{curve.reason} (replayed)")


def replayed_test_metrics(table: Path | str, config: Mapping[str, Any], *, epochs: int,
                          metric: str, mode: str) -> dict[str, float] | None:
    """What a replayed search reports as its pick's test metrics: those the table recorded for
    the model ``config`` selects after ``epochs`` epochs (its best validation epoch so far)."""
    return lookup(load_table(table), config).test_at(epochs, metric, mode)
