"""Ray Tune classes the experiment state pickles: module-level, so a resumed search gets them
by reference and they reach *this* process's tracker, not a copy frozen at the first start.

Imported only by :mod:`search.ray_backend` (the one module that talks to Ray), and only when a
search runs: importing Ray costs seconds that a CLI error should not pay.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from ray import tune
from ray.tune.search.optuna import OptunaSearch

from dmlsearch.search.study_attrs import FULL_LENGTH
from dmlsearch.search.study_attrs import RAY_TRIAL_ID
from dmlsearch.search.study_attrs import REASON
from dmlsearch.search.study_attrs import REPEAT_OF

__all__ = ["MAX_REPEATS", "ForwardEvents", "SafeOptunaSearch", "flush_failures", "record_failure",
           "set_events", "trial_dirname"]

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
        from dmlsearch.search.ray_backend import error_reason

        reason = error_reason(trial)
        record_failure(trial.trial_id, reason)  # the Optuna trial ends FAIL, with its reason
        _events().trial_finished(trial.trial_id, "failed", reason)


# Proposals in a row that repeat trained configurations before the search is called finished.
MAX_REPEATS = 100

# Failed trials whose Optuna trial waits for its reason: Ray tells the searcher that a trial
# errored before its callbacks (which can read the error) hear of it, and a finished Optuna
# trial takes no more attributes. trial id -> the searcher's function that ends it as FAIL.
_PENDING_FAILURES: dict[str, Callable[[str], None]] = {}


def record_failure(trial_id: str, reason: str) -> None:
    """End the Optuna trial of a failed Ray trial as FAIL, with ``reason`` as user attribute."""
    fail = _PENDING_FAILURES.pop(trial_id, None)
    if fail is not None:
        fail(reason)


def flush_failures() -> None:
    """End the Optuna trials of failures whose reason never came (see ``_PENDING_FAILURES``)."""
    for trial_id in list(_PENDING_FAILURES):
        record_failure(trial_id, "failed (Ray Tune gave no reason)")


class SafeOptunaSearch(OptunaSearch):
    """Ray's Optuna searcher, tolerant of a resumed search telling a result twice, and telling
    Optuna why a trial failed.

    A driver killed after Optuna recorded a trial's result but before Ray saved its own
    experiment state resumes that trial from its last checkpoint and completes it again;
    Optuna refuses a second ``tell`` for a finished trial, and the study already holds the
    result, so the repeat is skipped. Each Optuna trial records the Ray trial id it ran as
    (user attribute ``ray_trial_id``), and a failed one the reason (``dmlsearch_reason``).

    **Repeated configurations are not trained again.** A trial is deterministic given its
    configuration, seed included (every fit seeds its own RNGs), so when the sampler proposes
    exactly the parameters of a trial that already trained to its last epoch, the proposal is
    answered with that trial's result (user attribute ``dmlsearch_repeat_of``: its number) and
    the sampler is asked again; no Ray trial is started for it. This is the usual Optuna recipe
    for duplicates: TPE and the others re-propose points of small categorical spaces often
    (docs/benchmarks.md, search efficiency: 3 to 6 of 14 trials). A trial that a scheduler
    stopped early, failed, or is still running is no answer, so its configuration may run again.
    After :data:`MAX_REPEATS` repeats in a row the sampler has nothing new to offer (a finite
    space trained out, or a sampler settled on one point) and the search asks for no more trials.
    """

    def suggest(self, trial_id: str) -> dict | str | None:
        for _ in range(MAX_REPEATS):
            suggestion = super().suggest(trial_id)
            ot_trial = self._ot_trials.get(trial_id)
            if suggestion is None or ot_trial is None:
                return suggestion
            earlier = self._trained_before(ot_trial)
            if earlier is None:
                ot_trial.set_user_attr(RAY_TRIAL_ID, trial_id)
                return suggestion
            self._answer_repeat(trial_id, ot_trial, earlier)
        log.warning("the sampler proposed %d configurations in a row that were already trained; "
                    "no new trials are started (the space is trained out, or the sampler has "
                    "settled)", MAX_REPEATS)
        return self.FINISHED

    def _trained_before(self, ot_trial: Any) -> Any:
        """The first trial with exactly ``ot_trial``'s parameters that trained to its end."""
        import optuna

        params = ot_trial.params
        for frozen in self._ot_study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if frozen.params == params and frozen.user_attrs.get(FULL_LENGTH):
                return frozen
        return None

    def _answer_repeat(self, trial_id: str, ot_trial: Any, earlier: Any) -> None:
        ot_trial.set_user_attr(REPEAT_OF, earlier.number)
        self._ot_study.tell(ot_trial, earlier.values)
        del self._ot_trials[trial_id]  # the next super().suggest asks Optuna afresh
        log.info("Optuna trial %d repeats trial %d's configuration, already trained; answered "
                 "from its result", ot_trial.number, earlier.number)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is not None:
            frozen = self._ot_study._storage.get_trial(ot_trial._trial_id)
            if frozen.state.is_finished():
                log.info("Optuna trial %d already finished; not told again", frozen.number)
                self._ot_trials.pop(trial_id, None)
                return
            if error and trial_id not in self._completed_trials:
                _PENDING_FAILURES[trial_id] = functools.partial(self._fail, trial_id)
                return
            if not error and result and result.get("trial_finished"):
                ot_trial.set_user_attr(FULL_LENGTH, True)  # a repeat may be answered from it
        super().on_trial_complete(trial_id, result, error)

    def _fail(self, trial_id: str, reason: str) -> None:
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None or trial_id in self._completed_trials:
            return
        try:
            ot_trial.set_user_attr(REASON, reason[:2000])
        except Exception as exc:  # noqa: BLE001 - the state matters more than the reason
            log.warning("could not record why Optuna trial %d failed: %s", ot_trial.number, exc)
        super().on_trial_complete(trial_id, None, error=True)
