"""Which trials stop early (``--scheduler``): a registry of Ray Tune trial schedulers, each
registered where its factory is defined (:func:`register_scheduler`).

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

__all__ = ["DEFAULT_SCHEDULER", "SCHEDULERS", "SchedulerInfo", "make_scheduler", "max_trials",
           "register_scheduler"]

#: ``--scheduler``'s default (with the default sampler: benchmarks/search_efficiency.py's choice).
DEFAULT_SCHEDULER = "asha"


def _never(settings: TuneSettings) -> int | None:
    del settings
    return None


def _no_pauses(settings: TuneSettings) -> tuple[int, ...]:
    del settings
    return ()


@dataclasses.dataclass(frozen=True)
class SchedulerInfo:
    description: str
    make: Callable[[TuneSettings], Any]
    # the first epoch (over folds) at which it may stop a trial; None: it never does
    first_rung: Callable[[TuneSettings], int | None] = _never
    # the epochs (over folds) at which it may pause a trial, to resume it later: a trial
    # saves a checkpoint there (besides its regular ones); empty: it never pauses
    pauses_at: Callable[[TuneSettings], tuple[int, ...]] = _no_pauses
    # whether it stops a trial only by its decision on the trial's results, and judges a trial
    # it was told to keep again later, so that a chosen configuration can be kept to its end
    # (``TuneSettings.keep_to_end``, :mod:`.keep`)
    keeps: bool = False


SCHEDULERS: Registry[SchedulerInfo] = Registry("scheduler", option="--scheduler",
                                               fix="see `dmlsearch run --help`")


def register_scheduler(name: str, description: str, *,
                       first_rung: Callable[[TuneSettings], int | None] = _never,
                       pauses_at: Callable[[TuneSettings], tuple[int, ...]] = _no_pauses,
                       keeps: bool = False) -> Callable:
    """Decorator: the factory below is ``--scheduler name``; ``first_rung`` gives the first
    epoch at which it may stop a trial (by default it never does), ``pauses_at`` the epochs at
    which it may pause one (by default none), ``keeps`` whether it stops trials only by its
    decisions on their results and judges a kept trial again later (a configuration can then
    be kept to its end: :mod:`.keep`)."""
    return SCHEDULERS.register(name, lambda make: SchedulerInfo(description, make, first_rung,
                                                                pauses_at, keeps))


def make_scheduler(settings: TuneSettings) -> Any:
    """The scheduler of ``settings.scheduler``; with ``settings.keep_to_end`` and a scheduler
    that can keep them (``keeps``), those configurations are trained to their end
    (:class:`~.keep.KeepToEnd`)."""
    info = SCHEDULERS.get(settings.scheduler)
    scheduler = info.make(settings)
    if not settings.keep_to_end or not info.keeps or info.first_rung(settings) is None:
        return scheduler
    from dmlsearch.search.tune.keep import KeepToEnd

    return KeepToEnd(scheduler, [dict(point) for point in settings.keep_to_end],
                     settings.max_iterations)


def max_trials(trials: int, settings: TuneSettings) -> int:
    """The most trials a budget of ``trials`` trials' worth of epochs can start: those epochs
    over the fewest a trial can train (the scheduler's first rung; max_t when it stops none)."""
    first = SCHEDULERS.get(settings.scheduler).first_rung(settings) or settings.max_iterations
    return max(1, math.ceil(trials * settings.max_iterations / max(1, first)))


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


@register_scheduler(DEFAULT_SCHEDULER, "asynchronous successive halving", first_rung=_grace,
                    keeps=True)
def _asha(settings: TuneSettings) -> Any:
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="training_iteration", max_t=settings.max_iterations,
                         grace_period=settings.grace_period,
                         reduction_factor=settings.reduction_factor)


@register_scheduler("soft-asha", "ASHA that stops a trial only when it is further below the "
                    "cut-off than early scores were seen to be wrong by", first_rung=_grace,
                    keeps=True)
def _soft_asha(settings: TuneSettings) -> Any:
    """:class:`~dmlsearch.search.tune.soft_asha.SoftASHA`: ASHA's rungs, PASHA's soft
    ranking."""
    from dmlsearch.search.tune.soft_asha import SoftASHA

    return SoftASHA(time_attr="training_iteration", max_t=settings.max_iterations,
                    grace_period=settings.grace_period,
                    reduction_factor=settings.reduction_factor)


def _hyperband_pauses(settings: TuneSettings) -> tuple[int, ...]:
    from dmlsearch.search.tune.hyperband import milestones

    max_t = settings.max_iterations
    return tuple(sorted({m for bracket in milestones(max_t, settings.reduction_factor)
                         for m in bracket if m < max_t}))


@register_scheduler("hyperband", "synchronous HyperBand brackets", first_rung=_hyperband_first,
                    pauses_at=_hyperband_pauses)
def _hyperband(settings: TuneSettings) -> Any:
    from dmlsearch.search.tune.hyperband import HyperBand

    return HyperBand(time_attr="training_iteration", max_t=settings.max_iterations,
                     reduction_factor=settings.reduction_factor)


@register_scheduler("median", "stop a trial below the median of the others at the same epoch",
                    first_rung=_grace)
def _median(settings: TuneSettings) -> Any:
    from ray.tune.schedulers import MedianStoppingRule

    return MedianStoppingRule(time_attr="training_iteration", grace_period=settings.grace_period,
                              min_samples_required=3)


@register_scheduler("none", "no early stopping: every trial runs to the end")
def _none(settings: TuneSettings) -> Any:
    from ray.tune.schedulers import FIFOScheduler

    return FIFOScheduler()
