"""What a comparison of DML methods produced, typed: per method, its budget as used, its search's
best-so-far curve, and its best configuration's test metrics over the comparison's seeds (the
same seeds for every method, so differences pair by seed)."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Comparison", "MethodOutcome"]


@dataclasses.dataclass(frozen=True)
class MethodOutcome:
    name: str  # e.g. "proxy_anchor", or a space file's name
    space: str  # the space searched (a shipped name or a file)
    source: str  # the published grid it mirrors (the space's citation)
    budget_planned: dict[str, float]  # trials, epochs, gpu_hours: what every method was given
    budget_used: dict[str, float]  # the same keys: what this method's search used
    fell_short: str | None  # why it used less than planned (trained out, failures), if it did
    best_trial: str | None
    best_val: float | None  # the best validation score (trials that trained to their end)
    best_config: dict[str, Any]  # the chosen configuration (setting keys)
    trajectory: list[tuple[int, float]]  # (epochs trained by the search, best-so-far val score)
    seeds: list[int]  # the retrain seeds, equal for every method
    test_metrics: list[dict[str, float]]  # one per seed, in ``seeds`` order
    study_dir: str  # where the method's search lives (its summary.json, optuna.db, ...)


@dataclasses.dataclass(frozen=True)
class Comparison:
    name: str
    dataset: str
    metric: str  # the validation metric the searches optimised
    mode: str  # "max" or "min"
    shared: dict[str, Any]  # the settings every method shares (backbone, embedding size, ...)
    methods: list[MethodOutcome]
