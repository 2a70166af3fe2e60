"""Configurations a search trains to their end whatever its scheduler would say
(``TuneSettings.keep_to_end``): with ``--prior-from``, the source's best configuration
(:mod:`dmlsearch.search.transfer`).

Why: a search with transfer tries the source's best few configurations first, all at once at
``--concurrency`` 4. ASHA then judges them on their first epochs against each other, the first to
reach a rung setting the cut-off for the rest; replaying glyphs-a → glyphs-b it stopped the
source's best point at a rung in 12 of 30 searches, so the search could not say after its first
wave how the previous best does on the new data, which is what a user retraining it by hand
would learn. Kept to its end, it costs at most one training's worth of the budget; the
other transferred points are judged as every trial is (issue 36; docs/benchmarks.md, "The
source's best trains to its end").

:class:`KeepToEnd` wraps a scheduler that stops a trial only by its decision on the trial's
results and forgets that decision (``asha``, ``soft-asha``: ``SchedulerInfo.keeps``): a STOP
for a kept trial before its last epoch becomes CONTINUE. The wrapped scheduler has already
recorded the result (an ASHA rung holds it) and judges the trial again at its next rung. Not
wrapped: a scheduler that remembers the trials it stopped (Ray's median stopping rule refuses
their later results) or pauses trials and stops them through the controller (HyperBand's
brackets). Imports Ray.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ray.tune.schedulers import TrialScheduler

__all__ = ["KeepToEnd", "matches"]

ITERATION = "training_iteration"  # every scheduler's time (schedulers.py)


def matches(point: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Whether a trial's ``config`` is ``point``: every setting of the point has its value there
    (numbers to within rounding: a value that went through Optuna and back)."""
    for key, want in point.items():
        if key not in config:
            return False
        got = config[key]
        if isinstance(want, bool) or isinstance(got, bool):
            if want is not got:  # True == 1 in Python; a choice is not a number
                return False
        elif isinstance(want, (int, float)) and isinstance(got, (int, float)) and \
                not isinstance(want, bool) and not isinstance(got, bool):
            if not math.isclose(float(want), float(got), rel_tol=1e-9, abs_tol=1e-12):
                return False
        elif want != got:
            return False
    return True


class KeepToEnd(TrialScheduler):
    """``inner``'s decisions, but a trial whose configuration is one of ``keep`` is not stopped
    before ``max_t`` (module docstring)."""

    def __init__(self, inner: TrialScheduler, keep: Sequence[Mapping[str, Any]], max_t: int
                 ) -> None:
        super().__init__()
        self.inner = inner
        self.keep = [dict(point) for point in keep]
        self.max_t = max_t
        self.kept: set[str] = set()  # the trials it kept from a stop (ids)

    def is_kept(self, trial: Any) -> bool:
        return any(matches(point, trial.config) for point in self.keep)

    # ---- Ray's TrialScheduler, each call passed on --------------------------------------------
    @property
    def metric(self) -> str | None:
        return self.inner.metric

    @property
    def supports_buffered_results(self) -> bool:
        return self.inner.supports_buffered_results

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return self.inner.set_search_properties(metric, mode, **spec)

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self.inner.on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self.inner.on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        decision = self.inner.on_trial_result(tune_controller, trial, result)
        if (decision == TrialScheduler.STOP and result.get(ITERATION, 0) < self.max_t
                and self.is_kept(trial)):
            self.kept.add(trial.trial_id)
            return TrialScheduler.CONTINUE
        return decision

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self.inner.on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self.inner.on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        return self.inner.choose_trial_to_run(tune_controller)

    def debug_string(self) -> str:
        return self.inner.debug_string()

    def save(self, checkpoint_path: str) -> None:
        self.inner.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.inner.restore(checkpoint_path)
