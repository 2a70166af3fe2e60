"""The pure helpers of the benchmarks (the benchmarks themselves are never run by the tests)."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks.orchestration import epoch_split
from benchmarks.orchestration import fixed_cost_per_trial
from benchmarks.orchestration import learning_rates
from benchmarks.search_efficiency import best_at
from benchmarks.search_efficiency import epochs_to_target
from benchmarks.search_efficiency import one_at_a_time_sweep
from benchmarks.search_efficiency import quantiles
from benchmarks.search_efficiency import trajectory


def _score(point: dict) -> float:
    """A separable objective: best at a=2, b=30, c=0.1."""
    return -abs(point["a"] - 2) - abs(point["b"] - 30) / 10 - abs(point["c"] - 0.1)


def test_the_sweep_varies_one_parameter_at_a_time_and_keeps_the_best() -> None:
    grids = {"x": {"a": [1, 2, 3], "b": [10, 30], "c": [0.1, 0.5]}}
    start = {"x": {"loss": "x", "a": 1, "b": 10, "c": 0.5}}
    events = one_at_a_time_sweep(grids, start, _score, rng=random.Random(0), concurrency=2,
                                 epochs=3)
    done = [e for e in events if e["finished"]]
    assert len(events) == 3 * len(done)  # every trained point is 3 epochs of events
    assert max(done, key=lambda e: e["score"])["config"] == {"loss": "x", "a": 2, "b": 30,
                                                             "c": 0.1}
    # each stage adds only the points not trained yet: 1 start + (3 - 1) + (2 - 1) + (2 - 1)
    assert len(done) == 5
    firsts = {json_key(e["config"]) for e in done}
    assert len(firsts) == len(done)  # nothing trained twice


def json_key(point: dict) -> tuple:
    return tuple(sorted(point.items()))


def test_each_loss_is_swept_from_its_own_defaults() -> None:
    grids = {"x": {"a": [1, 2]}, "y": {"a": [1, 2], "d": [0, 1]}}
    start = {"x": {"loss": "x", "a": 1}, "y": {"loss": "y", "a": 2, "d": 0}}
    events = one_at_a_time_sweep(grids, start, lambda p: float(p["a"]), rng=random.Random(1),
                                 concurrency=4, epochs=1)
    configs = [e["config"] for e in events]
    assert {"loss": "x", "a": 1} in configs and {"loss": "y", "a": 2, "d": 0} in configs
    assert all(set(c) == set(start[c["loss"]]) for c in configs)


def test_epochs_to_target_counts_every_epoch_until_a_finished_trial_reaches_it() -> None:
    events = [{"score": 0.9, "finished": False},  # a pruned trial's score: not counted
              {"score": 0.5, "finished": True}, {"score": None, "finished": False},
              {"score": 0.95, "finished": True}]
    assert epochs_to_target(events, 0.8) == 4
    assert epochs_to_target(events, 0.99) == math.inf
    assert epochs_to_target(events, 0.6, mode="min") == 2
    assert trajectory(events) == [(2, 0.5), (4, 0.95)]
    assert best_at(trajectory(events), 3) == 0.5 and best_at(trajectory(events), 1) is None


def test_quantiles_allow_searches_that_never_reach_the_target() -> None:
    assert quantiles([1.0, 3.0, 2.0]) == (2.0, 1.5, 2.5)
    median, q1, q3 = quantiles([1.0, 2.0, math.inf, math.inf, math.inf])
    assert median == math.inf and q1 == 2.0 and q3 == math.inf


def test_orchestration_helpers() -> None:
    assert fixed_cost_per_trial(130.0, 120.0, 4) == pytest.approx(2.5)
    assert learning_rates(1) == [1e-3]
    rates = learning_rates(4)
    assert rates[0] == 5e-4 and rates[-1] == 4e-3 and rates == sorted(rates)
    split = epoch_split([5.0, 1.0, 2.0, 1.5])
    assert split == {"first": 5.0, "later_median": 1.5, "total": 9.5}
