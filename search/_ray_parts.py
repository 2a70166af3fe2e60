"""Ray Tune classes the experiment state pickles: module-level, so a resumed search gets them
by reference and they reach *this* process's tracker, not a copy frozen at the first start.

Imported only by :mod:`search.ray_backend` (the one module that talks to Ray), and only when a
search runs: importing Ray costs seconds that a CLI error should not pay.
"""

from __future__ import annotations

import logging
from typing import Any

from ray import tune
from ray.tune.search.optuna import OptunaSearch

__all__ = ["ForwardEvents", "SafeOptunaSearch", "set_events", "trial_dirname"]

log = logging.getLogger(__name__)

_EVENTS: list[Any] = []  # the current driver's TrialEvents (one at a time)


def set_events(events: Any) -> None:
    _EVENTS[:] = [events]


def _events() -> Any:
    if not _EVENTS:
        raise RuntimeError("no TrialEvents registered for this search (set_events first)")
    return _EVENTS[0]


def trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id}"


class ForwardEvents(tune.Callback):
    """Driver-side trial events → the registered :class:`search.ray_backend.TrialEvents`."""

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _events().trial_started(trial.trial_id, dict(trial.config))

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        _events().trial_result(trial.trial_id, result)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        state = "completed" if trial.last_result.get("trial_finished") else "stopped"
        _events().trial_finished(trial.trial_id, state, None)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        from search.ray_backend import error_reason

        _events().trial_finished(trial.trial_id, "failed", error_reason(trial))


class SafeOptunaSearch(OptunaSearch):
    """Ray's Optuna searcher, tolerant of a resumed search telling a result twice.

    A driver killed after Optuna recorded a trial's result but before Ray saved its own
    experiment state resumes that trial from its last checkpoint and completes it again;
    Optuna refuses a second ``tell`` for a finished trial, and the study already holds the
    result, so the repeat is skipped.
    """

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is not None:
            frozen = self._ot_study._storage.get_trial(ot_trial._trial_id)
            if frozen.state.is_finished():
                log.info("Optuna trial %d already finished; not told again", frozen.number)
                self._ot_trials.pop(trial_id, None)
                return
        super().on_trial_complete(trial_id, result, error)
