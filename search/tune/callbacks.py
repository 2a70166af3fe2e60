"""Ray Tune's trial events on the driver, forwarded to the search's
:class:`~dmlsearch.search.tune.settings.TrialEvents` (the MLflow tracker), and each trial's
result files (:class:`TrialFiles`).

Module-level, like the searcher: Ray's experiment state pickles the callback, and a resumed
search gets the class by reference, so events reach *this* driver's tracker (registered with
:func:`set_events`), not a copy frozen at the first start.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.logger import LoggerCallback
from ray.tune.utils.util import SafeFallbackEncoder

from dmlsearch.search.results import TrialState
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tune.ray_results import short_reason
from dmlsearch.search.tune.searcher import end_failed_trial

__all__ = ["ForwardEvents", "TrialFiles", "error_reason", "set_events"]

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


class TrialFiles(LoggerCallback):
    """Each trial's ``params.json`` (as it starts) and ``result.json`` (a line per result, as it
    comes), written straight into its folder in the experiment (a local one: Ray's storage
    folder). Ray's own ``JsonLoggerCallback`` writes them into a staging folder that Ray copies
    over only when it saves the experiment (every 10 s or more), so a driver killed in between
    took the trials' last results with it while the study already held them; a resume reads
    these files (:mod:`.restore`). Written before Ray hands the result to the searcher's end
    of the trial, so a trial its study ended has its last result here."""

    def __init__(self) -> None:
        self._files: dict[Any, Any] = {}

    def log_trial_start(self, trial: Any) -> None:
        self._close(trial)
        trial.init_local_path()  # names its folder
        folder = Path(trial.path)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "params.json",
                     json.dumps(trial.config, indent=2, sort_keys=True, cls=SafeFallbackEncoder))
        # restored from a checkpoint it goes on (as Ray's own); from its start it starts over
        mode = "a" if trial.checkpoint is not None else "w"
        self._files[trial] = (folder / "result.json").open(mode)

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        if trial not in self._files:
            self.log_trial_start(trial)
        handle = self._files[trial]
        handle.write(json.dumps(result, cls=SafeFallbackEncoder) + "\n")
        handle.flush()

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        self._close(trial)

    def _close(self, trial: Any) -> None:
        handle = self._files.pop(trial, None)
        if handle is not None:
            handle.close()
