"""ASHA that stays safe when early ranks are noisy: a trial is stopped at a rung only when it is
further below the rung's cut-off than the search's own evidence says early scores can be wrong
by (``--scheduler soft-asha``).

Ray's ASHA stops a trial at a rung when its score is below the top 1/η of the scores recorded
there. On the learning-curve tables (docs/benchmarks.md) that drops up to a third of the best
configurations at the first rung when early scores rank poorly (the glyph table after 2 of 8
epochs, Spearman ρ 0.6-0.7 with the final score): the best configurations often start slowly.

This scheduler keeps PASHA's soft ranking (Bohdal et al., 2023: configurations within ε of each
other count as tied) in ASHA's stopping rule: a trial continues when its score is at least the
cut-off minus ε, where ε, per rung, is the median absolute deviation of the *gains* from that
rung to the next milestone (the next rung, or the last epoch) of the trials that reached both:
how differently trials go on improving, which is exactly what makes an early rank wrong. When
trials improve alike, ε is near 0 and this is ASHA; when they do not, ε widens the door. Until
:data:`MIN_GAINS` trials have reached the next milestone from a rung, ε there is 0: the search
decides as ASHA does until it has measured how noisy the rung is (an infinite ε, no stopping
until then, trained the first trials of a 40-trial search nearly in full: in a 5-seed pilot on
two tables that cost more than it saved).

The rungs, the cut-off and the trials' brackets are Ray's (``AsyncHyperBandScheduler``,
``_Bracket``); only the stopping test differs.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from ray.tune.schedulers import TrialScheduler
from ray.tune.schedulers.async_hyperband import AsyncHyperBandScheduler
from ray.tune.schedulers.async_hyperband import _Bracket

__all__ = ["MIN_GAINS", "SoftASHA", "noise_margin"]

MIN_GAINS = 4


def noise_margin(gains: list[float]) -> float:
    """ε of a rung from the gains of the trials that went on to the next milestone: their
    median absolute deviation (0, ASHA's own test, with fewer than :data:`MIN_GAINS`)."""
    if len(gains) < MIN_GAINS:
        return 0.0
    centre = statistics.median(gains)
    return statistics.median(abs(g - centre) for g in gains)


class _SoftBracket(_Bracket):
    def __init__(self, *args: Any, history: dict[str, dict[int, float]], max_t: int,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._history, self._max_t = history, max_t

    def margin(self, milestone: int) -> float:
        """ε at ``milestone`` (module docstring)."""
        later = sorted(m for m, _ in self._rungs if m > milestone)
        upto = later[0] if later else self._max_t
        gains = [scores[upto] - scores[milestone] for scores in self._history.values()
                 if milestone in scores and upto in scores]
        return noise_margin(gains)

    def on_result(self, trial: Any, cur_iter: int, cur_rew: float | None) -> str:
        action = TrialScheduler.CONTINUE
        for milestone, recorded in self._rungs:
            if cur_iter < milestone or trial.trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            if cutoff is not None and cur_rew is not None and \
                    cur_rew < cutoff - self.margin(milestone):
                action = TrialScheduler.STOP
            if cur_rew is not None:
                recorded[trial.trial_id] = cur_rew
            break
        return action


class SoftASHA(AsyncHyperBandScheduler):
    """ASHA with PASHA's soft ranking (module docstring); the arguments are ASHA's."""

    def __init__(self, *, time_attr: str, max_t: int, grace_period: int,
                 reduction_factor: float, metric: str | None = None,
                 mode: str | None = None) -> None:
        super().__init__(time_attr=time_attr, metric=metric, mode=mode, max_t=max_t,
                         grace_period=grace_period, reduction_factor=reduction_factor)
        self._history: dict[str, dict[int, float]] = {}  # trial -> iteration -> reward
        self._brackets = [_SoftBracket(grace_period, max_t, reduction_factor, 0,
                                       history=self._history, max_t=max_t)]

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if self._time_attr in result and self._metric in result and self._metric_op:
            value = result[self._metric]
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._history.setdefault(trial.trial_id, {})[int(result[self._time_attr])] = (
                    self._metric_op * float(value))
        return super().on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        if result and self._time_attr in result and self._metric in result and self._metric_op:
            value = result[self._metric]
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._history.setdefault(trial.trial_id, {})[int(result[self._time_attr])] = (
                    self._metric_op * float(value))
        super().on_trial_complete(tune_controller, trial, result)
