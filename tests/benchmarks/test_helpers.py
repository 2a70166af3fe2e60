"""The pure helpers of the benchmarks (the benchmarks themselves are never run by the tests)."""

from __future__ import annotations

import pytest

from benchmarks.orchestration import epoch_split
from benchmarks.orchestration import fixed_cost_per_trial
from benchmarks.orchestration import learning_rates
from benchmarks.search_efficiency import compute_to_target
from benchmarks.search_efficiency import one_at_a_time_sweep
from benchmarks.search_efficiency import target_of


def _score(point: dict) -> float:
    """A separable objective: best at a=2, b=30, c=0.1."""
    return -abs(point["a"] - 2) - abs(point["b"] - 30) / 10 - abs(point["c"] - 0.1)


def test_sweep_varies_one_parameter_at_a_time_and_keeps_the_best() -> None:
    grids = {"a": [1, 2, 3], "b": [10, 30], "c": [0.1, 0.5]}
    calls: list[list[dict]] = []

    def evaluate(points: list[dict]) -> list[float]:
        calls.append(points)
        return [_score(p) for p in points]

    scored, best = one_at_a_time_sweep(grids, {"a": 1, "b": 10, "c": 0.5}, evaluate)
    assert best == {"a": 2, "b": 30, "c": 0.1}
    # stage 1: all of a's values; then only the new value of each later parameter
    assert calls == [
        [{"a": 1, "b": 10, "c": 0.5}, {"a": 2, "b": 10, "c": 0.5}, {"a": 3, "b": 10, "c": 0.5}],
        [{"a": 2, "b": 30, "c": 0.5}],
        [{"a": 2, "b": 30, "c": 0.1}],
    ]
    assert [p for p, _ in scored] == [p for stage in calls for p in stage]
    assert len(scored) == 3 + 1 + 1  # points already trained are not trained again


def test_sweep_minimises_and_keeps_the_current_value_on_ties() -> None:
    scored, best = one_at_a_time_sweep({"a": [1, 2, 3]}, {"a": 2}, lambda ps: [5.0] * len(ps),
                                       mode="min")
    assert best == {"a": 2} and len(scored) == 3
    scored, best = one_at_a_time_sweep({"a": [1, 2, 3]}, {"a": 2},
                                       lambda ps: [float(p["a"]) for p in ps], mode="min")
    assert best == {"a": 1}


def test_sweep_needs_a_start_on_the_grid() -> None:
    with pytest.raises(ValueError, match="start point"):
        one_at_a_time_sweep({"a": [1, 2]}, {"a": 5}, lambda ps: [0.0] * len(ps))


def test_compute_to_target_counts_epochs_up_to_the_first_trial_that_reaches_it() -> None:
    trials = [(4, 0.50), (1, None), (4, 0.80), (4, 0.95), (4, 0.99)]
    assert compute_to_target(trials, 0.80) == 9
    assert compute_to_target(trials, 0.95) == 13
    assert compute_to_target(trials, 0.999) is None
    assert compute_to_target([(2, 0.3), (3, 0.1)], 0.2, mode="min") == 5
    assert compute_to_target([], 0.1) is None


def test_target_is_99_percent_of_the_best() -> None:
    assert target_of(0.5) == pytest.approx(0.495)
    assert target_of(0.1, mode="min") == pytest.approx(0.1 / 0.99)


def test_orchestration_helpers() -> None:
    assert fixed_cost_per_trial(130.0, 120.0, 4) == pytest.approx(2.5)
    assert learning_rates(1) == [1e-3]
    rates = learning_rates(4)
    assert rates[0] == 5e-4 and rates[-1] == 4e-3 and rates == sorted(rates)
    split = epoch_split([5.0, 1.0, 2.0, 1.5])
    assert split == {"first": 5.0, "later_median": 1.5, "total": 9.5}


def test_repeats_counts_configurations_trained_again() -> None:
    from benchmarks.search_efficiency import repeats

    points = [{"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 2, "b": 2}, {"a": 1, "b": 2}]
    assert repeats(points) == 2
    assert repeats([]) == 0
