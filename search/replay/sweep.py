"""The thesis's one-parameter-at-a-time sweep (Psomas 2020, ch. 5.2) as a proposer of trials,
so that it runs on the simulated clock (:mod:`.simulate`) like every search it is compared with.

A *plan* is a list of (start, stages), one per loss in the order it is swept: from ``start``
(the loss's published defaults), each stage sweeps one parameter over its values with the others
fixed, and the best of the stage's points (its best validation score; the first of equals, in
the stage's order) is where the next stage starts. A point trained in an earlier stage is not
trained again. The stage's points are proposed in order as places free up; the next stage
waits until every point of this one has ended (``suggest`` answers None meanwhile): a sweep
cannot go on before it knows its best point, so its trainings idle at each stage's end where a
search's do not. ``benchmarks/efficiency_tables.py`` builds the plans of the benchmark's sweeps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from dmlsearch.search.replay.simulate import FINISHED
from dmlsearch.search.tune.ray_results import SCORE

__all__ = ["OneAtATimeSweep", "Plan"]

Stage = tuple[str, Sequence[Any]]  # a parameter and the values it is swept over
Plan = Sequence[tuple[Mapping[str, Any], Sequence[Stage]]]


def _frozen(point: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(point.items()))


class OneAtATimeSweep:
    """The sweep of ``plan`` (module docstring) with Ray Tune's ``Searcher`` interface; each
    trial's configuration is ``base`` with the point's settings. ``mode``: whether a higher
    score is better ("max") or a lower one ("min")."""

    def __init__(self, plan: Plan, *, base: Mapping[str, Any] | None = None,
                 mode: str = "max") -> None:
        self._plan = [(dict(start), [(key, list(values)) for key, values in stages])
                      for start, stages in plan]
        self._base = dict(base or {})
        self._sign = -1.0 if mode == "min" else 1.0
        self.scores: dict[tuple[tuple[str, Any], ...], float] = {}  # every point trained
        self.chosen: list[dict[str, Any]] = []  # each stage's best point, stage by stage
        self._last: dict[str, float] = {}  # trial -> its last score
        self._running: dict[str, tuple[tuple[str, Any], ...]] = {}  # trial -> its point
        self._queue: list[dict[str, Any]] = []
        self._stage: list[dict[str, Any]] | None = None  # the points of the stage under way
        self._steps = iter([(i, k) for i, (_, stages) in enumerate(self._plan)
                            for k in range(len(stages))])
        self._current: dict[str, Any] = {}
        self._loss = -1

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        while not self._queue:
            if self._running:
                return None  # the stage's last points are training: its best is not known
            if not self._next_stage():
                return FINISHED
        point = self._queue.pop(0)
        self._running[trial_id] = _frozen(point)
        return {**self._base, **point}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        score = result.get(SCORE)
        if isinstance(score, (int, float)) and math.isfinite(score):
            self._last[trial_id] = float(score)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        if result is not None and not error:
            self.on_trial_result(trial_id, result)
        point = self._running.pop(trial_id, None)
        if point is not None:  # a failed training scores worst
            self.scores[point] = self._last.pop(trial_id, -self._sign * math.inf)

    def _next_stage(self) -> bool:
        """Close the stage under way (its best point is the next stage's start) and open the
        next one; False when the plan is done."""
        if self._stage is not None:
            best = max(self._stage, key=lambda p: self._sign * self.scores[_frozen(p)])
            self.chosen.append(best)
            self._current = dict(best)
        step = next(self._steps, None)
        if step is None:
            self._stage = None
            return False
        loss, k = step
        if loss != self._loss:
            self._loss, self._current = loss, dict(self._plan[loss][0])
        key, values = self._plan[loss][1][k]
        self._stage = [{**self._current, key: value} for value in values]
        self._queue = [p for p in self._stage if _frozen(p) not in self.scores]
        return True
