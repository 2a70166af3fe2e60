"""Synchronous HyperBand (``--scheduler hyperband``): Ray Tune's scheduler, with three repairs.

Ray's ``HyperBandScheduler`` pauses a trial that reaches its bracket's milestone until every
other live trial of the bracket reaches it too, then halves the bracket (or, at the last
milestone, ends it: the bracket is finished and its trials are stopped). In Ray 2.60:

1. **A trial leaving a bracket mid-way left its bracket-mates paused for ever.** When a trial
   fails (a NaN loss, out of memory) or ends on its own, the trials paused waiting for it must go
   on, but Ray processes the bracket again only if it is not finished and its
   ``is_being_processed`` flag is down, a flag raised at the first halving and never lowered. So
   a trial failing after its bracket's first halving hung the search with nothing running. Here
   the flag is up exactly while the bracket is processed (it hides only the removals processing
   itself causes), and a removal always processes the bracket.
2. **A trial whose pause was still in flight when its bracket finished stayed paused for ever.**
   Pausing a trial saves it first; until the save returns, the trial is still RUNNING (saving).
   When the bracket's last trial then reaches the last milestone, Ray stops the bracket's PAUSED
   trials only, so the one still saving becomes PAUSED a moment later in a finished bracket that
   nothing processes again: it is never resumed nor stopped, it holds a place of the concurrency
   limit, and the search never ends (the likely cause of 1 hang in 20 replayed searches,
   docs/benchmarks.md; made to happen every time by a trainable whose save is slow,
   ``tests/search/tune/test_hyperband.py``). Here a finished bracket stops its saving trials too,
   as Ray's own halving already does for the trials it stops.
3. **The most aggressive brackets never trained their winners to the end.** Ray multiplies the
   first milestone, ``int(max_t / eta^s)``, by ``eta`` at each halving and caps it at ``max_t``,
   so unless ``max_t`` is a power of ``eta`` a bracket's last milestone falls short of it (with
   ``max_t`` 12 and ``eta`` 3: 1, 3, 9; with 12 and 2: 1, 2, 4, 8). Its winner is stopped early,
   so it is no full-budget trial, and the best trial, the retrain and the rankings (which compare
   full-budget trials only) never see it. Here the milestones are those of Li et al. (JMLR 2018,
   Algorithm 1: ``r_i = R eta^(i - s)``), rounded and strictly increasing, the last ``max_t``
   (12 and 3: 1, 4, 12).
"""

from __future__ import annotations

import math
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import HyperBandScheduler
from ray.tune.schedulers.hyperband import _Bracket

__all__ = ["HyperBand", "milestones"]


def _milestone(max_t: int, eta: float, halvings_left: int, previous: int) -> int:
    """The epoch a bracket's trials train to after a halving: ``max_t / eta^halvings_left``
    rounded, after ``previous`` and before ``max_t``; ``max_t`` once no halving is left."""
    if halvings_left <= 0:
        return max_t
    return min(max_t - 1, max(previous + 1, round(max_t / eta ** halvings_left)))


def milestones(max_t: int, eta: float) -> list[list[int]]:
    """Each bracket's milestones (epochs where its trials are paused, then ``max_t``), as
    :class:`HyperBand` makes its brackets: bracket ``s`` starts at Ray's ``int(max_t / eta^s)``
    (skipped when 0) and halves ``s`` times to :func:`_milestone`."""
    brackets = int(round(math.log(max_t) / math.log(eta))) + 1
    out = []
    for s in range(brackets):
        first = int(max_t / eta ** s)
        if first <= 0:
            continue
        rungs = [min(first, max_t)]
        for halvings_left in range(s - 1, -1, -1):
            if rungs[-1] >= max_t:
                break
            rungs.append(_milestone(max_t, eta, halvings_left, rungs[-1]))
        out.append(rungs)
    return out


class _ToTheEnd(_Bracket):
    """A bracket whose last milestone is ``max_t``."""

    def successive_halving(self, metric: str, metric_op: float) -> tuple[list, list]:
        previous = self._cumul_r
        good, bad = super().successive_halving(metric, metric_op)
        if self.stop_last_trials:
            self._r = self._cumul_r = _milestone(self._max_t_attr, self._eta, self._halves,
                                                 previous)
        return good, bad


class HyperBand(HyperBandScheduler):
    """``HyperBandScheduler`` that leaves no trial paused for ever and trains every bracket's
    winners to ``max_t`` (the module's docstring says why)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reporting: Trial | None = None  # the trial whose result is being decided on

    def _create_bracket(self, s: int) -> _Bracket:
        return _ToTheEnd(time_attr=self._time_attr, max_trials=self._get_n0(s),
                         init_t_attr=self._get_r0(s), max_t_attr=self._max_t_attr,
                         eta=self._eta, s=s, stop_last_trials=self._stop_last_trials)

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        self._reporting = trial
        try:
            return super().on_trial_result(tune_controller, trial, result)
        finally:
            self._reporting = None

    def _process_bracket(self, tune_controller: Any, bracket: Any) -> str:
        bracket.is_being_processed = True
        try:
            action = super()._process_bracket(tune_controller, bracket)
            if bracket.finished():  # Ray stopped its PAUSED trials; the saving ones too
                for trial in bracket.current_trials():
                    if trial.is_saving and trial is not self._reporting:
                        tune_controller.stop_trial(trial)
            return action
        finally:
            bracket.is_being_processed = False

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        bracket, _ = self._trial_info[trial]
        bracket.cleanup_trial(trial)
        if not bracket.is_being_processed:
            self._process_bracket(tune_controller, bracket)
