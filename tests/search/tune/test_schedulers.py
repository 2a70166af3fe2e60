"""``--scheduler``: every name builds the Ray Tune scheduler it promises, on the search's time
axis (epochs over all folds and repeats)."""

from __future__ import annotations

import pytest

from dmlsearch.search.tune import SCHEDULERS
from dmlsearch.trainables.errors import UserError
from tests.helpers import tune_settings


@pytest.mark.parametrize(("name", "kind"), [
    ("asha", "AsyncHyperBandScheduler"), ("hyperband", "HyperBandScheduler"),
    ("median", "MedianStoppingRule"), ("none", "FIFOScheduler"),
])
def test_every_scheduler_name_builds_its_ray_scheduler(name: str, kind: str) -> None:
    built = type(SCHEDULERS.get(name).make(tune_settings(scheduler=name)))
    assert kind in [cls.__name__ for cls in built.__mro__]  # HyperBand: Ray's, repaired


def test_asha_uses_the_searchs_horizon_and_rungs() -> None:
    asha = SCHEDULERS.get("asha").make(tune_settings(max_iterations=9, grace_period=1,
                                                     reduction_factor=3))
    assert asha._time_attr == "training_iteration" and asha._max_t == 9
    assert [milestone for milestone, _ in asha._brackets[0]._rungs] == [9, 3, 1]


def test_unknown_scheduler_lists_the_valid_names() -> None:
    with pytest.raises(UserError, match="expected one of: asha, hyperband, median, none"):
        SCHEDULERS.get("pbt")


@pytest.mark.parametrize(("max_t", "rf"), [(12, 3), (12, 2), (8, 2), (27, 3), (100, 3),
                                           (4, 2), (3, 3), (2, 3), (1, 3)])
def test_hyperbands_first_rung_is_its_brackets_first_milestone(max_t: int, rf: int) -> None:
    """What the report calls the first rung (the Spearman check) is where the scheduler first
    decides, read from the brackets Ray builds."""
    settings = tune_settings(scheduler="hyperband", max_iterations=max_t, reduction_factor=rf)
    scheduler = SCHEDULERS.get("hyperband").make(settings)
    firsts = [scheduler._create_bracket(s)._cumul_r for s in range(scheduler._s_max_1)
              if scheduler._get_r0(s) > 0]
    expected = min(firsts) if min(firsts) < max_t else None
    assert SCHEDULERS.get("hyperband").first_rung(settings) == expected
