"""Several searches in one Ray Tune experiment, for ``dmlsearch compare``: the methods share one
driver and one resource pool (the cluster's), each keeping its own sampler, study records
(``optuna.db``), budget and early-stopping scheduler, so no method's trials are judged against
another's:

    MethodsSearcher (one StudySearcher per method) → ConcurrencyLimiter
    → MethodsScheduler (one scheduler per method, and each method's hard budget) → Tuner → fit

A trial belongs to a method by its configuration's :data:`METHOD_KEY` (the searcher adds it;
the trainable, the records and the trackers see configurations without it). Every method gets
the same budget (epochs, or device-seconds) and spends it exactly: the searcher proposes a
method's trials, least spent first, until its budget is spent; then the scheduler stops its
running trials (pruned, "stopped by the budget"). Module-level classes: Ray's experiment state
pickles the searcher and the scheduler, and a resumed comparison gets them by reference.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray.tune.schedulers import TrialScheduler
from ray.tune.search import Searcher

from dmlsearch.search.results import TrialRecord
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tune.budget import Limit
from dmlsearch.search.tune.budget import Usage
from dmlsearch.search.tune.ray_results import METHOD_KEY
from dmlsearch.search.tune.schedulers import SCHEDULERS
from dmlsearch.search.tune.schedulers import make_scheduler
from dmlsearch.search.tune.searcher import StudySearcher
from dmlsearch.search.tune.settings import TrialEvents
from dmlsearch.search.tune.settings import TuneSettings
from dmlsearch.search.tune.tuner import attribute_stops
from dmlsearch.search.tune.tuner import begin
from dmlsearch.search.tune.tuner import fit
from dmlsearch.search.tune.tuner import make_searcher
from dmlsearch.search.tune.tuner import make_tuner
from dmlsearch.search.tune.tuner import restore_experiment
from dmlsearch.search.tune.tuner import restore_tuner

__all__ = ["MethodPlan", "MethodRouter", "MethodsScheduler", "MethodsSearcher", "method_of",
           "resume_methods", "run_methods", "without_method"]


def method_of(config: Mapping[str, Any]) -> str | None:
    return config.get(METHOD_KEY)


def without_method(config: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's configuration as its method's search sees it: setting keys only."""
    return {k: v for k, v in config.items() if k != METHOD_KEY}


@dataclasses.dataclass(frozen=True)
class MethodPlan:
    """One method's search in a comparison: its own settings (study, sampler, scheduler,
    max_iterations), its space, its warm starts, its budget, and how many trials it may start
    at most (its budget over the shortest a trial can train)."""

    settings: TuneSettings
    define_by_run: Callable[[Any], dict[str, Any]]
    warm_starts: list[dict[str, Any]]
    limit: Limit
    max_trials: int


def run_methods(shared: TuneSettings, plans: Mapping[str, MethodPlan], *,
                events: TrialEvents) -> dict[str, list[TrialRecord]]:
    """Search every method at once; each method's trial records."""
    begin(events)
    searchers = {name: make_searcher(p.settings, define_by_run=p.define_by_run,
                                     warm_starts=p.warm_starts, limit=p.limit)
                 for name, p in plans.items()}
    scheduler = MethodsScheduler(
        {name: make_scheduler(p.settings) for name, p in plans.items()},
        limits={name: p.limit for name, p in plans.items()},
        devices_per_trial=shared.gpus_per_trial)
    searcher = MethodsSearcher(searchers, max_trials={n: p.max_trials for n, p in plans.items()})
    tuner = make_tuner(shared, searcher=searcher, scheduler=scheduler,
                       num_samples=sum(p.max_trials for p in plans.values()),
                       pauses_at=_pauses(plans))
    return _by_method(fit(tuner), plans)


def resume_methods(shared: TuneSettings, plans: Mapping[str, MethodPlan], *,
                   events: TrialEvents) -> dict[str, list[TrialRecord]]:
    """Continue a comparison whose driver stopped (as :func:`~.tuner.resume_tune`)."""
    begin(events)
    restore_experiment(shared, [plan.settings for plan in plans.values()], events)
    return _by_method(fit(restore_tuner(shared, pauses_at=_pauses(plans))), plans)


def _pauses(plans: Mapping[str, MethodPlan]) -> tuple[int, ...]:
    """Where any method's scheduler may pause a trial (every trial checkpoints there)."""
    return tuple(sorted({epoch for plan in plans.values()
                         for epoch in SCHEDULERS.get(plan.settings.scheduler).pauses_at(
                             plan.settings)}))


def _by_method(records: list[TrialRecord], plans: Mapping[str, MethodPlan]
               ) -> dict[str, list[TrialRecord]]:
    grouped: dict[str, list[TrialRecord]] = {name: [] for name in plans}
    for record in records:
        name = method_of(record.config)
        if name in grouped:
            grouped[name].append(dataclasses.replace(record, config=without_method(record.config)))
    return {name: attribute_stops(group, plans[name].settings) for name, group in grouped.items()}


class MethodsSearcher(Searcher):
    """The methods' searchers as one: each proposal comes from the method that has spent the
    least of its budget (ties: the order given), until every method's budget is spent or it
    started ``max_trials`` trials."""

    def __init__(self, searchers: Mapping[str, StudySearcher], *,
                 max_trials: Mapping[str, int]) -> None:
        first = next(iter(searchers.values()))
        super().__init__(metric=first.metric, mode=first.mode)
        self._searchers = dict(searchers)
        self._order = list(searchers)
        self._max_trials = dict(max_trials)
        self._started = {name: 0 for name in searchers}
        self._finished: set[str] = set()
        self._method: dict[str, str] = {}  # Ray trial -> method

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        return False  # configured at construction

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if trial_id in self._method:  # asked again for the same trial (a restore)
            return None
        active = [n for n in self._order if n not in self._finished]
        for name in sorted(active, key=lambda n: (self._searchers[n].committed,
                                                  self._order.index(n))):
            if self._started[name] >= self._max_trials[name]:
                self._finished.add(name)
                continue
            config = self._searchers[name].suggest(trial_id)
            if config == Searcher.FINISHED:
                self._finished.add(name)
                continue
            if config is None:
                continue
            self._method[trial_id] = name
            self._started[name] += 1
            return {**config, METHOD_KEY: name}
        return Searcher.FINISHED if len(self._finished) == len(self._order) else None

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        name = self._method.get(trial_id)
        if name is not None:
            self._searchers[name].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        name = self._method.get(trial_id)
        if name is not None:
            self._searchers[name].on_trial_complete(trial_id, result, error)

    def save(self, checkpoint_path: str) -> None:
        write_atomic(Path(checkpoint_path), pickle.dumps(self.__dict__))

    def restore(self, checkpoint_path: str) -> None:
        self.__dict__.update(pickle.loads(Path(checkpoint_path).read_bytes()))
        for name, searcher in self._searchers.items():
            searcher._reconcile()  # noqa: SLF001 - the study is the truth after a restore
            # trials its study held that the saved state did not (.restore): this method's
            ran = searcher.trial_ids()
            for trial_id in ran:
                self._method.setdefault(trial_id, name)
            self._started[name] = max(self._started[name], len(ran))


class MethodsScheduler(TrialScheduler):
    """One scheduler per method: each method's trials are stopped early against its own trials
    only (ASHA's rungs, the median rule), never against another method's; and a method's
    running trials are stopped once its budget (``limits``) is spent, so that every method
    trains exactly its budget."""

    def __init__(self, schedulers: Mapping[str, TrialScheduler], *,
                 limits: Mapping[str, Limit], devices_per_trial: float) -> None:
        super().__init__()
        self._schedulers = dict(schedulers)
        self._limits = dict(limits)
        self._usage = {name: Usage(devices_per_trial) for name in schedulers}
        self._live: dict[str, set[str]] = {name: set() for name in schedulers}  # not ended
        self._metric: str | None = None  # Tune sets them (set_search_properties)
        self._mode: str | None = None

    def _name(self, trial: Any) -> str:
        return method_of(trial.config) or next(iter(self._schedulers))

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        self._metric, self._mode = metric, mode
        return all(s.set_search_properties(metric, mode, **spec)
                   for s in self._schedulers.values())

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        name = self._name(trial)
        # A restored comparison: what its trials trained before counts (Ray restores the
        # scheduler as it was made, not as it was when the driver stopped).
        self._usage[name].add(trial.trial_id, trial.last_result or {})
        if trial.status not in ("TERMINATED", "ERROR"):
            self._live[name].add(trial.trial_id)
        self._schedulers[name].on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._live[self._name(trial)].discard(trial.trial_id)
        self._schedulers[self._name(trial)].on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        name = self._name(trial)
        decision = self._schedulers[name].on_trial_result(tune_controller, trial, result)
        self._usage[name].add(trial.trial_id, result)
        if self._out_of_budget(name, trial.trial_id):
            self._live[name].discard(trial.trial_id)
            return TrialScheduler.STOP
        return decision

    def _out_of_budget(self, name: str, trial_id: str) -> bool:
        """Stop this trial when the method's budget is spent, or (an epoch budget) when what
        is left will go to its other trials, each still owing the epoch it is training."""
        limit, usage = self._limits[name], self._usage[name]
        if limit.spent(usage):
            return True
        others = len(self._live[name] - {trial_id})
        return limit.epochs is not None and usage.epochs + others >= limit.epochs

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self._live[self._name(trial)].discard(trial.trial_id)
        self._schedulers[self._name(trial)].on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._live[self._name(trial)].discard(trial.trial_id)
        self._schedulers[self._name(trial)].on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        for scheduler in self._schedulers.values():
            trial = scheduler.choose_trial_to_run(tune_controller)
            if trial is not None:
                return trial
        return None

    def debug_string(self) -> str:
        return "; ".join(f"{name}: {s.debug_string()}" for name, s in self._schedulers.items())


class MethodRouter:
    """Trial events to the method's own listener (its MLflow tracker), by the trial's method;
    ``everyone`` (the progress on screen) hears every trial, its configuration with a
    ``method`` key."""

    def __init__(self, listeners: Mapping[str, TrialEvents],
                 everyone: Sequence[TrialEvents] = ()) -> None:
        self._listeners = dict(listeners)
        self._everyone = list(everyone)
        self._method: dict[str, str] = {}

    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None:
        name = method_of(config) or self._method.get(trial_id)
        if name is not None:
            self._method[trial_id] = name
        own = self._listeners.get(name or "")
        if own is not None:
            own.trial_started(trial_id, without_method(config))
        for listener in self._everyone:
            listener.trial_started(trial_id, {"method": name, **without_method(config)})

    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        for listener in self._for(trial_id):
            listener.trial_result(trial_id, result)

    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None:
        for listener in self._for(trial_id):
            listener.trial_finished(trial_id, state, reason)

    def _for(self, trial_id: str) -> list[TrialEvents]:
        own = self._listeners.get(self._method.get(trial_id, ""))
        return ([own] if own is not None else []) + self._everyone
