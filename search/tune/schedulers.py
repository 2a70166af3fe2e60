"""Which trials stop early (``--scheduler``): a registry of Ray Tune trial schedulers.

Time is ``training_iteration``: epochs trained over all folds and repeats. Ray is imported when
a scheduler is built, not when the names are checked.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from dmlsearch.search.tune.settings import TuneSettings
from dmlsearch.trainables.registry import Registry

__all__ = ["SCHEDULERS", "SchedulerInfo"]


@dataclasses.dataclass(frozen=True)
class SchedulerInfo:
    description: str
    make: Callable[[TuneSettings], Any]
    # the first epoch (over folds) at which it may stop a trial; None: it never does
    first_rung: Callable[[TuneSettings], int | None] = lambda settings: None
    # the epochs (over folds) at which it may pause a trial, to resume it later: a trial
    # saves a checkpoint there (besides its regular ones); empty: it never pauses
    pauses_at: Callable[[TuneSettings], tuple[int, ...]] = lambda settings: ()


SCHEDULERS: Registry[SchedulerInfo] = Registry("scheduler", option="--scheduler",
                                               fix="see `dmlsearch run --help`")


def _asha(settings: TuneSettings) -> Any:
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="training_iteration", max_t=settings.max_iterations,
                         grace_period=settings.grace_period,
                         reduction_factor=settings.reduction_factor)


def _hyperband(settings: TuneSettings) -> Any:
    from dmlsearch.search.tune.hyperband import HyperBand

    return HyperBand(time_attr="training_iteration", max_t=settings.max_iterations,
                     reduction_factor=settings.reduction_factor)


def _median(settings: TuneSettings) -> Any:
    from ray.tune.schedulers import MedianStoppingRule

    return MedianStoppingRule(time_attr="training_iteration", grace_period=settings.grace_period,
                              min_samples_required=3)


def _none(settings: TuneSettings) -> Any:
    from ray.tune.schedulers import FIFOScheduler

    return FIFOScheduler()


def _grace(settings: TuneSettings) -> int | None:
    return settings.grace_period if settings.grace_period < settings.max_iterations else None


def _hyperband_first(settings: TuneSettings) -> int | None:
    """The most aggressive bracket's first milestone, as Ray makes its brackets: s runs to
    round(log_rf(max_t)), the first milestone of bracket s is int(max_t / rf^s), and a bracket
    whose first milestone would be 0 is skipped (:mod:`.hyperband`)."""
    max_t, rf = settings.max_iterations, settings.reduction_factor
    brackets = round(math.log(max_t) / math.log(rf)) + 1
    first = min(r for r in (int(max_t * rf ** -s) for s in range(brackets)) if r > 0)
    return first if first < max_t else None


SCHEDULERS.add("asha", SchedulerInfo("asynchronous successive halving (default)", _asha,
                                     first_rung=_grace))
def _hyperband_pauses(settings: TuneSettings) -> tuple[int, ...]:
    from dmlsearch.search.tune.hyperband import milestones

    max_t = settings.max_iterations
    return tuple(sorted({m for bracket in milestones(max_t, settings.reduction_factor)
                         for m in bracket if m < max_t}))


SCHEDULERS.add("hyperband", SchedulerInfo("synchronous HyperBand brackets", _hyperband,
                                          first_rung=_hyperband_first,
                                          pauses_at=_hyperband_pauses))
SCHEDULERS.add("median", SchedulerInfo(
    "stop a trial below the median of the others at the same epoch", _median,
    first_rung=_grace))
SCHEDULERS.add("none", SchedulerInfo("no early stopping: every trial runs to the end", _none))
