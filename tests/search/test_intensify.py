"""Intensification (search/intensify.py): the best few trained again with a second seed, ranked
by their mean; a failed second fit keeps its first score with its reason; the seed-to-seed spread
and the tell-apart rule against direct computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dmlsearch.search.intensify import SECOND_SEED
from dmlsearch.search.intensify import Intensified
from dmlsearch.search.intensify import intensify
from dmlsearch.search.intensify import seed_spread
from dmlsearch.search.intensify import told_apart
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState


def _record(number: int, score: float, lr: float) -> TrialRecord:
    return TrialRecord(trial_id=f"ray{number}", config={"lr": lr, "seed": 5},
                       state=TrialState.COMPLETED, score=score, number=number, iterations=8)


def test_the_best_few_get_a_second_seed_and_the_pick_is_the_best_mean() -> None:
    ranked = [_record(3, 0.80, 1e-3), _record(7, 0.79, 2e-3), _record(9, 0.70, 3e-3)]
    asked: list[dict] = []
    second = {1e-3: 0.74, 2e-3: 0.79}  # the lucky first seed of t03 does not repeat

    def fit(config: dict) -> float:
        asked.append(config)
        return second[config["lr"]]

    fits = intensify(ranked, top=2, mode="max", fit=fit)
    assert [c["seed"] for c in asked] == [5 + SECOND_SEED] * 2  # only the top 2, seed + 1
    assert [f.name for f in fits] == ["t07", "t03"]  # 0.79 mean against 0.77
    assert fits[0].scores == [0.79, 0.79] and fits[0].seeds == [5, 6]
    assert fits[1].mean == pytest.approx(0.77)
    # a metric to minimise ranks the other way
    low = intensify(ranked, top=2, mode="min", fit=fit)
    assert [f.name for f in low] == ["t03", "t07"]


def test_a_failed_second_fit_keeps_the_first_score_and_says_why() -> None:
    def fit(config: dict) -> float:
        if config["lr"] == 1e-3:
            raise RuntimeError("loss became NaN at epoch 3")
        return float("nan")

    fits = intensify([_record(3, 0.8, 1e-3), _record(7, 0.7, 2e-3)], top=2, mode="max", fit=fit)
    assert [(f.name, f.scores, f.seeds) for f in fits] == [("t03", [0.8], [5]),
                                                           ("t07", [0.7], [5])]
    assert fits[0].reason == "RuntimeError: loss became NaN at epoch 3"
    assert fits[1].reason == "ValueError: its score was nan"
    assert seed_spread(fits) is None and told_apart(fits) is None


def test_spread_and_tell_apart_against_a_direct_computation() -> None:
    pairs = [(0.80, 0.76), (0.78, 0.77), (0.60, 0.63)]
    fits = [Intensified(f"r{i}", f"t{i:02d}", [0, 1], list(p)) for i, p in enumerate(pairs)]
    d = np.array([a - b for a, b in pairs])
    sigma = float(np.sqrt(np.mean(d ** 2) / 2))  # each fit's σ from paired differences
    assert seed_spread(fits) == pytest.approx(sigma)
    # best two means 0.78 and 0.775: 0.005 apart, against 2 standard errors of 2-seed means
    assert told_apart(fits) is (abs(0.78 - 0.775) > 2 * math.sqrt(sigma ** 2 / 2 * 2))
    assert told_apart(fits) is False
    far = [fits[0], Intensified("x", "t09", [0, 1], [0.40, 0.41])]
    assert told_apart(far) is True
    assert told_apart(fits[:1]) is None
