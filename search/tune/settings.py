"""What the driver hands the Ray Tune layer (:class:`TuneSettings`) and what it wants to hear
back about trials (:class:`TrialEvents`). Plain data: nothing here imports Ray."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any
from typing import Protocol

__all__ = ["EveryListener", "TrialEvents", "TuneSettings"]


class TrialEvents(Protocol):
    """Trial events on the driver (the MLflow tracker implements them). ``config`` is the
    trial's flat configuration, in setting keys."""

    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None: ...
    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None: ...
    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None: ...


class EveryListener:
    """Several ``TrialEvents`` heard as one (the MLflow tracker and the progress on screen)."""

    def __init__(self, *listeners: TrialEvents) -> None:
        self.listeners = listeners

    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None:
        for listener in self.listeners:
            listener.trial_started(trial_id, config)

    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        for listener in self.listeners:
            listener.trial_result(trial_id, result)

    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None:
        for listener in self.listeners:
            listener.trial_finished(trial_id, state, reason)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneSettings:
    """A search as the Ray Tune layer runs it, made from the search's options
    (``search.run.tune_settings``): no defaults here, the options own them."""

    storage_path: Path | str  # Ray Tune's storage: a local folder, or a URI all nodes write to
    experiment: Path | str  # the experiment's own folder in it (``<storage_path>/<name>``)
    num_samples: int
    concurrency: int
    max_iterations: int  # the scheduler's max_t: epochs × folds × repeats
    grace_period: int
    reduction_factor: int
    cpus_per_trial: float
    gpus_per_trial: float
    seed: int
    optuna_storage: str  # URL of the Optuna study's storage
    study_name: str
    mode: str  # "max" or "min": the direction of the search's metric
    max_failures: int
    sampler: str
    scheduler: str
    time_budget_s: float | None = None  # soft: no trial starts after it; running ones finish
    time_limit_s: float | None = None  # hard: running trials are stopped too (pruned)
    max_epochs: int | None = None  # soft: no trial starts once this many epochs were trained
    pareto: str | None = None  # a cost minimised beside the score (multi-objective)
    sampler_options: tuple[tuple[str, Any], ...] = ()  # passed to the sampler (benchmarks)
    replay: str | None = None  # a learning-curve table: trials replay it instead of training
    replay_speedup: float | None = None  # a replayed epoch takes its recorded CPU time / this
    verbose: int = 1  # Ray Tune's console output: 0 none, 1 status tables
    # What the Optuna study is about, as its user attributes (optuna-dashboard shows them):
    # the space, the dataset, the metric (study.py's SPACE, DATASET, METRIC).
    study_attrs: tuple[tuple[str, Any], ...] = ()
    objective_names: tuple[str, ...] = ()  # the study's metric names ("val map@r", the cost)
    # The user's plug-in files, (path, text): handed to every trial, on whichever node it runs
    plugins: tuple[tuple[str, str], ...] = ()
    # Configurations (their settings as (key, value) pairs) the scheduler may not stop before
    # their last epoch: with --prior-from, the source's best (search/tune/keep.py)
    keep_to_end: tuple[tuple[tuple[str, Any], ...], ...] = ()

    @property
    def name(self) -> str:
        """The experiment's folder name in the storage."""
        return str(self.experiment).rstrip("/").rsplit("/", 1)[-1]
