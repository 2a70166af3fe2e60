"""The retrain's statistics: the 95% interval against a t table; a configuration to retrain
takes the trial's best validation epoch."""

from __future__ import annotations

import math

import pytest

from dmlsearch.search.finish.retrain_runs import retrain_config
from dmlsearch.search.results import mean_ci95
from tests.helpers import trial_record


def test_mean_ci95_against_the_t_table() -> None:
    # Two-sided 95% Student-t quantiles (any statistics table): df 1 → 12.706, df 4 → 2.776.
    values = [0.70, 0.74]
    mean, half = mean_ci95(values)
    sd = math.sqrt(sum((v - 0.72) ** 2 for v in values) / 1)
    assert mean == pytest.approx(0.72) and half == pytest.approx(12.706 * sd / math.sqrt(2),
                                                                  rel=1e-4)
    values = [0.61, 0.64, 0.60, 0.66, 0.63]
    m = sum(values) / 5
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / 4)
    assert mean_ci95(values) == pytest.approx((m, 2.776 * sd / math.sqrt(5)), rel=1e-3)
    assert mean_ci95([0.5]) == (0.5, 0.0)


def test_the_retrain_trains_for_the_best_validation_epoch() -> None:
    assert retrain_config(trial_record("a", 0.5, best_epoch=4, config={"epochs": 9}))[
        "epochs"] == 4
    assert retrain_config(trial_record("a", 0.5, best_epoch=None, config={"epochs": 9}))[
        "epochs"] == 9
    assert retrain_config(trial_record("a", 0.5, best_epoch=None))["epochs"] == 8  # default
