"""Ray Tune's trial events on the driver, forwarded to the search's
:class:`~dmlsearch.search.tune.settings.TrialEvents` (the MLflow tracker).

Module-level, like the searcher: Ray's experiment state pickles the callback, and a resumed
search gets the class by reference, so events reach *this* driver's tracker (registered with
:func:`set_events`), not a copy frozen at the first start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ray import tune

from dmlsearch.search.results import TrialState
from dmlsearch.search.tune.ray_results import short_reason
from dmlsearch.search.tune.searcher import end_failed_trial

__all__ = ["ForwardEvents", "error_reason", "set_events"]

_EVENTS: list[Any] = []  # the current driver's TrialEvents (one at a time)


def set_events(events: Any) -> None:
    _EVENTS[:] = [events]


def _events() -> Any:
    if not _EVENTS:
        raise RuntimeError("no TrialEvents registered for this search (set_events first)")
    return _EVENTS[0]


def error_reason(trial: Any) -> str:
    """The line of the trial's exception that says why (``TrialFailed: loss became nan ...``)."""
    text = ""
    try:
        error = trial.get_error()
        text = str(error) if error is not None else ""
    except Exception:  # noqa: BLE001 - the reason is best effort; the state is what matters
        pass
    if not text and trial.error_file and os.path.exists(trial.error_file):
        text = Path(trial.error_file).read_text(errors="replace")
    return short_reason(text)


class ForwardEvents(tune.Callback):
    """Driver-side trial events → the registered ``TrialEvents``."""

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _events().trial_started(trial.trial_id, dict(trial.config))

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        _events().trial_result(trial.trial_id, result)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        finished = trial.last_result.get("trial_finished")
        state = TrialState.COMPLETED if finished else TrialState.PRUNED
        _events().trial_finished(trial.trial_id, state.value, None)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        reason = error_reason(trial)
        end_failed_trial(trial.trial_id, reason)  # the Optuna trial ends FAIL, with its reason
        _events().trial_finished(trial.trial_id, TrialState.FAILED.value, reason)
