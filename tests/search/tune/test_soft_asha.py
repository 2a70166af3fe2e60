"""``--scheduler soft-asha``: ASHA's rungs and cut-off, but a trial within the measured noise of
the cut-off continues; before the search has seen how trials went on from a rung it decides
there as ASHA; ε is the spread of those gains (checked by hand)."""

from __future__ import annotations

import numpy as np
import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from dmlsearch.search.tune import SCHEDULERS
from dmlsearch.search.tune.soft_asha import MIN_GAINS
from dmlsearch.search.tune.soft_asha import noise_margin
from tests.helpers import tune_settings

CONTINUE, STOP = TrialScheduler.CONTINUE, TrialScheduler.STOP


def _scheduler():  # type: ignore[no-untyped-def]
    scheduler = SCHEDULERS.get("soft-asha").make(tune_settings(
        scheduler="soft-asha", max_iterations=9, grace_period=1, reduction_factor=3))
    scheduler.set_search_properties("score", "max")
    return scheduler


def _report(scheduler, trial: Trial, scores: list[float]) -> str:  # type: ignore[no-untyped-def]
    action = CONTINUE
    for step, score in enumerate(scores, 1):
        action = scheduler.on_trial_result(None, trial, {"training_iteration": step,
                                                         "score": score})
        if action == STOP:
            break
    return action


def _trial() -> Trial:
    return Trial("__fake", stub=True)


def test_the_margin_is_the_median_absolute_deviation_of_the_gains() -> None:
    assert noise_margin([0.1, 0.2, 0.3]) == 0.0  # fewer than MIN_GAINS: ASHA's test
    gains = [0.10, 0.12, 0.20, 0.11, 0.30]
    # median 0.12; absolute deviations 0.02, 0, 0.08, 0.01, 0.18: their median 0.02
    assert noise_margin(gains) == pytest.approx(0.02)
    assert MIN_GAINS == 4


def test_before_gains_from_a_rung_were_seen_it_decides_there_as_asha() -> None:
    scheduler = _scheduler()
    for _ in range(3):  # good trials, recorded at rung 1 but not yet at rung 3
        scheduler.on_trial_add(None, trial := _trial())
        assert _report(scheduler, trial, [0.9]) == CONTINUE
    scheduler.on_trial_add(None, close := _trial())
    assert _report(scheduler, close, [0.89]) == STOP  # as ASHA: below the cut-off 0.9
    scheduler.on_trial_add(None, level := _trial())
    assert _report(scheduler, level, [0.9]) == CONTINUE


def test_a_trial_within_the_noise_continues_and_one_beyond_it_stops() -> None:
    scheduler = _scheduler()
    # five trials seen from rung 1 to rung 3: gains 0.10, 0.12, 0.20, 0.11, 0.30 (ε = 0.02)
    for start, gain in zip((0.50, 0.52, 0.54, 0.56, 0.58), (0.10, 0.12, 0.20, 0.11, 0.30)):
        scheduler.on_trial_add(None, trial := _trial())
        _report(scheduler, trial, [start, start + gain / 2, start + gain])
    recorded = [0.50, 0.52, 0.54, 0.56, 0.58]
    cutoff = float(np.percentile(recorded, 100 * 2 / 3))  # ASHA's: the top third (η = 3)
    assert cutoff == pytest.approx(0.54 + 0.02 * 2 / 3)
    scheduler.on_trial_add(None, near := _trial())
    assert _report(scheduler, near, [cutoff - 0.015]) == CONTINUE  # within ε below the cut-off
    recorded.append(cutoff - 0.015)
    cutoff = float(np.percentile(recorded, 100 * 2 / 3))
    scheduler.on_trial_add(None, far := _trial())
    assert _report(scheduler, far, [cutoff - 0.025]) == STOP  # further below than ε
    assert SCHEDULERS.get("soft-asha").first_rung(tune_settings(
        scheduler="soft-asha", max_iterations=9, grace_period=1)) == 1
